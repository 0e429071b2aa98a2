//! What `what-if` starts from, read from the cluster as the controller reads it: each backend's
//! observation, the route the policy owns, the Gateways the admin lets it attach to and what
//! their listeners admit, who holds what it claims, and the site its failover group routes it
//! to.

use chrono::Utc;
use failover_core::{
    api::{
        FailoverGroup, FailoverPolicy, FailoverPolicyStatus,
        conditions::{READY, attached, group},
    },
    backend::{BackendKind, BackendRef},
    claims::{Claimant, Claims, ids, recorded},
    decide::group::Order,
    endpoints::observe_service,
    listeners::{self, GatewayListeners, Listeners},
    observation::{Availability, BackendObservation, PolicyKey, Reading, Sample},
    policy::ValidPolicy,
    route::{ParentKind, RouteObject, RouteParent, RouteTarget, RouteView},
    tenancy::Gateways,
    validate::validate,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DynamicObject, ListParams},
};
use std::sync::Arc;

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
        let status = recorded
            .iter()
            .find(|b| b.service == backend.reference.name);
        let mut observation = if backend.remote.is_some() {
            // Another cluster's readiness: as the controller last recorded it.
            status.map_or_else(BackendObservation::default, |b| BackendObservation {
                availability: Availability::recorded(
                    b.message.clone().filter(|_| !b.ready),
                    b.readiness_as_of.map(|t| t.0),
                ),
                ..BackendObservation::counted(b.ready_endpoints, b.total_endpoints)
            })
        } else {
            let exists = exists(&services, &backend.reference).await?;
            let label = backend.reference.kind.spec().slice_label;
            let selector = format!("{label}={}", backend.reference.name);
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

/// Whether a backend's object exists, as the controller's watch of its kind says.
async fn exists(services: &Api<Service>, backend: &BackendRef) -> anyhow::Result<bool> {
    Ok(match backend.kind {
        BackendKind::Service => services.get_opt(&backend.name).await?.is_some(),
    })
}

/// The route the policy owns, as the cluster has it (its parents' answers go into the status).
pub async fn route(client: &Client, valid: &ValidPolicy) -> anyhow::Result<Route> {
    let target = &valid.route;
    let api: Api<RouteObject> =
        Api::namespaced_with(client.clone(), &valid.namespace, &target.resource());
    Ok(match api.get_opt(&target.name).await {
        Ok(route) => Route::Served(route.map(|r| target.kind().view(&r))),
        // The route's CRD is not installed: the controller would say so.
        Err(kube::Error::Api(e)) if e.code == 404 => Route::ApiMissing,
        Err(e) => return Err(e.into()),
    })
}

/// The route the policy owns, as the cluster has it.
pub enum Route {
    /// Its API is served; the route, if it exists.
    Served(Option<RouteView>),
    /// Its API (CRD) is not installed.
    ApiMissing,
}

impl Route {
    /// The route, if it exists.
    pub fn view(&self) -> Option<&RouteView> {
        match self {
            Route::Served(view) => view.as_ref(),
            Route::ApiMissing => None,
        }
    }
}

/// What the Gateways' listeners admit, read with the controller's own function from every
/// Gateway and namespace this client may list (else those of `namespace`; none where it may read
/// none, or the Gateway API is not installed: then, as for the controller, not judged).
pub async fn listeners(client: &Client, namespace: &str) -> anyhow::Result<Arc<Listeners>> {
    let mut listeners = Listeners::default();
    let resource = listeners::resource();
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let own: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let gateways = match all.list(&ListParams::default()).await {
        Err(kube::Error::Api(e)) if e.code == 403 => own.list(&ListParams::default()).await,
        listed => listed,
    };
    let gateways = match gateways {
        Ok(list) => list.items,
        Err(kube::Error::Api(e)) if e.code == 403 || e.code == 404 => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    for gateway in &gateways {
        let (Some(ns), Some(name)) = (gateway.namespace(), gateway.meta().name.as_deref()) else {
            continue;
        };
        let admits = GatewayListeners::of_spec(&gateway.data["spec"]);
        listeners.set_gateway(&ns, name, Some(admits));
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let labelled = match namespaces.list_metadata(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(_) => namespaces
            .get_metadata(namespace)
            .await
            .into_iter()
            .collect(),
    };
    for ns in &labelled {
        if let Some(name) = ns.metadata.name.as_deref() {
            listeners.set_namespace(name, ns.metadata.labels.as_ref());
        }
    }
    Ok(Arc::new(listeners))
}

/// The Gateways of other namespaces the cluster admin lets this policy's route attach to, as
/// the controller last recorded them (every one its route names, but those its status records
/// as not allowed), with what their listeners admit.
pub fn consent(
    valid: &ValidPolicy,
    recorded: Option<&FailoverPolicyStatus>,
    listeners: &Arc<Listeners>,
) -> Gateways {
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
    Gateways::parse(&allowed)
        .unwrap_or_default()
        .with_listeners(listeners.clone())
}

/// Who holds what, in the controller's own claims table built from every policy this client may
/// list (all namespaces, else the policy's own), each claim ranked by when its status records it
/// was made.
pub async fn claims(
    client: &Client,
    namespace: &str,
    listeners: &Arc<Listeners>,
) -> anyhow::Result<Claims> {
    let all: Api<FailoverPolicy> = Api::all(client.clone());
    let listed = match all.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(kube::Error::Api(e)) if e.code == 403 => {
            let own: Api<FailoverPolicy> = Api::namespaced(client.clone(), namespace);
            own.list(&ListParams::default()).await?.items
        }
        Err(e) => return Err(e.into()),
    };
    let mut table = Claims::default();
    let now = Utc::now().timestamp_millis();
    for policy in &listed {
        let (Some(ns), Some(name)) = (policy.namespace(), policy.meta().name.as_deref()) else {
            continue;
        };
        let key = PolicyKey::new(&ns, name);
        let uid = policy.uid().unwrap_or_default();
        let recorded = recorded(&ns, policy.status.as_ref());
        let claims = match validate(policy) {
            Ok(valid) => consent(&valid, policy.status.as_ref(), listeners).claims(&valid),
            // An invalid policy still claims what its route in place routes.
            Err(_) => Gateways::default()
                .with_listeners(listeners.clone())
                .route_claims(&ns, &policy.spec.service, &RouteTarget::of(policy)),
        };
        let created = policy
            .meta()
            .creation_timestamp
            .as_ref()
            .map_or(i64::MAX, |t| t.0.as_second());
        let claimant = Claimant {
            key: &key,
            uid: &uid,
            created,
            claims: ids(&claims),
            recorded,
        };
        table.update(&key, Some(&claimant), now);
    }
    table.listed();
    Ok(table)
}

/// What the policy's failover group asks of it, as the group's status says: the first group by
/// name in the policy's namespace that lists it, routing its members to the site its status
/// names. `None` when no group lists it, the group has chosen no site, or the FailoverGroup CRD
/// is not installed.
pub async fn group_order(client: &Client, valid: &ValidPolicy) -> anyhow::Result<Option<Order>> {
    let api: Api<FailoverGroup> = Api::namespaced(client.clone(), &valid.namespace);
    let mut groups = match api.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    groups.sort_by_key(ResourceExt::name_any);
    let Some(group) = groups.into_iter().find(|g| {
        g.spec
            .members
            .iter()
            .any(|m| m.as_str() == valid.name.as_str())
    }) else {
        return Ok(None);
    };
    let following = group.status.as_ref().is_some_and(|s| {
        s.members
            .iter()
            .any(|m| m.name.as_str() == valid.name.as_str() && m.following)
            && !s
                .conditions
                .iter()
                .any(|c| c.type_ == READY && c.reason == group::NO_SITE_READY)
    });
    let site = group.status.and_then(|s| s.site).filter(|_| following);
    Ok(site.map(|site| Order {
        group: group.metadata.name.unwrap_or_default().into(),
        site: site.into(),
        due: None,
    }))
}
