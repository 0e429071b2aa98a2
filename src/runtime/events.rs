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

use std::{collections::HashMap, sync::Arc};

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

use crate::digest::digest;

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
}

impl Events {
    /// Events reported by `controller`, from `instance` (the controller's name when none).
    pub fn new(client: Client, controller: &str, instance: Option<String>) -> Self {
        Self {
            client,
            controller: controller.into(),
            instance: instance.as_deref().unwrap_or(controller).into(),
            published: Arc::default(),
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
        let nanos = now.as_nanosecond();
        K8sEvent {
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(format!("{object}.{nanos:x}")),
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
