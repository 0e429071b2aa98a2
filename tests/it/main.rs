//! The integration tests, one binary: one module per feature, against a real local control plane
//! (started once for the whole binary by `hack/control-plane.sh`, see [`support`]), a real node
//! and a real proxy where a feature needs them.
//!
//! Run one module with `cargo test --test it <module>::`, one test with its full path.

mod support;

mod admin_endpoints;
mod architecture;
mod capacity;
mod capacity_traffic;
mod chart;
mod chart_monitoring;
mod chart_values;
mod claims;
mod control_plane;
mod crd;
mod demo;
mod doc_names;
mod docs;
mod drills;
mod gitops_health;
mod groups;
mod health_queries;
mod holds_and_ramps;
mod leader_election;
mod missing_crds;
mod names;
mod node;
mod notifications;
mod plugin;
mod plugin_deps;
mod readiness;
mod recovery;
mod remote_clusters;
mod route_kinds;
mod route_ownership;
mod route_ref;
mod samples;
mod scaling_restores;
mod shards;
mod strategies;
mod suspend_and_pin;
mod tenancy;
mod tenant_costs;
mod tenant_limits;
mod tiers;
mod traffic;
mod traffic_l4;
mod validation;
mod warning_events;
mod what_if;
mod what_if_rules;
mod writes_and_scale;
