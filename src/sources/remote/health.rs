//! The liveness of one remote cluster: when it last answered (a watch event or the periodic
//! probe), and what that means for the readiness read from it.
//!
//! - until it first answers, its backends keep the readiness the policies' status last recorded
//!   (so a restart of the controller moves no traffic), for at most `staleAfter`;
//! - once it has not answered within `staleAfter` of the start, or has been unreachable for longer
//!   than its `staleAfter`, its backends count as not ready, with the reason;
//! - within `staleAfter` of a silence the last known readiness stands (no flap on a blip);
//! - unreachable means: every contact since the first failed one failed. The time is counted from
//!   that first failure, not from the last answer: the last answer can be a whole probe period
//!   (or, on a loaded machine, a slow probe) older than the outage, and counting from it would
//!   fail over before `staleAfter` has passed;
//! - when it answers again after going stale, its readiness is re-read (its watches relist)
//!   before it counts again.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

/// Where a cluster stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// It has not answered yet, and `staleAfter` has not passed since it was declared.
    Connecting,
    /// It has not answered within `staleAfter` of being declared.
    Unanswered,
    /// It answers; its readiness is current (or within `staleAfter` of its last answer).
    Fresh,
    /// It has been unreachable for longer than `staleAfter`.
    Stale,
    /// It answers again; its readiness is being re-read.
    Rereading,
}

/// What is known of a cluster's liveness.
#[derive(Clone, Debug)]
pub struct Health {
    /// Where it stands.
    pub state: State,
    /// When it last answered, on this process's clock and as wall time.
    pub last_seen: Option<(Instant, DateTime<Utc>)>,
    /// The first failed contact since it last answered.
    pub failing_since: Option<Instant>,
    /// The last error its API gave, while it does not answer.
    pub error: Option<String>,
    /// How long a silence is tolerated.
    pub stale_after: Duration,
    /// When the cluster was declared.
    started: Instant,
}

/// A change of state that the policies reading from the cluster must hear about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CountsChange {
    /// Nothing the decisions see changed.
    None,
    /// Readiness from the cluster now counts, or no longer does.
    Counts,
}

impl Health {
    /// A cluster that has not answered yet.
    pub fn new(stale_after: Duration) -> Self {
        Self {
            state: State::Connecting,
            last_seen: None,
            failing_since: None,
            error: None,
            stale_after,
            started: Instant::now(),
        }
    }

    /// The cluster answered (a probe or a watch event).
    pub fn answered(&mut self) -> CountsChange {
        self.last_seen = Some((Instant::now(), Utc::now()));
        self.failing_since = None;
        self.error = None;
        match self.state {
            State::Stale => {
                self.state = State::Rereading;
                CountsChange::Counts
            }
            _ => CountsChange::None,
        }
    }

    /// Every watched namespace has relisted: readiness is current.
    pub fn reread(&mut self) -> CountsChange {
        match self.state {
            State::Rereading | State::Connecting | State::Unanswered => {
                self.state = State::Fresh;
                CountsChange::Counts
            }
            _ => CountsChange::None,
        }
    }

    /// The cluster's API failed; returns whether it is now stale.
    pub fn failed(&mut self, error: String) -> CountsChange {
        self.error = Some(error);
        self.failing_since.get_or_insert_with(Instant::now);
        self.check()
    }

    /// Marks the cluster stale once it has been unreachable for longer than `staleAfter`.
    fn check(&mut self) -> CountsChange {
        let silent = self.failing_since.map(|at| at.elapsed());
        match (&self.state, silent) {
            (State::Connecting, _) if self.started.elapsed() > self.stale_after => {
                self.state = State::Unanswered;
                CountsChange::Counts
            }
            (State::Fresh | State::Rereading, Some(silent)) if silent > self.stale_after => {
                self.state = State::Stale;
                CountsChange::Counts
            }
            _ => CountsChange::None,
        }
    }

    /// Why readiness from this cluster does not count now, if it does not.
    pub fn unavailable(&self, cluster: &str) -> Option<String> {
        let error = self
            .error
            .as_deref()
            .map_or(String::new(), |e| format!(": {e}"));
        match &self.state {
            State::Fresh => None,
            State::Connecting | State::Unanswered => {
                Some(format!("cluster {cluster} has not answered yet{error}"))
            }
            State::Stale => Some(format!(
                "cluster {cluster} unreachable for {}s{error}",
                self.failing_since.map_or(0, |at| at.elapsed().as_secs())
            )),
            State::Rereading => Some(format!(
                "cluster {cluster} answers again; its readiness is being re-read"
            )),
        }
    }

    /// Whether readiness from this cluster is not known yet, and what the policies' status last
    /// recorded stands meanwhile.
    pub fn awaiting(&self) -> bool {
        self.state == State::Connecting
    }

    /// When readiness from this cluster was last confirmed, while it does not count.
    pub fn as_of(&self) -> Option<DateTime<Utc>> {
        (self.state != State::Fresh)
            .then_some(self.last_seen.map(|(_, at)| at))
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silence_shorter_than_stale_after_changes_nothing() {
        let mut h = Health::new(Duration::from_secs(30));
        h.answered();
        assert_eq!(h.reread(), CountsChange::Counts);
        assert_eq!(h.failed("connection refused".into()), CountsChange::None);
        assert_eq!(
            h.unavailable("east"),
            None,
            "the last known readiness stands"
        );
    }

    #[test]
    fn a_long_silence_is_stale_and_an_answer_rereads_before_it_counts() {
        let mut h = Health::new(Duration::from_millis(10));
        h.answered();
        h.reread();
        assert_eq!(h.failed("connection refused".into()), CountsChange::None);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(h.failed("connection refused".into()), CountsChange::Counts);
        let why = h.unavailable("east").unwrap_or_default();
        assert!(
            why.starts_with("cluster east unreachable for 0s: connection refused"),
            "{why}"
        );
        std::thread::sleep(Duration::from_millis(1000));
        let why = h.unavailable("east").unwrap_or_default();
        assert!(
            why.starts_with("cluster east unreachable for 1s"),
            "the silence grows: {why}"
        );
        assert!(h.as_of().is_some());
        assert_eq!(h.answered(), CountsChange::Counts);
        assert!(h.unavailable("east").is_some_and(|w| w.contains("re-read")));
        assert_eq!(h.reread(), CountsChange::Counts);
        assert_eq!(h.unavailable("east"), None);
    }

    #[test]
    fn silence_counts_from_the_first_failure_not_from_the_last_answer() {
        let mut h = Health::new(Duration::from_millis(30));
        h.answered();
        h.reread();
        // The last answer is older than staleAfter, but the cluster has only just failed.
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(h.failed("connection refused".into()), CountsChange::None);
        assert_eq!(h.unavailable("east"), None);
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(h.failed("connection refused".into()), CountsChange::Counts);
    }

    #[test]
    fn a_cluster_that_never_answered_says_why() {
        let mut h = Health::new(Duration::from_secs(30));
        h.failed("Unauthorized (Unauthorized)".into());
        assert_eq!(
            h.unavailable("east").as_deref(),
            Some("cluster east has not answered yet: Unauthorized (Unauthorized)")
        );
    }

    #[test]
    fn a_new_cluster_is_awaited_for_stale_after_then_counts_as_not_answering() {
        let mut h = Health::new(Duration::from_millis(30));
        assert_eq!(h.failed("connection refused".into()), CountsChange::None);
        assert!(h.awaiting(), "the last known readiness stands");
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(h.failed("connection refused".into()), CountsChange::Counts);
        assert!(!h.awaiting());
        assert!(h.unavailable("east").is_some());
        h.answered();
        assert_eq!(h.reread(), CountsChange::Counts);
        assert_eq!(h.unavailable("east"), None);
    }
}
