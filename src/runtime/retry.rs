//! The one backoff every failed write is retried with: kube-runtime's backoff crate, 200 ms
//! doubling up to 10 s, no jitter (one retry per policy, not a herd), never giving up; and the
//! work queue's [`Retries`], one such backoff per failing policy.

use std::{collections::HashMap, time::Duration};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use parking_lot::Mutex;

use failover_core::observation::PolicyKey;

/// First retry delay; it doubles per failure in a row.
pub const FIRST: Duration = Duration::from_millis(200);
/// Longest retry delay.
pub const MAX: Duration = Duration::from_secs(10);

/// The delays of one failing write, in order.
pub fn delays() -> ExponentialBackoff {
    ExponentialBuilder::default()
        .with_min_delay(FIRST)
        .with_max_delay(MAX)
        .with_factor(2.0)
        .without_max_times()
        .build()
}

/// The next delay of `delays`, to the whole millisecond (the backoff multiplies in floating
/// point).
pub fn next(delays: &mut ExponentialBackoff) -> Duration {
    delays.next().map_or(MAX, |delay| {
        Duration::from_millis(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX))
    })
}

/// The retry delays of the policies failing now, one backoff each: the work queue's, kept
/// beside the reconciles it runs. A policy is in it from its first failure in a row until it
/// succeeds.
#[derive(Default)]
pub struct Retries(Mutex<HashMap<PolicyKey, ExponentialBackoff>>);

impl Retries {
    /// The delay before retrying `policy`, which failed again: [`FIRST`] doubling up to [`MAX`].
    pub fn next(&self, policy: &PolicyKey) -> Duration {
        next(self.0.lock().entry(policy.clone()).or_insert_with(delays))
    }

    /// Forgets `policy`'s failures: it succeeded.
    pub fn forget(&self, policy: &PolicyKey) {
        self.0.lock().remove(policy);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_200ms_and_caps_at_10s() {
        let mut d = delays();
        let delays: Vec<Duration> = (0..9).map(|_| next(&mut d)).collect();
        assert_eq!(delays[0], Duration::from_millis(200));
        assert_eq!(delays[1], Duration::from_millis(400));
        assert_eq!(delays[5], Duration::from_millis(6400));
        assert_eq!(delays[6], Duration::from_secs(10));
        assert_eq!(delays[8], Duration::from_secs(10));
    }

    #[test]
    fn each_policy_backs_off_on_its_own_and_a_success_starts_it_over() {
        let retries = Retries::default();
        let (a, b) = (PolicyKey::new("ns", "a"), PolicyKey::new("ns", "b"));
        assert_eq!(retries.next(&a), FIRST);
        assert_eq!(retries.next(&a), FIRST * 2);
        assert_eq!(retries.next(&b), FIRST);
        retries.forget(&a);
        assert_eq!(retries.next(&a), FIRST);
    }
}
