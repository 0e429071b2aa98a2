//! Remote clusters for the multi-cluster tests: more local control planes started by the
//! project's own script, a read-only ServiceAccount on each (what the controller is granted
//! there), and cluster Secrets declaring them to the controller.

use std::collections::BTreeMap;

use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::api::{ObjectMeta, Patch, PatchParams};

use super::{DedicatedPlane, TestEnv};

/// What the controller may do in a remote namespace: read EndpointSlices and Services.
pub const REMOTE_READER_RULES: &str = r#"
- apiGroups: ["discovery.k8s.io"]
  resources: ["endpointslices"]
  verbs: ["get", "list", "watch"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch"]
"#;

/// Starts a remote cluster's control plane with the CRDs installed, stopped when the returned
/// plane is dropped.
pub async fn remote_control_plane() -> DedicatedPlane {
    DedicatedPlane::with_crds().await
}

impl TestEnv {
    /// A kubeconfig for this (remote) namespace as the read-only ServiceAccount `reader`.
    pub fn reader_kubeconfig(&self) -> String {
        let path = self.service_account_kubeconfig("reader");
        self.grant("reader", "reader", REMOTE_READER_RULES);
        std::fs::read_to_string(path).expect("reader kubeconfig")
    }

    /// Declares a remote cluster to the controller: a Secret labelled `failover.dev/cluster`
    /// in this namespace, with the kubeconfig and `staleAfter`, granting this namespace's
    /// policies every namespace there.
    pub async fn declare_cluster(&self, name: &str, kubeconfig: &str, stale_after: &str) {
        let grants = format!("{}=*", self.ns);
        self.declare_cluster_granting(name, kubeconfig, stale_after, Some(&grants))
            .await;
    }

    /// Declares a remote cluster with these namespace grants (`failover.dev/namespaces`; `None`:
    /// no annotation, each namespace reads its namesake).
    pub async fn declare_cluster_granting(
        &self,
        name: &str,
        kubeconfig: &str,
        stale_after: &str,
        grants: Option<&str>,
    ) {
        let mut annotations = BTreeMap::from([(
            "failover.dev/stale-after".to_string(),
            stale_after.to_string(),
        )]);
        if let Some(grants) = grants {
            annotations.insert("failover.dev/namespaces".to_string(), grants.to_string());
        }
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(format!("cluster-{name}")),
                labels: Some(BTreeMap::from([(
                    "failover.dev/cluster".to_string(),
                    name.to_string(),
                )])),
                annotations: Some(annotations),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(
                "kubeconfig".to_string(),
                ByteString(kubeconfig.as_bytes().to_vec()),
            )])),
            ..Default::default()
        };
        self.api::<Secret>()
            .patch(
                &format!("cluster-{name}"),
                &PatchParams::apply("failover-tests").force(),
                &Patch::Apply(&secret),
            )
            .await
            .expect("applying the cluster Secret");
    }
}
