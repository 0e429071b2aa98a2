//! Telling the people who must know: an alert to the cluster admin's Alertmanager while a policy
//! is failed over, has no ready backend or runs a drill ([`alerts`]), and a CloudEvent to each
//! webhook sink a policy names per transition its history records ([`webhooks`]). The write
//! stage tells the notifier what each reconcile built ([`Notifier::observe`]); the notifier tells
//! the next reconcile what the sinks acknowledged and which are refused
//! ([`Notifier::notices`]), so the status, built in one place, records it. Both send as the
//! leader only, through their own bounded senders: one alert post at a time, one webhook
//! sender per namespace.

pub mod alerts;
pub mod http;
pub mod webhooks;

use std::{
    collections::HashMap,
    sync::{Arc, OnceLock},
    time::Duration,
};

use chrono::Utc;
use kube::Client;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tracing::{info, warn};

use self::{
    alerts::{Alert, Table},
    http::Poster,
    webhooks::{Delivery, Outcomes, Pushed, Queues},
};
use crate::runtime::{leader::Leadership, metrics::Metrics, written::StatusKey};
use failover_core::{
    api::{FailoverPolicyStatus, HistoryEntry, WebhookSink},
    last_status::LastStatus,
    observation::PolicyKey,
    policy::ValidPolicy,
    status::history::Notices,
    tenancy::Addresses,
};

/// How often the alerts that fire are posted again, unless the admin says otherwise.
pub const DEFAULT_ALERT_RESEND: Duration = Duration::from_secs(60);

/// What the cluster admin set for notifications.
#[derive(Clone, Debug)]
pub struct NotifySettings {
    /// Alertmanager's address, `http://host:port` (none: no alert is posted).
    pub alertmanager: Option<String>,
    /// How often the alerts that fire are posted again.
    pub alert_resend: Duration,
    /// The URLs (and the paths below them) webhook sinks may name.
    pub allowed_urls: Vec<String>,
}

impl Default for NotifySettings {
    fn default() -> Self {
        Self {
            alertmanager: None,
            alert_resend: DEFAULT_ALERT_RESEND,
            allowed_urls: Vec::new(),
        }
    }
}

/// The notifier.
pub struct Notifier {
    settings: NotifySettings,
    allowed: Addresses,
    alerts: Mutex<Table>,
    alerts_changed: Notify,
    queues: Arc<Queues>,
    /// Each policy that names an allowed sink: its uid and those sinks, as its last reconcile
    /// read its spec.
    sinks: Mutex<HashMap<PolicyKey, (String, Vec<WebhookSink>)>>,
    /// The last entry each policy's sinks acknowledged, with the policy's uid.
    delivered: Mutex<HashMap<PolicyKey, (String, u64)>>,
    poster: Poster,
    client: Client,
    leadership: Leadership,
    metrics: Arc<Metrics>,
    /// How a policy is woken: once an entry of its is delivered (so its status records it),
    /// or once its namespace's queue has room again.
    wake: OnceLock<Box<dyn Fn(PolicyKey) + Send + Sync>>,
}

impl Notifier {
    /// A notifier of these settings, reading Secrets through `client`.
    pub fn new(
        settings: NotifySettings,
        client: Client,
        leadership: Leadership,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        Arc::new(Self {
            allowed: Addresses::new(&settings.allowed_urls, None),
            settings,
            alerts: Mutex::default(),
            alerts_changed: Notify::new(),
            queues: Arc::default(),
            sinks: Mutex::default(),
            delivered: Mutex::default(),
            poster: Poster::default(),
            client,
            leadership,
            metrics,
            wake: OnceLock::new(),
        })
    }

    /// How policies are woken (set once, at the wiring).
    pub fn wake_with(&self, wake: impl Fn(PolicyKey) + Send + Sync + 'static) {
        let _ = self.wake.set(Box::new(wake));
    }

    /// What the sinks of a policy acknowledged, and which it names that are refused.
    pub fn notices(&self, key: &PolicyKey, uid: &str, policy: &ValidPolicy) -> Notices {
        let delivered = self
            .delivered
            .lock()
            .get(key)
            .filter(|(of, _)| of == uid)
            .map(|(_, id)| *id);
        let refused = policy
            .notifications
            .iter()
            .flat_map(|n| n.webhooks.iter().enumerate())
            .filter(|(_, sink)| !self.allowed.allows(&sink.url))
            .map(|(i, _)| i)
            .collect();
        Notices { delivered, refused }
    }

    /// What a reconcile built for a policy: its alert, and its sinks. The entries its sinks
    /// wait for are queued from its status as written ([`Self::written`]), never from one
    /// built and not yet written (a new leader may build another in its place): here, those
    /// of the status the policy watch delivered (`written`), after a restart or a change of
    /// leader.
    pub fn observe(
        self: &Arc<Self>,
        key: &PolicyKey,
        uid: &str,
        policy: &ValidPolicy,
        group: Option<&str>,
        status: &FailoverPolicyStatus,
        written: Option<&LastStatus>,
    ) {
        if self.settings.alertmanager.is_some() {
            let now = Utc::now();
            let alert = Alert::of(policy, group, status, now);
            if self.alerts.lock().set(key, alert, now) {
                self.alerts_changed.notify_one();
            }
        }
        let sinks: Vec<WebhookSink> = policy
            .notifications
            .iter()
            .flat_map(|n| &n.webhooks)
            .filter(|s| self.allowed.allows(&s.url))
            .cloned()
            .collect();
        if sinks.is_empty() {
            self.sinks.lock().remove(key);
            return;
        }
        self.sinks
            .lock()
            .insert(key.clone(), (uid.to_string(), sinks));
        if let Some(written) = written {
            self.queue(key, uid, written.history(), written.notified_through);
        }
    }

    /// A status the status writer wrote: the entries its policy's sinks wait for are queued.
    pub fn written(self: &Arc<Self>, key: &StatusKey, status: &FailoverPolicyStatus) {
        let named = self
            .sinks
            .lock()
            .get(&key.object)
            .is_some_and(|(uid, _)| **uid == *key.uid);
        if named {
            self.queue(
                &key.object,
                &key.uid,
                &status.history,
                status.notified_through,
            );
        }
    }

    /// A policy that went: its alert resolves, its entries are dropped at their turn.
    pub fn forget(&self, key: &PolicyKey) {
        if self.alerts.lock().set(key, None, Utc::now()) {
            self.alerts_changed.notify_one();
        }
        self.sinks.lock().remove(key);
        self.delivered.lock().remove(key);
    }

    /// Queues, in order, the entries after `through`; stops at a full queue, so what is
    /// delivered is always every entry up to some id.
    fn queue(
        self: &Arc<Self>,
        key: &PolicyKey,
        uid: &str,
        history: &[HistoryEntry],
        through: Option<u64>,
    ) {
        let through = through.unwrap_or(0);
        for entry in history.iter().filter(|e| e.id > through) {
            let delivery = Delivery {
                key: key.clone(),
                uid: uid.to_string(),
                entry: entry.clone(),
            };
            match self.queues.push(delivery) {
                Pushed::Start => self.start_sender(&key.namespace),
                Pushed::Queued | Pushed::Already => {}
                Pushed::Full => {
                    self.metrics.notification("webhook_deferred");
                    return;
                }
            }
        }
    }

    fn start_sender(self: &Arc<Self>, namespace: &str) {
        tokio::spawn(webhooks::send(
            self.queues.clone(),
            namespace.to_string(),
            self.client.clone(),
            self.poster.clone(),
            self.clone(),
        ));
    }

    /// Posts the alerts whenever one changes, and all that fire every resend interval, until
    /// the process ends (nothing without an Alertmanager). A replica that stops leading forgets
    /// them: the new leader's pass over every policy says them again.
    pub async fn run(self: Arc<Self>) {
        let Some(address) = self.settings.alertmanager.clone() else {
            return std::future::pending().await;
        };
        let url = format!("{}/api/v2/alerts", address.trim_end_matches('/'));
        info!(%url, "posting alerts to Alertmanager");
        let resend = self.settings.alert_resend;
        loop {
            tokio::select! {
                () = self.alerts_changed.notified() => {}
                () = tokio::time::sleep(resend) => {}
            }
            if !self.leadership.is_leader() {
                *self.alerts.lock() = Table::default();
                continue;
            }
            let batch = self.alerts.lock().batch(Utc::now(), resend);
            let (body, resolved) = batch;
            if body.is_empty() {
                continue;
            }
            let bytes = serde_json::to_vec(&body).unwrap_or_default();
            match self.poster.post(&url, &[], bytes).await {
                Ok(()) => {
                    self.alerts.lock().posted(resolved);
                    self.metrics.notification("alerts_posted");
                }
                Err(why) => {
                    warn!(%why, "alerts not posted to Alertmanager; posted again at the next change or resend");
                    self.metrics.notification("alerts_failed");
                }
            }
        }
    }

    fn wake(&self, key: PolicyKey) {
        if let Some(wake) = self.wake.get() {
            wake(key);
        }
    }
}

impl Outcomes for Notifier {
    fn sinks(&self, delivery: &Delivery) -> Option<Vec<WebhookSink>> {
        self.sinks
            .lock()
            .get(&delivery.key)
            .filter(|(uid, _)| *uid == delivery.uid)
            .map(|(_, sinks)| sinks.clone())
    }

    fn delivered(&self, delivery: &Delivery) {
        self.metrics.notification("webhook_delivered");
        if self.sinks(delivery).is_none() {
            return;
        }
        {
            let mut delivered = self.delivered.lock();
            let mark = delivered
                .entry(delivery.key.clone())
                .or_insert_with(|| (delivery.uid.clone(), 0));
            if mark.0 != delivery.uid {
                *mark = (delivery.uid.clone(), 0);
            }
            mark.1 = mark.1.max(delivery.entry.id);
        }
        self.wake(delivery.key.clone());
    }

    fn failed(&self, _delivery: &Delivery, _why: &str) {
        self.metrics.notification("webhook_failed");
    }

    fn room_for(&self, deferred: Vec<PolicyKey>) {
        for key in deferred {
            self.wake(key);
        }
    }

    fn may_send(&self) -> bool {
        self.leadership.is_leader()
    }
}
