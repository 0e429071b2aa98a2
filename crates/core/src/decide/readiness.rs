//! Rule 1: which backends are ready, since when, and why not.
//!
//! A backend is ready when its Service exists, at least `minReadyEndpoints` of its endpoints are
//! ready, and (when set) at least `minReadyRatio` of them. Its readiness keeps the time it last
//! changed from the previous status while it does not change. While its counts are not known yet
//! (a remote cluster that has not answered since the controller started), the previous status's
//! readiness stands.

use chrono::{DateTime, Utc};

use crate::{
    backend::BackendRef,
    last_status::LastStatus,
    observation::{Availability, BackendObservation},
    policy::{ReadinessRule, ValidPolicy},
};

/// What is known of one backend.
#[derive(Clone, Debug, PartialEq)]
pub struct BackendState {
    /// Which backend.
    pub backend: BackendRef,
    /// What the caches say of it.
    pub observation: BackendObservation,
    /// Whether it counts as ready.
    pub ready: bool,
    /// When its readiness last changed (or was first seen).
    pub since: DateTime<Utc>,
    /// Why it is not ready, when it is not.
    pub not_ready: Option<String>,
}

/// The state of every backend of a policy, primary first.
pub fn assess(
    policy: &ValidPolicy,
    observations: &[BackendObservation],
    previous: Option<&LastStatus>,
    now: DateTime<Utc>,
) -> Vec<BackendState> {
    policy
        .backend_refs()
        .enumerate()
        .map(|(i, backend)| {
            let name = backend.name.as_str();
            let observation = observations.get(i).cloned().unwrap_or_default();
            if let Some(last) = last_known(&observation, previous, backend, now) {
                return last;
            }
            let healthy = healthy(policy, &observation);
            let ready = is_ready(&observation, policy.readiness) && healthy.is_none();
            let since = previous
                .and_then(|p| p.backend(name))
                .filter(|b| b.ready == ready)
                .map_or(now, |b| b.since.map_or(now, |t| t.0));
            let not_ready = (!ready).then(|| {
                healthy
                    .clone()
                    .filter(|_| is_ready(&observation, policy.readiness))
                    .unwrap_or_else(|| not_ready_message(&observation, policy.readiness))
            });
            BackendState {
                backend: backend.clone(),
                observation,
                ready,
                since,
                not_ready,
            }
        })
        .collect()
}

/// The state the previous status recorded, for a backend whose counts are not known yet.
fn last_known(
    observation: &BackendObservation,
    previous: Option<&LastStatus>,
    backend: &BackendRef,
    now: DateTime<Utc>,
) -> Option<BackendState> {
    if !matches!(observation.availability, Availability::Awaiting { .. }) {
        return None;
    }
    let last = previous?.backend(&backend.name)?;
    Some(BackendState {
        backend: backend.clone(),
        observation: BackendObservation {
            service_exists: true,
            ready_endpoints: last.ready_endpoints,
            total_endpoints: last.total_endpoints,
            ..observation.clone()
        },
        ready: last.ready,
        since: last.since.map_or(now, |t| t.0),
        not_ready: (!last.ready).then(|| last.message.as_deref().unwrap_or_default().to_string()),
    })
}

/// Why a backend's health reading makes it not ready, if it does: the value out of the
/// threshold (a failing query keeps the last value; a query that never answered gives no
/// verdict).
pub fn healthy(policy: &ValidPolicy, o: &BackendObservation) -> Option<String> {
    let health = policy.health.as_ref()?;
    let sample = o.health.as_ref()?.sample.as_ref()?;
    if health.healthy(sample.value) {
        return None;
    }
    let value = sample
        .value
        .map_or("no data".to_string(), |v| v.to_string());
    Some(format!(
        "health query gave {value}, not {} (read at {})",
        health.threshold(),
        crate::api::Timestamp(sample.read_at)
    ))
}

/// A backend is ready when its Service exists, enough of its endpoints are ready, (when a ratio
/// is set) at least that share of them, and the counts can be trusted (a remote cluster answers).
pub fn is_ready(o: &BackendObservation, rule: ReadinessRule) -> bool {
    let ratio_ok = rule.min_ready_ratio <= 0.0
        || (o.total_endpoints > 0
            && f64::from(o.ready_endpoints) >= rule.min_ready_ratio * f64::from(o.total_endpoints));
    o.availability.untrusted().is_none()
        && o.service_exists
        && o.ready_endpoints >= rule.min_ready_endpoints
        && ratio_ok
}

/// Why a backend is not ready, in a few words.
pub fn not_ready_message(o: &BackendObservation, rule: ReadinessRule) -> String {
    if let Some(why) = o.availability.untrusted() {
        why.to_string()
    } else if !o.service_exists {
        "Service not found".to_string()
    } else if o.slices == 0 {
        "Service has no EndpointSlices".to_string()
    } else {
        format!(
            "{} of {} endpoints ready, {} needed",
            o.ready_endpoints, o.total_endpoints, rule.min_ready_endpoints
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: ReadinessRule = ReadinessRule {
        min_ready_endpoints: 1,
        min_ready_ratio: 0.0,
    };

    fn seen(ready: i32, total: i32) -> BackendObservation {
        BackendObservation::counted(ready, total)
    }

    #[test]
    fn ready_needs_the_service_enough_endpoints_and_the_ratio() {
        assert!(is_ready(&seen(1, 3), ONE));
        assert!(!is_ready(&BackendObservation::default(), ONE));
        let two = ReadinessRule {
            min_ready_endpoints: 2,
            ..ONE
        };
        assert!(!is_ready(&seen(1, 3), two));
        let half = ReadinessRule {
            min_ready_ratio: 0.5,
            ..ONE
        };
        assert!(!is_ready(&seen(1, 3), half));
        assert!(is_ready(&seen(2, 4), half));
    }

    #[test]
    fn counts_not_known_yet_keep_the_readiness_the_previous_status_recorded() {
        use crate::api::BackendStatus;
        let awaiting = BackendObservation {
            availability: Availability::Awaiting {
                why: "cluster east has not answered yet".into(),
                as_of: None,
            },
            ..BackendObservation::default()
        };
        let previous = LastStatus::of(&crate::api::FailoverPolicyStatus {
            backends: vec![BackendStatus {
                ready_endpoints: 2,
                total_endpoints: 3,
                ..crate::decide::tests::backend_status("web-east", 1)
            }],
            ..Default::default()
        });
        let now = Utc::now();
        let kept = last_known(
            &awaiting,
            Some(&previous),
            &BackendRef::service("web-east"),
            now,
        )
        .expect("kept");
        assert!(kept.ready);
        assert_eq!(kept.observation.ready_endpoints, 2);
        assert_eq!(
            last_known(&awaiting, None, &BackendRef::service("web-east"), now),
            None,
            "nothing to keep"
        );
        let known = BackendObservation::counted(0, 3);
        assert_eq!(
            last_known(
                &known,
                Some(&previous),
                &BackendRef::service("web-east"),
                now
            ),
            None
        );
    }

    #[test]
    fn counts_from_a_cluster_that_does_not_answer_are_not_ready_with_its_reason() {
        let stale = BackendObservation {
            availability: Availability::Unavailable {
                why: "cluster east unreachable for 41s".into(),
                as_of: None,
            },
            ..seen(3, 3)
        };
        assert!(!is_ready(&stale, ONE));
        assert_eq!(
            not_ready_message(&stale, ONE),
            "cluster east unreachable for 41s"
        );
    }

    #[test]
    fn messages_tell_missing_service_from_missing_slices_from_too_few_endpoints() {
        assert_eq!(
            not_ready_message(&BackendObservation::default(), ONE),
            "Service not found"
        );
        let no_slices = BackendObservation {
            service_exists: true,
            ..Default::default()
        };
        assert_eq!(
            not_ready_message(&no_slices, ONE),
            "Service has no EndpointSlices"
        );
        assert_eq!(
            not_ready_message(&seen(0, 3), ONE),
            "0 of 3 endpoints ready, 1 needed"
        );
    }
}
