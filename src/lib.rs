//! A Kubernetes controller that fails traffic over between backend Services.
//!
//! Users declare a [`api::FailoverPolicy`]; the controller watches the readiness of its backends
//! through EndpointSlices and owns a generated route (an SMI TrafficSplit or a Gateway API
//! HTTPRoute) whose weights send the traffic to the primary while it is ready and to the
//! secondaries otherwise.
//!
//! Data flows one way; each step is a module of its own:
//!
//! | step | module | what it does |
//! |---|---|---|
//! | watch | [`watch`], [`controller`] | list and watch, with backoff; wake the policies concerned |
//! | observe | [`observe`] | keep small facts: endpoint counts, route views, the index |
//! | validate | [`validate`] | a [`validate::ValidPolicy`], every value parsed, or the problems |
//! | gather | [`gather`] | read what a decision needs from the caches |
//! | decide | [`decide`] | pure: weights, holds, transition, conditions |
//! | apply | [`apply`] | write the route; an [`apply::Applied`] outcome |
//! | status | [`status`] | pure: the one place a status is built |
//! | write | [`write`] | queue the status (written in the background), Events, metrics |
//!
//! [`reconcile`] sequences the steps; [`wake`] turns an observed change into the policies to
//! reconcile, and [`runner`] runs them (one reconcile per policy at a time). Beside the local
//! watches, two more sources feed the gather step: [`remote`] (readiness read from other
//! clusters, and their liveness) and [`health`] (Prometheus queries per backend). Around them: [`api`] (the CRD types and their rules), [`route`] (the route
//! kinds), [`writer`] (the leader-gated door for writes), [`recent`] (memory of recent writes),
//! [`leader`], [`metrics`], [`admin`], [`telemetry`], [`crd`].

pub mod admin;
pub mod api;
pub mod apply;
pub mod controller;
pub mod crd;
pub mod decide;
pub mod gather;
pub mod health;
pub mod leader;
pub mod metrics;
pub mod observe;
pub mod recent;
pub mod reconcile;
pub mod remote;
pub mod route;
pub mod runner;
pub mod status;
pub mod telemetry;
pub mod validate;
pub mod wake;
pub mod watch;
pub mod write;
pub mod writer;
