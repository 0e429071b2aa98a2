//! Turns: the tests of the binary run on parallel threads of one process (as many as the machine
//! has cores), and a few must not run beside any other. Every test that uses a control plane
//! takes a shared [`turn`] (a [`TestEnv`](super::TestEnv) and a
//! [`DedicatedPlane`](super::DedicatedPlane) take it for the test); a test that must run alone
//! asks for the whole machine first ([`alone`]): it waits until the tests under way have ended,
//! and the tests that ask for a turn meanwhile wait until it has ended.
//!
//! A test holds one turn however many environments it makes: on the test's thread, the first
//! one taken is shared by the later ones until the last is dropped (a second turn asked while
//! another test waits to run alone would wait for ever).

use std::{
    cell::RefCell,
    sync::{Arc, Weak},
};

use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

static TURNS: RwLock<()> = RwLock::const_new(());

enum Held {
    Shared {
        _guard: RwLockReadGuard<'static, ()>,
    },
    Alone {
        _guard: RwLockWriteGuard<'static, ()>,
    },
}

thread_local! {
    /// The turn the test on this thread holds, if any.
    static HELD: RefCell<Weak<Held>> = const { RefCell::new(Weak::new()) };
}

/// A test's turn; it ends when its last clone is dropped.
#[derive(Clone)]
pub struct Turn {
    held: Arc<Held>,
}

impl Turn {
    /// The turn the test on this thread holds, if any.
    fn held() -> Option<Self> {
        let held = HELD.with(|slot| slot.borrow().upgrade())?;
        Some(Self { held })
    }

    /// The turn the test on this thread holds, which must be to run alone.
    fn held_alone() -> Option<Self> {
        let turn = Self::held()?;
        assert!(
            matches!(*turn.held, Held::Alone { .. }),
            "a test asked to run alone after taking a shared turn: it must ask first"
        );
        Some(turn)
    }

    fn hold(held: Held) -> Self {
        let held = Arc::new(held);
        HELD.with(|slot| *slot.borrow_mut() = Arc::downgrade(&held));
        Self { held }
    }
}

/// A turn beside the other tests (the calling test's, if it has one already): waits while a test
/// runs alone.
pub async fn turn() -> Turn {
    if let Some(turn) = Turn::held() {
        return turn;
    }
    Turn::hold(Held::Shared {
        _guard: TURNS.read().await,
    })
}

/// The machine to the calling test alone, for a test whose figures need every core (the traffic
/// through a real proxy) or that starts a control plane and a node of its own (the demos): waits
/// until the tests under way have ended. A test asks for it before anything else.
pub async fn alone() -> Turn {
    if let Some(turn) = Turn::held_alone() {
        return turn;
    }
    Turn::hold(Held::Alone {
        _guard: TURNS.write().await,
    })
}

/// [`alone`] for a test that is not async (it must not be called on a runtime).
pub fn alone_blocking() -> Turn {
    if let Some(turn) = Turn::held_alone() {
        return turn;
    }
    Turn::hold(Held::Alone {
        _guard: TURNS.blocking_write(),
    })
}
