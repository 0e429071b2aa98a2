//! A policy in the form the pipeline uses: every value of its spec parsed once, by the validate
//! step. The sources that need part of it (the health pollers) and every later step read these
//! types; only [`crate::validate`] builds them.

use std::{fmt, sync::Arc, time::Duration};

use compact_str::CompactString;

use crate::{
    api::{NoData, Strategy, WhenNoneReady},
    backend::BackendRef,
    health_query::HealthQuery,
    observation::RemoteService,
    route::RouteTarget,
};

/// One problem with a policy, named by its field path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecProblem {
    /// Path of the offending field, e.g. `spec.secondaries[1].service`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for SpecProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// A policy as validated once per generation: its valid form, or its problems.
pub type Validated = Result<Arc<ValidPolicy>, Arc<[SpecProblem]>>;

/// A backend of a valid policy.
#[derive(Clone, Debug, PartialEq)]
pub struct Backend {
    /// What it is (a Service), by kind and name, in the policy's namespace.
    pub reference: BackendRef,
    /// Its weight under `Weighted` (1 when unset).
    pub weight: i32,
    /// Its priority tier: traffic leaving the primary goes to the lowest tier with a ready
    /// backend. `Ordered` puts each secondary in a tier of its own (its place in the list);
    /// `Equal` and `Weighted` put them in the tier they name (0 when unset). The primary's is 0.
    pub tier: u8,
    /// Where its readiness is read from: its own Service, or one in another cluster.
    pub remote: Option<Box<RemoteService>>,
    /// The site it runs in, as failover groups name sites: the one the spec names, else the
    /// cluster its readiness is read from (none: a group routes nothing to it).
    pub site: Option<CompactString>,
    /// With `spec.capacity`: requests per second one of its ready endpoints serves.
    pub per_endpoint: Option<i32>,
    /// With `spec.capacity.scale`: its workload, scaled before traffic moves to it (never the
    /// primary's). Boxed: most backends have none, and every policy holds its backends.
    pub scale_target: Option<Box<crate::api::ScaleTarget>>,
}

/// A hold (`failoverAfter` or `failbackAfter`): as parsed, and as written.
#[derive(Clone, Debug, PartialEq)]
pub struct Hold {
    /// The duration.
    pub after: Duration,
    /// The text the user wrote, for messages.
    pub written: CompactString,
}

/// When a backend counts as ready.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReadinessRule {
    /// Ready endpoints needed (at least 1).
    pub min_ready_endpoints: i32,
    /// Share of endpoints that must be ready (0 when unset).
    pub min_ready_ratio: f64,
}

/// A policy that passed validation, every value parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidPolicy {
    /// Namespace of the policy.
    pub namespace: CompactString,
    /// Name of the policy.
    pub name: CompactString,
    /// The apex Service.
    pub service: CompactString,
    /// The backends in priority order: the primary first, then the secondaries.
    pub backends: Box<[Backend]>,
    /// How the secondaries share traffic.
    pub strategy: Strategy,
    /// With `Proportional`: the overprovisioning factor.
    pub overprovisioning_factor: f64,
    /// What happens when no backend is ready.
    pub when_none_ready: WhenNoneReady,
    /// The route is frozen.
    pub suspend: bool,
    /// Index (into `backends`) of the pinned backend.
    pub pin: Option<usize>,
    /// A drill: all traffic to one backend until an end time.
    pub drill: Option<Drill>,
    /// When a backend is ready.
    pub readiness: ReadinessRule,
    /// `failoverAfter`.
    pub failover_after: Hold,
    /// `failbackAfter`.
    pub failback_after: Hold,
    /// The route this policy owns.
    pub route: RouteTarget,
    /// A gradual failback, when set.
    pub ramp: Option<Box<Ramp>>,
    /// Health beyond readiness, when set.
    pub health: Option<Box<Health>>,
    /// What each backend can serve, when set.
    pub capacity: Option<Box<Capacity>>,
    /// Who is told of its transitions, and how many its history keeps, when set.
    pub notifications: Option<Box<crate::api::NotificationsSpec>>,
}

/// `spec.capacity`, parsed: scaling (what one ready endpoint of each backend serves is the
/// backend's own [`Backend::per_endpoint`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Capacity {
    /// Scaling the secondaries before traffic moves to them, when set.
    pub scale: Option<Scale>,
    /// Where a failover's unserved share goes.
    pub unserved: crate::api::Unserved,
}

/// `spec.capacity.scale` (each backend's workload is its own [`Backend::scale_target`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Scale {
    /// How long traffic waits for the scaled secondaries after the primary turned not ready.
    pub deadline: Hold,
    /// The most replicas set on one workload.
    pub max_replicas: i32,
}

/// A drill (`spec.drill`): all traffic to one backend until `until`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drill {
    /// Index (into `backends`) of the backend that takes the traffic.
    pub to: usize,
    /// When the drill ends.
    pub until: chrono::DateTime<chrono::Utc>,
    /// Whether it moves traffic to a backend that is not ready.
    pub force: bool,
}

/// A metric that must stay within a threshold for a backend to count as ready.
#[derive(Clone, Debug, PartialEq)]
pub struct Health {
    /// Prometheus' address, when the policy sets one.
    pub address: Option<String>,
    /// The query, parsed within its cost limits, with `{{service}}` and `{{namespace}}` to
    /// fill in.
    pub query: Arc<HealthQuery>,
    /// The threshold.
    pub bound: Bound,
    /// How often the queries run.
    pub interval: Hold,
    /// What no data means.
    pub no_data: NoData,
}

/// A health threshold.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Bound {
    /// Healthy while the value is at most this.
    Max(f64),
    /// Healthy while the value is at least this.
    Min(f64),
}

impl Health {
    /// Whether a value (`None`: no data) is healthy.
    pub fn healthy(&self, value: Option<f64>) -> bool {
        match (value, self.bound) {
            (None, _) => self.no_data == NoData::Healthy,
            (Some(v), Bound::Max(max)) => v <= max,
            (Some(v), Bound::Min(min)) => v >= min,
        }
    }

    /// The threshold in words, e.g. `at most 0.05`.
    pub fn threshold(&self) -> String {
        match self.bound {
            Bound::Max(max) => format!("at most {max}"),
            Bound::Min(min) => format!("at least {min}"),
        }
    }
}

/// A gradual failback: the primary's share at each step, and how long each lasts.
#[derive(Clone, Debug, PartialEq)]
pub struct Ramp {
    /// The primary's share at each step, in percent, increasing, the last 100.
    pub steps: Box<[i32]>,
    /// How long each step lasts.
    pub every: Hold,
}

impl ValidPolicy {
    /// The primary's name.
    pub fn primary(&self) -> &str {
        self.backends
            .first()
            .map_or("", |b| b.reference.name.as_str())
    }

    /// The backends' names, primary first.
    pub fn backend_names(&self) -> impl Iterator<Item = &str> {
        self.backends.iter().map(|b| b.reference.name.as_str())
    }

    /// The workloads `spec.capacity.scale` names, by backend index.
    pub fn scale_targets(&self) -> impl Iterator<Item = (usize, &crate::api::ScaleTarget)> + Clone {
        let scale = self.capacity.as_ref().is_some_and(|c| c.scale.is_some());
        self.backends
            .iter()
            .enumerate()
            .filter(move |_| scale)
            .filter_map(|(i, b)| Some((i, &**b.scale_target.as_ref()?)))
    }

    /// The backends, primary first.
    pub fn backend_refs(&self) -> impl Iterator<Item = &BackendRef> {
        self.backends.iter().map(|b| &b.reference)
    }
}
