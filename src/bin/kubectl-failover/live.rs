//! What `what-if` starts from, read from the cluster as the controller reads it: each backend's
//! observation, the route the policy owns, and the Gateways the admin lets it attach to.

use failover::{
    api::{FailoverPolicy, FailoverPolicyStatus, conditions::attached},
    endpoints::{SERVICE_NAME_LABEL, observe_service},
    observation::{BackendObservation, Reading, Sample},
    policy::ValidPolicy,
    route::{ParentKind, RouteParent, RouteView},
    tenancy::Gateways,
};
use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use kube::{
    Api, Client,
    api::{DynamicObject, ListParams},
};

/// What the controller's watches would observe of each backend now, primary first.
pub async fn observe(
    client: &Client,
    policy: &FailoverPolicy,
    valid: &ValidPolicy,
) -> anyhow::Result<Vec<BackendObservation>> {
    let services: Api<Service> = Api::namespaced(client.clone(), &valid.namespace);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &valid.namespace);
    let recorded = policy
        .status
        .as_ref()
        .map(|s| s.backends.as_slice())
        .unwrap_or_default();
    let mut observations = Vec::with_capacity(valid.backends.len());
    for backend in valid.backends.iter() {
        let status = recorded.iter().find(|b| b.service == backend.service);
        let mut observation = if backend.remote.is_some() {
            // Another cluster's readiness: as the controller last recorded it.
            status.map_or_else(BackendObservation::default, |b| BackendObservation {
                as_of: b.readiness_as_of.map(|t| t.0),
                unavailable: b.message.clone().filter(|_| !b.ready),
                ..BackendObservation::counted(b.ready_endpoints, b.total_endpoints)
            })
        } else {
            let exists = services.get_opt(&backend.service).await?.is_some();
            let selector = format!("{SERVICE_NAME_LABEL}={}", backend.service);
            let listed = slices
                .list(&ListParams::default().labels(&selector))
                .await?;
            observe_service(exists, &listed.items)
        };
        observation.health = status.and_then(|b| b.health.as_ref()).map(|h| Reading {
            sample: Some(Sample {
                value: h.value,
                read_at: h.read_at.0,
            }),
            ..Reading::default()
        });
        observations.push(observation);
    }
    Ok(observations)
}

/// The route the policy owns, as the cluster has it (its parents' answers go into the status).
pub async fn route(client: &Client, valid: &ValidPolicy) -> anyhow::Result<Option<RouteView>> {
    let target = &valid.route;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &valid.namespace, &target.resource());
    Ok(match api.get_opt(&target.name).await {
        Ok(route) => route.map(|r| target.kind().view(&r)),
        // The route's CRD is not installed: the controller would say so; what-if has no route.
        Err(kube::Error::Api(e)) if e.code == 404 => None,
        Err(e) => return Err(e.into()),
    })
}

/// The Gateways of other namespaces the cluster admin lets this policy's route attach to, as
/// the controller last recorded them: every one its route names, but those its status records
/// as not allowed.
pub fn consent(valid: &ValidPolicy, recorded: Option<&FailoverPolicyStatus>) -> Gateways {
    let (_, elsewhere) = valid.route.without_parents(|p| {
        p.kind == ParentKind::Gateway
            && p.namespace
                .as_deref()
                .is_some_and(|ns| ns != &*valid.namespace)
    });
    let refused = |p: &RouteParent| {
        recorded
            .into_iter()
            .flat_map(|s| &s.route_parents)
            .any(|r| {
                r.reason.as_deref() == Some(attached::GATEWAY_NOT_ALLOWED)
                    && Some(r.namespace.as_str()) == p.namespace.as_deref()
                    && r.name == p.name
            })
    };
    let allowed: Vec<String> = elsewhere
        .iter()
        .filter(|p| !refused(p))
        .filter_map(|p| Some(format!("{}/{}", p.namespace.as_deref()?, p.name)))
        .collect();
    Gateways::parse(&allowed).unwrap_or_default()
}
