//! Backend Services and their EndpointSlices, written by hand as a mirrored Service's are.

use std::collections::BTreeMap;

use failover_core::endpoints::SERVICE_NAME_LABEL;
use k8s_openapi::api::{
    core::v1::{Service, ServicePort, ServiceSpec},
    discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice},
};
use kube::{
    ResourceExt,
    api::{ObjectMeta, Patch, PatchParams},
};

use super::TestEnv;

impl TestEnv {
    /// Creates (or keeps) a selectorless Service, as a mirrored Service is.
    pub async fn create_service(&self, name: &str) {
        let svc = Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                ports: Some(vec![ServicePort {
                    port: 80,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        self.api::<Service>()
            .patch(
                name,
                &PatchParams::apply("failover-tests").force(),
                &Patch::Apply(&svc),
            )
            .await
            .expect("applying Service");
    }

    /// Sets the endpoints of a Service: one EndpointSlice `<service>-test` with `ready` ready
    /// and `not_ready` not-ready endpoints. Returns the slice's new resourceVersion.
    pub async fn set_endpoints(&self, service: &str, ready: usize, not_ready: usize) -> String {
        let endpoint = |i: usize, is_ready: bool| Endpoint {
            addresses: vec![format!(
                "10.{}.{}.{}",
                (i / 65536) % 256,
                (i / 256) % 256,
                i % 256
            )],
            conditions: Some(EndpointConditions {
                ready: Some(is_ready),
                ..Default::default()
            }),
            ..Default::default()
        };
        let endpoints = (0..ready)
            .map(|i| endpoint(i, true))
            .chain((ready..ready + not_ready).map(|i| endpoint(i, false)))
            .collect();
        let slice = EndpointSlice {
            metadata: ObjectMeta {
                name: Some(format!("{service}-test")),
                labels: Some(BTreeMap::from([
                    (SERVICE_NAME_LABEL.to_string(), service.to_string()),
                    (
                        "endpointslice.kubernetes.io/managed-by".to_string(),
                        "failover-tests".to_string(),
                    ),
                ])),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            endpoints,
            ports: Some(vec![EndpointPort {
                port: Some(80),
                ..Default::default()
            }]),
        };
        let applied = self
            .api::<EndpointSlice>()
            .patch(
                &format!("{service}-test"),
                &PatchParams::apply("failover-tests").force(),
                &Patch::Apply(&slice),
            )
            .await
            .expect("applying EndpointSlice");
        applied.resource_version().unwrap_or_default()
    }

    /// Creates Services with one ready endpoint each.
    pub async fn ready_backends(&self, services: &[&str]) {
        for s in services {
            self.create_service(s).await;
            self.set_endpoints(s, 1, 0).await;
        }
    }
}
