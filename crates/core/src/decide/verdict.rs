//! A condition as a rule decides it ([`Verdict`]): what the decide rules and the status step
//! produce, and the status step turns into a `metav1.Condition` with its transition time.

/// One condition as decided, before it gets its transition time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The condition type.
    pub type_: &'static str,
    /// `True` or `False`.
    pub status: bool,
    /// The reason, one CamelCase word.
    pub reason: String,
    /// A sentence for people.
    pub message: String,
}

impl Verdict {
    /// A verdict from its parts.
    pub fn new(type_: &'static str, status: bool, reason: &str, message: String) -> Self {
        Self {
            type_,
            status,
            reason: reason.to_string(),
            message,
        }
    }
}
