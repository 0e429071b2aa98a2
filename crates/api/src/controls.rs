//! What an operator sets beside the backends: a drill, and how traffic returns to the primary
//! (a failback ramp).

use garde::Validate;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::{
    Timestamp, is_false,
    rules::{
        self, DNS1035_LABEL, GO_DURATION, MAX_DURATION_LENGTH, MAX_LABEL, MAX_RAMP_STEPS,
        dns1035_label,
    },
};

/// A drill: all traffic to one backend until an end time.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Validate)]
#[serde(rename_all = "camelCase")]
pub struct DrillSpec {
    /// The backend that takes all traffic during the drill: the primary or a secondary.
    #[schemars(length(min = 1, max = MAX_LABEL), pattern(DNS1035_LABEL))]
    #[garde(length(min = 1, max = MAX_LABEL), custom(dns1035_label))]
    pub to: String,

    /// When the drill ends (RFC 3339, e.g. `2026-11-27T10:30:00Z`): from then on traffic follows
    /// the ordinary rules again.
    #[garde(skip)]
    pub until: Timestamp,

    /// Move traffic even while the backend is not ready (default false: the drill waits for it).
    #[serde(default, skip_serializing_if = "is_false")]
    #[garde(skip)]
    pub force: bool,
}

/// How traffic returns to the primary.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Validate)]
#[serde(rename_all = "camelCase")]
pub struct FailbackSpec {
    /// Return traffic to the primary in steps instead of all at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub ramp: Option<RampSpec>,
}

/// A gradual failback: the primary's share of the traffic goes through `steps`, each held for
/// `every` while the primary stays ready; the primary turning not ready during the ramp sends
/// traffic back to the secondaries at once. Not with strategy `Proportional`, which follows
/// health continuously.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Validate)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = rules::RAMP_STEPS_INCREASE.element_rule())]
#[x_kube(validation = rules::RAMP_ENDS_AT_100.element_rule())]
pub struct RampSpec {
    /// The primary's share of the traffic at each step, in percent, increasing, the last 100
    /// (e.g. `[10, 25, 50, 100]`; 1 to 10 steps).
    #[schemars(length(min = 1, max = MAX_RAMP_STEPS))]
    #[schemars(inner(range(min = 1, max = 100)))]
    #[garde(length(min = 1, max = MAX_RAMP_STEPS), inner(range(min = 1, max = 100)))]
    pub steps: Vec<i32>,

    /// How long each step lasts, as a duration such as `30s` (at most `24h`).
    #[schemars(length(max = MAX_DURATION_LENGTH), pattern(GO_DURATION))]
    #[x_kube(validation = rules::hold_duration_rule())]
    #[garde(skip)]
    pub every: String,
}
