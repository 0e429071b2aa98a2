//! What the cluster admin set for this controller, fixed at start: the namespaces it watches
//! (one, or all; and whether a shard of them),
//! the Gateways of other namespaces routes may attach to, and whether it may scale workloads.

use failover_core::tenancy::Gateways;

/// What the cluster admin set; never changed after the start.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    /// Watch only this namespace; all namespaces when `None`.
    pub namespace: Option<String>,
    /// Whether this controller owns only the policies of the namespaces its `--shard` selects
    /// (the selector is the listeners' cache's, which reads the namespaces' labels).
    pub sharded: bool,
    /// The Gateways of other namespaces that routes may attach to.
    pub gateways: Gateways,
    /// Whether policies may scale their secondaries' workloads.
    pub scaling: Scaling,
}

/// Whether the cluster admin lets policies scale their secondaries' workloads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scaling {
    /// `--allow-scaling`: workloads that consent are raised and restored.
    Allowed,
    /// No workload is scaled; a policy asking for it says why.
    #[default]
    Forbidden,
}

impl Scaling {
    /// The admin's flag, as this enum.
    pub fn allowed_if(flag: bool) -> Self {
        if flag { Self::Allowed } else { Self::Forbidden }
    }
}
