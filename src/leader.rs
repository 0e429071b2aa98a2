//! Leadership: whether this replica may write. Only the leader writes; standbys keep their caches
//! warm so a takeover acts at once.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use tokio::sync::watch;

/// Shared view of this replica's leadership.
#[derive(Clone, Debug)]
pub struct LeaderState {
    is_leader: Arc<AtomicBool>,
    changes: watch::Sender<bool>,
}

impl LeaderState {
    /// A replica that starts as a standby.
    pub fn standby() -> Self {
        let (changes, _) = watch::channel(false);
        Self {
            is_leader: Arc::new(AtomicBool::new(false)),
            changes,
        }
    }

    /// A replica that is always the leader (leader election disabled).
    pub fn always() -> Self {
        let state = Self::standby();
        state.set(true);
        state
    }

    /// Whether this replica may write now.
    pub fn is_leader(&self) -> bool {
        self.is_leader.load(Ordering::SeqCst)
    }

    /// Records a change of leadership.
    pub fn set(&self, leader: bool) {
        self.is_leader.store(leader, Ordering::SeqCst);
        self.changes.send_replace(leader);
    }

    /// A receiver that sees every change of leadership.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.changes.subscribe()
    }
}
