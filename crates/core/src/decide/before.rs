//! Where traffic was before this decision, as the last status says: the input to the holds, the
//! none-ready fallback and transition detection.

use crate::{
    api::{
        Phase, Timestamp,
        conditions::{PINNED, READY, pinned, ready},
    },
    last_status::LastStatus,
    policy::ValidPolicy,
};

/// Where traffic was before this decision, as the last status recorded it (not a status: a
/// reading of [`LastStatus`] against the current spec).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Before {
    /// Whether there is a previous status with a phase (a first decision announces nothing).
    pub decided: bool,
    /// The previous phase.
    pub phase: Option<Phase>,
    /// The previous weights, one per backend of the current spec (absent backends weigh 0);
    /// `None` without a previous status listing backends.
    pub weights: Option<Vec<i32>>,
    /// The backends that were active.
    pub active: Vec<String>,
    /// Whether traffic was on the primary (or nothing says it left).
    pub on_primary: bool,
    /// Whether the `Pinned` condition said the pinned backend was not ready.
    pub pinned_not_ready: bool,
    /// Whether a failback ramp was under way.
    pub ramping: bool,
    /// When traffic last left the primary.
    pub last_failover_time: Option<Timestamp>,
    /// When traffic last returned to the primary.
    pub last_failback_time: Option<Timestamp>,
    /// With `spec.capacity`: the demand last recorded.
    pub demand: Option<i64>,
}

impl Before {
    /// Reads the previous status against the current list of backends.
    pub fn of(policy: &ValidPolicy, status: Option<&LastStatus>) -> Self {
        let Some(status) = status else {
            return Self {
                on_primary: true,
                ..Self::default()
            };
        };
        let primary = policy.backends.first().map(|b| b.reference.name.as_str());
        let weights = (!status.backends.is_empty()).then(|| {
            policy
                .backend_names()
                .map(|name| status.backend(name).map_or(0, |b| b.weight.max(0)))
                .collect()
        });
        let active: Vec<String> = status.active().map(String::from).collect();
        Self {
            decided: status.phase.is_some(),
            phase: status.phase,
            weights,
            // A failover with too little capacity leaves the unserved share on the primary:
            // traffic has left it all the same.
            on_primary: (active.is_empty() || active.iter().any(|a| Some(a.as_str()) == primary))
                && !status.has_reason(READY, ready::FAILED_OVER),
            active,
            ramping: status.has_reason(READY, ready::FAILBACK_RAMP)
                || status.has_reason(READY, ready::FAILBACK_BY_CAPACITY),
            pinned_not_ready: status.has_reason(PINNED, pinned::PINNED_BACKEND_NOT_READY),
            last_failover_time: status.last_failover_time,
            last_failback_time: status.last_failback_time,
            demand: status.demand,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        api::Strategy,
        decide::tests::{backend_status as backend, valid},
    };

    #[test]
    fn no_status_means_traffic_never_left_the_primary() {
        let policy = valid(Strategy::Ordered, &[("a", None)]);
        let p = Before::of(&policy, None);
        assert!(p.on_primary && !p.decided && p.weights.is_none());
    }

    #[test]
    fn weights_are_read_against_the_current_backends() {
        // `b` was removed from the spec and `c` added since the status was written.
        let policy = valid(Strategy::Ordered, &[("a", None), ("c", None)]);
        let status = LastStatus::of(&crate::api::FailoverPolicyStatus {
            phase: Some(Phase::FailedOver),
            active_backends: vec!["a".into()],
            backends: vec![backend("web-primary", 0), backend("a", 1), backend("b", 5)],
            ..Default::default()
        });
        let p = Before::of(&policy, Some(&status));
        assert_eq!(p.weights, Some(vec![0, 1, 0]));
        assert!(p.decided && !p.on_primary);
        assert_eq!(p.active, vec!["a".to_string()]);
    }
}
