//! The local control plane itself: a real API server that stores objects, a controller-manager
//! whose garbage collector works, `/readyz` through real kubectl, and a clean stop.

use std::{path::Path, time::Duration};

use k8s_openapi::api::core::v1::{ConfigMap, Service, ServicePort, ServiceSpec};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ObjectMeta, PostParams},
};

use crate::support::{self, DedicatedPlane, kubectl, test_env, wait_until};

#[tokio::test]
async fn creates_namespace_and_service_and_reads_them_back() {
    let Some(env) = test_env!() else { return };
    let services: Api<Service> = env.api();
    let svc = Service {
        metadata: ObjectMeta {
            name: Some("web".into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            ports: Some(vec![ServicePort {
                port: 8080,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    services
        .create(&PostParams::default(), &svc)
        .await
        .expect("create Service");
    let read = services.get("web").await.expect("read Service");
    assert_eq!(read.namespace().as_deref(), Some(env.ns.as_str()));
    assert_eq!(
        read.spec.and_then(|s| s.ports).map(|p| p[0].port),
        Some(8080)
    );
}

#[tokio::test]
async fn garbage_collector_deletes_dependents_of_a_deleted_owner() {
    let Some(env) = test_env!() else { return };
    let maps: Api<ConfigMap> = env.api();
    let owner = maps
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("owner".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .expect("create owner");
    let dependent = ConfigMap {
        metadata: ObjectMeta {
            name: Some("dependent".into()),
            owner_references: Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    name: "owner".into(),
                    uid: owner.uid().expect("uid"),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        },
        ..Default::default()
    };
    maps.create(&PostParams::default(), &dependent)
        .await
        .expect("create dependent");
    maps.delete("owner", &DeleteParams::default())
        .await
        .expect("delete owner");
    let collected = wait_until(Duration::from_secs(60), || async {
        maps.get_opt("dependent").await.ok().flatten().is_none()
    })
    .await;
    assert!(
        collected,
        "the garbage collector did not delete the dependent within 60s"
    );
}

#[tokio::test]
async fn readyz_answers_ok_through_kubectl() {
    let _turn = support::turn().await;
    let Some(cp) = support::shared() else { return };
    let out = kubectl(cp, &["get", "--raw", "/readyz"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
}

fn pids(dir: &Path) -> Vec<u32> {
    ["etcd", "kube-apiserver", "kube-controller-manager"]
        .iter()
        .filter_map(|c| std::fs::read_to_string(dir.join(format!("{c}.pid"))).ok())
        .filter_map(|p| p.trim().parse().ok())
        .collect()
}

#[tokio::test]
async fn a_second_instance_runs_beside_the_first_and_stops_cleanly() {
    let Some(first) = support::shared() else {
        return;
    };
    // Stopped by the test; on drop too, if the test fails before.
    let plane = DedicatedPlane::start().await;
    let second = plane.cp;
    assert_ne!(first.kubeconfig, second.kubeconfig);
    for cp in [first, second] {
        let out = kubectl(cp, &["get", "--raw", "/readyz"]);
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    }
    let started = pids(&second.dir);
    assert_eq!(started.len(), 3, "three processes expected");
    let out = second.script(&["stop", second.dir.to_str().expect("dir")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !second.dir.exists(),
        "the instance's directory must be removed"
    );
    for pid in started {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} still running after stop"
        );
    }
    // The first instance is untouched.
    let out = kubectl(first, &["get", "--raw", "/readyz"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
}
