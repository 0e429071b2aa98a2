//! Publishes Events (`events.k8s.io/v1`): an Event that repeats one published within
//! [`SERIES_WINDOW`] (same object, reason, action, type, related object and note) becomes that
//! Event's `series` (its count and last time), as client-go's correlator does it.
//!
//! Home-made for its memory, measured in docs/benchmarks.md (Memory): the `Recorder` keeps
//! every Event it published, whole, for six minutes, to patch its series, and sweeps the old
//! ones only when it publishes again; at 10,000 policies its copies were held through the
//! phases after a churn or a burst of group failovers. Here what is kept of a published Event
//! is a digest of its key, its name and its series (the patch of a repeat names the Event and
//! carries only the series), swept at most every [`SWEEP_EVERY`].
//!
//! Events are best effort, and bounded: they wait in a queue taken in turns by namespace, at
//! most [`PER_NAMESPACE`] of one namespace (more are dropped and counted,
//! `failover_events_dropped_total`), and at most [`IN_FLIGHT`] are sent at once, one of a
//! namespace at a time, so a storm of one namespace's Events neither grows the controller nor
//! delays another namespace's.
//! Every Event's name is valid whatever its object's name: `<object>.<time>`, the object's name
//! shortened to fit the 253 characters of a name.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use compact_str::CompactString;
use k8s_openapi::{
    api::{core::v1::ObjectReference, events::v1::Event as K8sEvent},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::{SignedDuration, Timestamp},
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
    runtime::events::{Event, EventType},
};
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::{Notify, Semaphore};
use tracing::{debug, warn};

use crate::runtime::{api_client::describe, fair::Turns, leader::Leadership, metrics::Metrics};
use failover_core::{digest::digest, observation::Namespace};

/// The most Events of one namespace waiting to be sent.
pub const PER_NAMESPACE: usize = 32;
/// The most Events sent at once.
pub const IN_FLIGHT: usize = 4;
/// The longest name of an object (a DNS subdomain).
const MAX_NAME: usize = 253;

/// How long after an Event a repeat of it counts in its series.
pub const SERIES_WINDOW: SignedDuration = SignedDuration::from_mins(6);

/// What is kept of one published Event.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Published {
    /// Its name (in the namespace of the object it is about).
    name: CompactString,
    /// How many times it happened (1: no series yet).
    count: i32,
    /// When it last happened.
    last: Timestamp,
}

/// The Events published within the window, by the digest of their key. Entries older than the
/// window are swept at most once per [`SWEEP_EVERY`], so that a burst of Events costs one pass
/// over the table, not one per Event.
#[derive(Debug, Default)]
struct Series {
    entries: HashMap<u64, Published>,
    swept: Option<Timestamp>,
}

/// How often the table drops the Events whose window has passed.
const SWEEP_EVERY: SignedDuration = SignedDuration::from_secs(30);

impl Series {
    /// The Event `key` repeats: the next of its series, if it was published within the window.
    fn repeat(&mut self, key: u64, now: Timestamp) -> Option<Published> {
        if self.swept.is_none_or(|swept| swept + SWEEP_EVERY <= now) {
            self.entries.retain(|_, p| p.last + SERIES_WINDOW > now);
            self.swept = Some(now);
        }
        let mut next = self
            .entries
            .get(&key)
            .filter(|p| p.last + SERIES_WINDOW > now)?
            .clone();
        next.count += 1;
        next.last = now;
        Some(next)
    }

    fn record(&mut self, key: u64, published: Published) {
        self.entries.insert(key, published);
    }
}

/// The publisher of one controller instance's Events.
#[derive(Clone)]
pub struct Events {
    client: Client,
    controller: Arc<str>,
    instance: Arc<str>,
    published: Arc<Mutex<Series>>,
    waiting: Arc<Mutex<Turns<Namespace, (Event, ObjectReference)>>>,
    /// The namespaces with an Event being sent.
    sending_in: Arc<Mutex<std::collections::HashSet<Namespace>>>,
    arrived: Arc<Notify>,
    sending: Arc<AtomicBool>,
    leadership: Leadership,
    metrics: Arc<Metrics>,
}

impl Events {
    /// Events reported by `controller`, from `instance` (the controller's name when none), sent
    /// while this replica leads.
    pub fn new(
        client: Client,
        controller: &str,
        instance: Option<String>,
        leadership: Leadership,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            client,
            controller: controller.into(),
            instance: instance.as_deref().unwrap_or(controller).into(),
            published: Arc::default(),
            waiting: Arc::default(),
            sending_in: Arc::default(),
            arrived: Arc::default(),
            sending: Arc::default(),
            leadership,
            metrics,
        }
    }

    /// Queues `event` about `regarding`, to be sent in the background in turn by namespace;
    /// returns false when its namespace already has [`PER_NAMESPACE`] waiting (it is dropped and
    /// counted).
    pub fn send(&self, event: Event, regarding: ObjectReference) -> bool {
        let namespace = Namespace::new(regarding.namespace.as_deref().unwrap_or("default"));
        {
            let mut waiting = self.waiting.lock();
            if waiting.waiting_in(&namespace) >= PER_NAMESPACE {
                drop(waiting);
                self.metrics.events_dropped.inc();
                debug!(%namespace, reason = event.reason, "Event dropped: its namespace has too many waiting");
                return false;
            }
            waiting.push(&namespace, (event, regarding));
        }
        if !self.sending.swap(true, Ordering::AcqRel) {
            tokio::spawn(self.clone().send_in_turn());
        }
        self.arrived.notify_one();
        true
    }

    /// Sends the Events waiting, in turn by namespace, [`IN_FLIGHT`] at a time and one of a
    /// namespace at a time, for ever.
    async fn send_in_turn(self) {
        let slots = Arc::new(Semaphore::new(IN_FLIGHT));
        loop {
            let arrived = self.arrived.notified();
            let next = {
                let sending_in = self.sending_in.lock();
                self.waiting.lock().pop_where(|ns| !sending_in.contains(ns))
            };
            let Some((event, regarding)) = next else {
                arrived.await;
                continue;
            };
            let namespace = Namespace::new(regarding.namespace.as_deref().unwrap_or("default"));
            self.sending_in.lock().insert(namespace.clone());
            // The semaphore is never closed.
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            let events = self.clone();
            tokio::spawn(async move {
                let reason = &event.reason;
                if !events.leadership.is_leader() {
                    debug!(reason, "Event not recorded: not the leader");
                } else {
                    match events.publish(&event, &regarding).await {
                        Ok(()) => events.metrics.write("event"),
                        Err(e) => warn!(error = %describe(&e), reason, "could not record Event"),
                    }
                }
                drop(slot);
                events.sending_in.lock().remove(&namespace);
                // The namespace may send its next one.
                events.arrived.notify_one();
            });
        }
    }

    /// Publishes `event` about `regarding`: a new Event, or the next of its series.
    pub async fn publish(
        &self,
        event: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let key = key_of(event, regarding);
        let repeat = self.published.lock().repeat(key, now);
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), namespace);
        let published = match repeat {
            Some(next) => {
                let patch = json!({
                    "series": {"count": next.count, "lastObservedTime": MicroTime(next.last)}
                });
                let params = PatchParams::default();
                match api.patch(&next.name, &params, &Patch::Merge(&patch)).await {
                    Ok(_) => next,
                    // The Event is gone (the API server's TTL, or deleted): a new one.
                    Err(kube::Error::Api(e)) if e.code == 404 => {
                        self.create(&api, event, regarding, now).await?
                    }
                    Err(e) => return Err(e),
                }
            }
            None => self.create(&api, event, regarding, now).await?,
        };
        self.published.lock().record(key, published);
        Ok(())
    }

    async fn create(
        &self,
        api: &Api<K8sEvent>,
        event: &Event,
        regarding: &ObjectReference,
        now: Timestamp,
    ) -> Result<Published, kube::Error> {
        let created = api
            .create(
                &PostParams::default(),
                &self.new_event(event, regarding, now),
            )
            .await?;
        Ok(Published {
            name: created.metadata.name.as_deref().unwrap_or_default().into(),
            count: 1,
            last: now,
        })
    }

    fn new_event(&self, event: &Event, regarding: &ObjectReference, now: Timestamp) -> K8sEvent {
        let object = regarding.name.as_deref().unwrap_or(&self.controller);
        K8sEvent {
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(event_name(object, now)),
                ..ObjectMeta::default()
            },
            action: Some(event.action.clone()),
            reason: Some(event.reason.clone()),
            note: event.note.clone(),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            related: event.secondary.clone(),
            reporting_controller: Some(self.controller.to_string()),
            reporting_instance: Some(self.instance.to_string()),
            type_: Some(
                match event.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .into(),
            ),
            ..K8sEvent::default()
        }
    }
}

/// An Event's name: `<object>.<nanoseconds in hex>`, the object's name shortened (and ending
/// in a letter or digit) so that the name is a valid one of at most 253 characters.
fn event_name(object: &str, now: Timestamp) -> String {
    let suffix = format!(".{:x}", now.as_nanosecond());
    let mut room = MAX_NAME.saturating_sub(suffix.len()).min(object.len());
    while !object.is_char_boundary(room) {
        room -= 1;
    }
    let prefix = object[..room].trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    let prefix = if prefix.is_empty() { "event" } else { prefix };
    format!("{prefix}{suffix}")
}

/// What makes two Events one series: the object, reason, action, type, related object and
/// note, as client-go's correlator keys them. The note is part of it, so that each Event says
/// what it was raised for (a second failover names its own targets); the object's resource
/// version is not, so whether a repeat is one depends on what happened, not on how soon the
/// watch delivered this controller's own status write.
fn key_of(event: &Event, regarding: &ObjectReference) -> u64 {
    let object = |r: &ObjectReference| {
        (
            r.api_version.clone(),
            r.kind.clone(),
            r.namespace.clone(),
            r.name.clone(),
            r.uid.clone(),
            r.field_path.clone(),
        )
    };
    digest(&(
        matches!(event.type_, EventType::Warning),
        &event.reason,
        &event.action,
        &event.note,
        object(regarding),
        event.secondary.as_ref().map(object),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(reason: &str, note: &str) -> Event {
        Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some(note.into()),
            action: "Reconcile".into(),
            secondary: None,
        }
    }

    fn policy(name: &str) -> ObjectReference {
        ObjectReference {
            kind: Some("FailoverPolicy".into()),
            namespace: Some("shop".into()),
            name: Some(name.into()),
            resource_version: Some("1".into()),
            ..ObjectReference::default()
        }
    }

    fn published(name: &str, at: Timestamp) -> Published {
        Published {
            name: name.into(),
            count: 1,
            last: at,
        }
    }

    #[test]
    fn an_event_with_another_note_is_an_event_of_its_own_and_a_newer_version_a_repeat() {
        let (a, b) = (event("FailedOver", "to b"), event("FailedOver", "to c"));
        assert_ne!(key_of(&a, &policy("web")), key_of(&b, &policy("web")));
        assert_ne!(
            key_of(&a, &policy("web")),
            key_of(&event("FailedBack", "to b"), &policy("web"))
        );
        assert_ne!(key_of(&a, &policy("web")), key_of(&a, &policy("api")));
        let changed = ObjectReference {
            resource_version: Some("2".into()),
            ..policy("web")
        };
        assert_eq!(
            key_of(&a, &policy("web")),
            key_of(&a, &changed),
            "the same Event about the object as the watch delivers it later"
        );
    }

    #[test]
    fn a_repeat_within_the_window_is_the_next_of_its_series_and_one_after_it_a_new_event() {
        let start = Timestamp::UNIX_EPOCH;
        let mut series = Series::default();
        assert_eq!(series.repeat(7, start), None);
        series.record(7, published("web.1", start));
        let soon = start + SignedDuration::from_mins(5);
        let next = series.repeat(7, soon).expect("a repeat within six minutes");
        assert_eq!(
            (next.name.as_str(), next.count, next.last),
            ("web.1", 2, soon)
        );
        assert_eq!(series.repeat(8, soon), None, "another key is no repeat");
        series.record(7, next);
        let after = soon + SERIES_WINDOW;
        assert_eq!(series.repeat(7, after), None, "the window passed");
    }

    #[test]
    fn every_object_name_gives_an_event_name_of_at_most_253_characters_ending_well() {
        let at = Timestamp::from_second(1_800_000_000).expect("time");
        for object in [
            "web".to_string(),
            "g".repeat(253),
            format!("{}.{}", "a".repeat(235), "b".repeat(17)),
            format!("{}-x", "a".repeat(235)),
        ] {
            let name = event_name(&object, at);
            assert!(name.len() <= 253, "{}: {}", name.len(), name);
            let suffix = format!(".{:x}", at.as_nanosecond());
            let prefix = name.strip_suffix(&suffix).expect("the time ends it");
            assert!(
                prefix.ends_with(|c: char| c.is_ascii_alphanumeric()),
                "{prefix}"
            );
            assert!(object.starts_with(prefix));
        }
        assert_eq!(
            event_name("web", at),
            format!("web.{:x}", at.as_nanosecond())
        );
    }

    #[test]
    fn events_past_their_window_are_forgotten_at_the_next_sweep() {
        let start = Timestamp::UNIX_EPOCH;
        let mut series = Series::default();
        for key in 0..1_000 {
            series.record(key, published("web.1", start));
        }
        series.repeat(0, start + SignedDuration::from_mins(1));
        assert_eq!(series.entries.len(), 1_000, "all within the window");
        series.repeat(0, start + SERIES_WINDOW + SWEEP_EVERY);
        assert!(series.entries.is_empty());
    }
}
