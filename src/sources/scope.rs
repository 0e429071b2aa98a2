//! What the cluster admin set for this controller, fixed at start: the namespaces it watches,
//! the Gateways of other namespaces routes may attach to, and whether it may scale workloads.

use crate::tenancy::Gateways;

/// What the cluster admin set; never changed after the start.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    /// Watch only this namespace; all namespaces when `None`.
    pub namespace: Option<String>,
    /// The Gateways of other namespaces that routes may attach to.
    pub gateways: Gateways,
    /// Whether policies may scale their secondaries' workloads.
    pub allow_scaling: bool,
}
