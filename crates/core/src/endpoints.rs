//! How a Service's EndpointSlices are read: the one reading of endpoint counts, used by the
//! controller's readiness cache and by `kubectl failover what-if` alike.
//!
//! An endpoint is ready when its `ready` condition is true or unset, and terminating when its
//! `terminating` condition is true, as the EndpointSlice API defines. A Service's endpoints are
//! summed over its slices per address family and the largest family counts, so a dual-stack
//! Service (one IPv4 and one IPv6 slice listing the same Pods) is not counted twice.

use k8s_openapi::api::discovery::v1::{EndpointConditions, EndpointSlice};

use crate::observation::BackendObservation;

/// Label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Endpoint counts of one EndpointSlice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SliceCounts {
    /// The slice lists IPv6 addresses.
    pub ipv6: bool,
    /// Ready endpoints.
    pub ready: i32,
    /// All endpoints.
    pub total: i32,
    /// Terminating endpoints.
    pub terminating: i32,
}

impl SliceCounts {
    /// The counts of one slice.
    pub fn of(slice: &EndpointSlice) -> Self {
        let endpoints = slice.endpoints.as_slice();
        let count = |condition: fn(&EndpointConditions) -> Option<bool>, unset: bool| {
            let n = endpoints
                .iter()
                .filter(|e| e.conditions.as_ref().and_then(condition).unwrap_or(unset))
                .count();
            i32::try_from(n).unwrap_or(i32::MAX)
        };
        Self {
            ipv6: slice.address_type == "IPv6",
            ready: count(|c| c.ready, true),
            total: i32::try_from(endpoints.len()).unwrap_or(i32::MAX),
            terminating: count(|c| c.terminating, false),
        }
    }
}

/// What is observed of a Service that exists (or not) and has slices of these counts.
pub fn observe<'a>(
    exists: bool,
    slices: impl ExactSizeIterator<Item = &'a SliceCounts>,
) -> BackendObservation {
    let count = u32::try_from(slices.len()).unwrap_or(u32::MAX);
    // Per address family: (ready, total, terminating).
    let (mut v4, mut v6) = ((0i32, 0i32, 0i32), (0i32, 0i32, 0i32));
    for c in slices {
        let family = if c.ipv6 { &mut v6 } else { &mut v4 };
        family.0 = family.0.saturating_add(c.ready);
        family.1 = family.1.saturating_add(c.total);
        family.2 = family.2.saturating_add(c.terminating);
    }
    let (ready_endpoints, total_endpoints, terminating_endpoints) =
        if (v6.0, v6.1) > (v4.0, v4.1) { v6 } else { v4 };
    BackendObservation {
        service_exists: exists,
        slices: count,
        ready_endpoints,
        total_endpoints,
        terminating_endpoints,
        ..BackendObservation::default()
    }
}

/// What is observed of one Service from its slices (each counted once, by name).
pub fn observe_service(exists: bool, slices: &[EndpointSlice]) -> BackendObservation {
    let mut named: Vec<(&str, SliceCounts)> = Vec::with_capacity(slices.len());
    for slice in slices {
        let name = slice.metadata.name.as_deref().unwrap_or_default();
        let counts = SliceCounts::of(slice);
        match named.iter_mut().find(|(n, _)| *n == name) {
            Some(entry) => entry.1 = counts,
            None => named.push((name, counts)),
        }
    }
    observe(exists, named.iter().map(|(_, c)| c))
}
