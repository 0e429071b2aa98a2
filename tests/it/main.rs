//! The integration tests, one binary: one module per feature, against a real local control plane
//! (started once for the whole binary by `hack/control-plane.sh`, see [`support`]), a real node
//! and a real proxy where a feature needs them.
//!
//! Run one module with `cargo test --test it <module>::`, one test with its full path.

mod support;

mod api;
mod architecture;
mod chart;
mod control_plane;
mod demo;
mod e2e;
mod experience;
mod faults;
mod features;
mod health;
mod node;
mod operations;
mod plugin;
mod remote;
mod tenancy;
mod traffic;
