//! The objects a scale is made of (backend Services, their EndpointSlices, policies), created in
//! bulk, and the readiness flips written to them.

use std::time::{Duration, Instant};

use failover_core::api::FailoverPolicy;
use futures::{StreamExt, stream};
use k8s_openapi::api::{
    core::v1::{Endpoints, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;

use crate::support::TestEnv;

/// How many unreferenced Services take the background churn.
pub const CHURN_SERVICES: usize = 200;

/// One EndpointSlice of one endpoint for `service`, ready or not.
pub fn slice(service: &str, ready: bool) -> EndpointSlice {
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{service}-bench"), "labels": {
            "kubernetes.io/service-name": service, "endpointslice.kubernetes.io/managed-by": "bench"}},
        "addressType": "IPv4",
        "ports": [{"port": 80}],
        "endpoints": [{"addresses": ["10.9.0.1"], "conditions": {"ready": ready}}],
    }))
    .expect("slice")
}

pub fn service(name: &str) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"clusterIP": "None", "ports": [{"port": 80}]},
    }))
    .expect("service")
}

/// Policy `p<i>`: primary `p<i>` (in site `one`), secondaries `p<i>-a` and `p<i>-b` (in site
/// `two`). The sites matter only to a failover group that lists the policy (`groups`).
pub fn policy(i: usize) -> FailoverPolicy {
    policy_named(&format!("p{i}"))
}

/// Policy `name`, as [`policy`] makes `p<i>`.
pub fn policy_named(name: &str) -> FailoverPolicy {
    serde_json::from_value(json!({
        "apiVersion": "failover.dev/v1alpha1", "kind": "FailoverPolicy", "metadata": {"name": name},
        "spec": {"service": name, "primary": name, "primarySite": "one",
                 "secondaries": [{"service": format!("{name}-a"), "site": "two"},
                                 {"service": format!("{name}-b"), "site": "two"}]},
    }))
    .expect("policy")
}

/// Creates objects with bounded concurrency, retrying on throttling.
pub async fn create_all<K>(api: &Api<K>, objects: Vec<K>, concurrency: usize)
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    stream::iter(objects)
        .for_each_concurrent(concurrency, |obj| {
            let api = api.clone();
            async move {
                for attempt in 0..20 {
                    match api.create(&PostParams::default(), &obj).await {
                        Ok(_) => return,
                        Err(kube::Error::Api(e)) if e.code == 409 => return,
                        Err(_) => {
                            tokio::time::sleep(Duration::from_millis(50 * (attempt + 1))).await
                        }
                    }
                }
                panic!("could not create {}", obj.name_any());
            }
        })
        .await;
}

/// Every object of a scale of `n` policies: 3n backend Services with one ready EndpointSlice each,
/// the churn Services, the relay's two, and the policies. Returns the churn Services' names.
pub async fn create_scale(env: &TestEnv, n: usize) -> Vec<String> {
    let started = Instant::now();
    let mut names: Vec<String> = (0..n)
        .flat_map(|i| [format!("p{i}"), format!("p{i}-a"), format!("p{i}-b")])
        .collect();
    let churn: Vec<String> = (0..CHURN_SERVICES).map(|i| format!("churn{i}")).collect();
    names.extend(churn.iter().cloned());
    names.extend(["relay".to_string(), "relay-b".to_string()]);
    let services: Api<Service> = env.api();
    let slices: Api<EndpointSlice> = env.api();
    create_all(&services, names.iter().map(|s| service(s)).collect(), 32).await;
    create_all(&slices, names.iter().map(|s| slice(s, true)).collect(), 32).await;
    create_all(&env.api(), (0..n).map(policy).collect(), 32).await;
    eprintln!(
        "[{n}] {} Services and EndpointSlices and {n} policies created in {:.1}s",
        names.len(),
        started.elapsed().as_secs_f64()
    );
    churn
}

/// The Endpoints of `service`, its one address ready or not: what linkerd-failover reads.
pub fn endpoints(service: &str, ready: bool) -> Endpoints {
    let addresses = if ready {
        "addresses"
    } else {
        "notReadyAddresses"
    };
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": service},
        "subsets": [{addresses: [{"ip": "10.9.0.1"}], "ports": [{"port": 80}]}],
    }))
    .expect("endpoints")
}

/// An object a backend's readiness is written to: the EndpointSlice the controller reads, or
/// the Endpoints the peer reads.
pub trait Readiness:
    kube::Resource<DynamicType = ()>
    + Clone
    + serde::Serialize
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    /// The object of `service`, its one endpoint ready or not.
    fn of(service: &str, ready: bool) -> Self;
    /// The object's name.
    fn name_of(service: &str) -> String;
}

impl Readiness for EndpointSlice {
    fn of(service: &str, ready: bool) -> Self {
        slice(service, ready)
    }

    fn name_of(service: &str) -> String {
        format!("{service}-bench")
    }
}

impl Readiness for Endpoints {
    fn of(service: &str, ready: bool) -> Self {
        endpoints(service, ready)
    }

    fn name_of(service: &str) -> String {
        service.to_string()
    }
}

/// Sets the readiness of `service`'s one endpoint; returns when the write was acknowledged.
pub async fn set_ready<K: Readiness>(api: &Api<K>, service: &str, ready: bool) -> Instant {
    try_set_ready(api, service, ready)
        .await
        .expect("readiness write");
    Instant::now()
}

/// Writes the readiness of `service`'s one endpoint.
pub async fn try_set_ready<K: Readiness>(
    api: &Api<K>,
    service: &str,
    ready: bool,
) -> Result<K, kube::Error> {
    api.patch(
        &K::name_of(service),
        &PatchParams::apply("bench").force(),
        &Patch::Apply(&K::of(service, ready)),
    )
    .await
}

/// A reproducible sequence of policy indexes (xorshift), so runs flip the same policies.
pub struct Picks(u64);

impl Picks {
    pub fn new() -> Self {
        Self(0x2545_F491_4F6C_DD1D)
    }

    pub fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}
