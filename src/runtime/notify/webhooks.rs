//! CloudEvents to the webhook sinks policies name: one event per history entry, in HTTP binary
//! mode (`ce-*` headers, the entry as the JSON body), its body signed with HMAC-SHA256 under a
//! key read from a Secret of the policy's namespace (`X-Failover-Signature: sha256=<hex>`).
//!
//! - **At least once.** An entry is delivered until every sink of its policy answered 2xx, tried
//!   again after 1 s doubling to a minute; the policy's `status.notifiedThrough` then records it
//!   (so after a restart or a change of leader, what is later is delivered again: the event's
//!   id, the policy's uid and the entry's id, lets a receiver drop a second copy).
//! - **Bounded per namespace.** Each namespace has its own queue of at most
//!   [`PENDING_PER_NAMESPACE`] entries and its own sender, which tries one entry at a time: a
//!   sink that never answers holds its own namespace's sender, five seconds a try, and nobody
//!   else's. An entry that finds its namespace's queue full waits in its policy's history, and
//!   is queued again at the policy's next reconcile.
//! - Only URLs the cluster admin allows (`--notification-allowed-urls`) are contacted; only the
//!   leader sends.

use std::collections::{HashMap, HashSet, VecDeque};
use std::{sync::Arc, time::Duration};

use hmac::{Hmac, Mac};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use parking_lot::Mutex;
use sha2::Sha256;
use tracing::{debug, warn};

use failover_core::{
    api::{FailoverPolicy, HistoryEntry, WebhookSink},
    consent,
    observation::PolicyKey,
};

use super::http::Poster;

/// The most entries waiting in one namespace's queue.
pub const PENDING_PER_NAMESPACE: usize = 64;
/// The first wait after a failed try; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// One history entry to deliver to its policy's sinks.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// The policy.
    pub key: PolicyKey,
    /// Its uid (with the entry's id, the event's id).
    pub uid: String,
    /// The entry.
    pub entry: HistoryEntry,
}

impl Delivery {
    /// The CloudEvent's id.
    pub fn id(&self) -> String {
        format!("{}-{}", self.uid, self.entry.id)
    }
}

/// What a sender asks of, and reports to, the notifier.
pub trait Outcomes: Send + Sync + 'static {
    /// Where the policy's entry goes now: its allowed sinks as its spec says them at this try
    /// (`None`: the policy is gone, or names no allowed sink any more; the entry is dropped).
    fn sinks(&self, delivery: &Delivery) -> Option<Vec<WebhookSink>>;
    /// Every sink acknowledged the entry.
    fn delivered(&self, delivery: &Delivery);
    /// A try failed (it is tried again).
    fn failed(&self, delivery: &Delivery, why: &str);
    /// The policies whose entries found their namespace's queue full, now that it is empty.
    fn room_for(&self, deferred: Vec<PolicyKey>);
    /// Whether this replica may send now.
    fn may_send(&self) -> bool;
}

/// The namespaces' queues.
#[derive(Default)]
pub struct Queues {
    inner: Mutex<HashMap<String, Queue>>,
}

/// One namespace's queue.
#[derive(Default)]
struct Queue {
    waiting: VecDeque<Delivery>,
    /// Each entry waiting or being sent, so a reconcile that sees it again queues it once.
    queued: HashSet<(PolicyKey, String, u64)>,
    /// Whether its sender runs: set by the push that starts it, cleared by the sender that
    /// finds the queue empty, both under the lock, so a namespace has one sender at most.
    sending: bool,
    /// The policies whose entries found the queue full: told when it empties.
    deferred: HashSet<PolicyKey>,
}

/// What a push came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Pushed {
    /// Queued; the namespace has no sender running: start one.
    Start,
    /// Queued, behind the running sender.
    Queued,
    /// It is queued already.
    Already,
    /// The namespace's queue is full: the entry waits in the policy's history.
    Full,
}

/// What a sender takes next.
enum Next {
    /// This entry (left at the head until [`Queues::done`]).
    Send(Delivery),
    /// Nothing: the sender stops, and tells these deferred policies.
    Stop(Vec<PolicyKey>),
}

impl Queues {
    /// Queues an entry of its namespace.
    pub fn push(&self, delivery: Delivery) -> Pushed {
        let mut queues = self.inner.lock();
        let queue = queues
            .entry(delivery.key.namespace.to_string())
            .or_default();
        let id = (
            delivery.key.clone(),
            delivery.uid.clone(),
            delivery.entry.id,
        );
        if queue.queued.contains(&id) {
            return Pushed::Already;
        }
        if queue.waiting.len() >= PENDING_PER_NAMESPACE {
            queue.deferred.insert(delivery.key);
            return Pushed::Full;
        }
        queue.waiting.push_back(delivery);
        queue.queued.insert(id);
        if std::mem::replace(&mut queue.sending, true) {
            Pushed::Queued
        } else {
            Pushed::Start
        }
    }

    /// The next entry of `namespace`, or the end of its sender.
    fn next(&self, namespace: &str) -> Next {
        let mut queues = self.inner.lock();
        let Some(queue) = queues.get_mut(namespace) else {
            return Next::Stop(Vec::new());
        };
        if let Some(head) = queue.waiting.front() {
            return Next::Send(head.clone());
        }
        let deferred = queue.deferred.drain().collect();
        queues.remove(namespace);
        Next::Stop(deferred)
    }

    /// The head of `namespace` is done with.
    fn done(&self, namespace: &str) {
        let mut queues = self.inner.lock();
        if let Some(queue) = queues.get_mut(namespace)
            && let Some(d) = queue.waiting.pop_front()
        {
            queue.queued.remove(&(d.key, d.uid, d.entry.id));
        }
    }

    /// Drops everything of `namespace` (this replica stopped leading): its sender stops.
    fn drop_all(&self, namespace: &str) {
        self.inner.lock().remove(namespace);
    }
}

/// Sends `namespace`'s queue in order until it is empty.
pub async fn send(
    queues: Arc<Queues>,
    namespace: String,
    client: Client,
    poster: Poster,
    outcomes: Arc<dyn Outcomes>,
) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        let delivery = match queues.next(&namespace) {
            Next::Send(delivery) => delivery,
            Next::Stop(deferred) => {
                outcomes.room_for(deferred);
                return;
            }
        };
        if !outcomes.may_send() {
            queues.drop_all(&namespace);
            return;
        }
        let Some(sinks) = outcomes.sinks(&delivery) else {
            debug!(id = %delivery.id(), "webhook entry dropped: its policy is gone or names no allowed sink");
            queues.done(&namespace);
            continue;
        };
        match deliver(&delivery, &sinks, &client, &poster).await {
            Ok(()) => {
                debug!(id = %delivery.id(), "webhook delivered");
                outcomes.delivered(&delivery);
                queues.done(&namespace);
                backoff = FIRST_BACKOFF;
            }
            Err(why) => {
                warn!(namespace = %namespace, policy = %delivery.key.name, id = %delivery.id(), %why, "webhook not delivered; tried again");
                outcomes.failed(&delivery, &why);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// Delivers one entry to each of its sinks (again to all of them after a failure: a receiver
/// drops a copy by its id).
async fn deliver(
    delivery: &Delivery,
    sinks: &[WebhookSink],
    client: &Client,
    poster: &Poster,
) -> Result<(), String> {
    let body = body(delivery);
    for sink in sinks {
        let key = signing_key(client, &delivery.key, sink).await?;
        poster
            .post(
                &sink.url,
                &headers(delivery, &sign(&key, &body)),
                body.clone(),
            )
            .await?;
    }
    Ok(())
}

/// The signing key: the Secret's key, as stored, once the Secret consents (its annotation
/// `failover.dev/policies` names the policy): the right to write a policy gives no use of a
/// Secret its owner did not lend it.
async fn signing_key(
    client: &Client,
    key: &PolicyKey,
    sink: &WebhookSink,
) -> Result<Vec<u8>, String> {
    let (namespace, reference) = (&*key.namespace, &sink.secret_ref);
    let secret = Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(&reference.name)
        .await
        .map_err(|e| {
            format!(
                "reading Secret {}: {}",
                reference.name,
                crate::runtime::api_client::describe(&e)
            )
        })?
        .ok_or_else(|| format!("Secret {} not found", reference.name))?;
    if !consent::granted(secret.metadata.annotations.as_ref(), &key.name) {
        return Err(consent::refused(
            &format!("Secret {}", reference.name),
            "the events to sign",
        ));
    }
    secret
        .data
        .and_then(|mut d| d.remove(&reference.key))
        .map(|b| b.0)
        .filter(|k| !k.is_empty())
        .ok_or_else(|| format!("Secret {} has no key {}", reference.name, reference.key))
}

/// The event's body: the entry, with its policy.
pub fn body(delivery: &Delivery) -> Vec<u8> {
    let e = &delivery.entry;
    serde_json::to_vec(&serde_json::json!({
        "namespace": &*delivery.key.namespace,
        "policy": delivery.key.name.as_str(),
        "id": e.id,
        "time": e.time,
        "transition": e.transition,
        "from": e.from,
        "to": e.to,
        "trigger": e.trigger,
        "reason": e.reason,
    }))
    .unwrap_or_default()
}

/// `sha256=<hex>` of the body's HMAC-SHA256 under `key`.
pub fn sign(key: &[u8], body: &[u8]) -> String {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
        return String::new();
    };
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// The CloudEvents 1.0 headers of HTTP binary mode, and the signature.
fn headers(delivery: &Delivery, signature: &str) -> Vec<(&'static str, String)> {
    use kube::Resource;
    let key = &delivery.key;
    vec![
        ("ce-specversion", "1.0".to_string()),
        ("ce-id", delivery.id()),
        (
            "ce-source",
            format!(
                "/apis/{}/namespaces/{}/failoverpolicies/{}",
                FailoverPolicy::api_version(&()),
                key.namespace,
                key.name
            ),
        ),
        ("ce-type", event_type(&delivery.entry.transition)),
        ("ce-subject", key.name.to_string()),
        ("ce-time", delivery.entry.time.to_string()),
        ("x-failover-signature", signature.to_string()),
    ]
}

/// `dev.failover.policy.<transition, lowercase>`, e.g. `dev.failover.policy.failedover`.
pub fn event_type(transition: &str) -> String {
    format!("dev.failover.policy.{}", transition.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_the_hmac_sha256_of_the_body_in_hex() {
        // RFC 4231, test case 2.
        assert_eq!(
            sign(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_namespace_queue_holds_each_entry_once_has_one_sender_and_tells_the_deferred() {
        let queues = Queues::default();
        let delivery = |ns: &str, id| Delivery {
            key: PolicyKey::new(ns, "web"),
            uid: "u".into(),
            entry: HistoryEntry {
                id,
                time: failover_core::api::Timestamp(chrono::DateTime::UNIX_EPOCH),
                transition: "FailedOver".into(),
                from: String::new(),
                to: String::new(),
                trigger: String::new(),
                reason: String::new(),
            },
        };
        assert_eq!(queues.push(delivery("a", 1)), Pushed::Start);
        assert_eq!(queues.push(delivery("a", 1)), Pushed::Already);
        assert_eq!(queues.push(delivery("b", 1)), Pushed::Start);
        for id in 2..=PENDING_PER_NAMESPACE as u64 {
            assert_eq!(queues.push(delivery("a", id)), Pushed::Queued);
        }
        assert_eq!(queues.push(delivery("a", 1000)), Pushed::Full);
        // The sender takes each in turn; while it runs, a push starts no second one.
        for id in 1..=PENDING_PER_NAMESPACE as u64 {
            assert!(matches!(queues.next("a"), Next::Send(d) if d.entry.id == id));
            queues.done("a");
        }
        assert_eq!(queues.push(delivery("a", 1000)), Pushed::Queued);
        assert!(matches!(queues.next("a"), Next::Send(d) if d.entry.id == 1000));
        queues.done("a");
        // Empty: the sender stops and tells the policy whose entry found the queue full.
        let Next::Stop(deferred) = queues.next("a") else {
            panic!("the queue is empty")
        };
        assert_eq!(deferred, [PolicyKey::new("a", "web")]);
        assert_eq!(queues.push(delivery("a", 1001)), Pushed::Start);
    }
}
