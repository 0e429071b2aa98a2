//! What queues every policy at once: gaining leadership, the resync period, a missing CRD that
//! turns up.

use futures::{Stream, StreamExt};

use crate::{
    pipeline::reconcile::RESYNC,
    runtime::leader::{Leadership, Role},
    sources::local::apis::Apis,
};

/// When every policy is queued: on gaining leadership, every resync period, and when a missing
/// CRD turns up.
pub fn queue_everything(
    leadership: &Leadership,
    apis: &Apis,
) -> impl Stream<Item = ()> + Send + 'static + use<> {
    futures::stream::select_all([
        leadership_gained(leadership).boxed(),
        resync().boxed(),
        apis_returned(apis).boxed(),
    ])
}

/// Every gain of leadership queues every policy: the new leader converges at once.
fn leadership_gained(leadership: &Leadership) -> impl Stream<Item = ()> + Send + 'static + use<> {
    futures::stream::unfold(leadership.subscribe(), |mut rx| async move {
        loop {
            rx.changed().await.ok()?;
            if *rx.borrow_and_update() == Role::Leader {
                return Some(((), rx));
            }
        }
    })
}

/// A missing CRD that turns up queues every policy: those that waited for it act at once.
fn apis_returned(apis: &Apis) -> impl Stream<Item = ()> + Send + 'static + use<> {
    futures::stream::unfold(apis.returned(), |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    })
}

/// The safety-net resync of every policy.
fn resync() -> impl Stream<Item = ()> + Send + 'static {
    futures::stream::unfold((), |()| async {
        tokio::time::sleep(RESYNC).await;
        Some(((), ()))
    })
}
