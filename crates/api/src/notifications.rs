//! Who is told of a policy's transitions, and the record of them: the `spec.notifications`
//! types, and a transition as `status.history` keeps it.

use garde::Validate;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    Timestamp,
    rules::{DNS1123_SUBDOMAIN, MAX_SUBDOMAIN, dns1123_subdomain},
};

/// The most transitions `status.history` can keep.
pub const MAX_HISTORY: u32 = 50;
/// How many transitions `status.history` keeps unless the policy says otherwise.
pub const DEFAULT_HISTORY: u32 = 10;
/// The most webhook sinks a policy names.
pub const MAX_WEBHOOKS: usize = 4;
/// The longest webhook URL.
pub const MAX_URL: usize = 512;
/// A webhook URL: plain HTTP to a host, an optional port and path, no query, user or escapes
/// (which the admin's allowed URLs could not be matched against).
pub const WEBHOOK_URL: &str = r"^http://[A-Za-z0-9.\-\[\]:]+(/[A-Za-z0-9._~/\-]*)?$";

/// Who is told of the policy's transitions, and how many are kept in `status.history`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Validate)]
#[serde(rename_all = "camelCase")]
pub struct NotificationsSpec {
    /// How many transitions `status.history` keeps, newest last (1 to 50; default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_HISTORY))]
    #[garde(inner(range(min = 1, max = MAX_HISTORY)))]
    pub history: Option<u32>,

    /// The alert the controller posts to the cluster admin's Alertmanager while the policy is
    /// failed over, has no ready backend, or runs a drill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub alerts: Option<AlertsSpec>,

    /// Receivers of a CloudEvent per transition (at most 4). Only URLs the cluster admin allows
    /// (`--notification-allowed-urls`) are contacted; any other is refused (condition
    /// `Notified`, reason `WebhookNotAllowed`) and never contacted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_WEBHOOKS))]
    #[garde(length(max = MAX_WEBHOOKS), dive)]
    pub webhooks: Vec<WebhookSink>,
}

impl NotificationsSpec {
    /// How many transitions the history keeps.
    pub fn history_limit(&self) -> usize {
        self.history
            .unwrap_or(DEFAULT_HISTORY)
            .clamp(1, MAX_HISTORY) as usize
    }
}

/// The policy's alert.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Validate)]
#[serde(rename_all = "camelCase")]
pub struct AlertsSpec {
    /// Post no alert for this policy.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[garde(skip)]
    pub disabled: bool,

    /// The alert's `severity` label (default: `critical` with no ready backend, `warning`
    /// failed over, `info` during a drill).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(skip)]
    pub severity: Option<Severity>,
}

/// An alert's `severity` label.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Someone must act now.
    Critical,
    /// Someone should look.
    Warning,
    /// For the record.
    Info,
}

impl Severity {
    /// As the label says it.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

/// A receiver of the policy's transitions as CloudEvents 1.0 (HTTP binary mode), each body
/// signed with HMAC-SHA256.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Validate)]
#[serde(rename_all = "camelCase")]
pub struct WebhookSink {
    /// Where the events are posted, `http://host:port/path`.
    #[schemars(length(min = 1, max = MAX_URL), pattern(WEBHOOK_URL))]
    #[garde(length(min = 1, max = MAX_URL))]
    pub url: String,

    /// The Secret of the policy's namespace that holds the signing key: the body's
    /// HMAC-SHA256 under it is sent as `X-Failover-Signature: sha256=<hex>`.
    #[garde(dive)]
    pub secret_ref: SecretKeyRef,
}

/// A key of a Secret in the policy's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Validate)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// The Secret's name.
    #[schemars(length(min = 1, max = MAX_SUBDOMAIN), pattern(DNS1123_SUBDOMAIN))]
    #[garde(length(min = 1, max = MAX_SUBDOMAIN), custom(dns1123_subdomain))]
    pub name: String,

    /// The key in its data (default `key`).
    #[serde(default = "default_key")]
    #[schemars(length(min = 1, max = MAX_SUBDOMAIN))]
    #[garde(length(min = 1, max = MAX_SUBDOMAIN))]
    pub key: String,
}

fn default_key() -> String {
    "key".to_string()
}

/// One transition, as the controller decided it.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// Its number, one more than the entry before (the first is 1); with the policy's uid, the
    /// id of its CloudEvent.
    pub id: u64,
    /// When it was decided.
    pub time: Timestamp,
    /// What happened: `FailedOver`, `FailedBack`, `NoReadyBackend`, `Recovered`,
    /// `PinnedBackendNotReady` or `FailbackStep`.
    pub transition: String,
    /// The weights before, `service=weight` joined by commas, primary first.
    pub from: String,
    /// The weights after, in the same form.
    pub to: String,
    /// What triggered it: a backend's readiness or health reading, `spec.pin`, `spec.drill`,
    /// the group, or a failback ramp's step.
    pub trigger: String,
    /// Why, in one line.
    pub reason: String,
}
