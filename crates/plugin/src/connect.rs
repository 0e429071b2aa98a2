//! The cluster and namespace the plugin talks to. kubectl does not hand its own flags to a
//! plugin, so `--kubeconfig` and `--context` are the plugin's own, read as kubectl reads them.

use std::path::PathBuf;

use failover_core::api::FailoverPolicy;
use kube::{
    Api, Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};

/// A client, and the namespace commands act in.
pub struct Target {
    client: Client,
    /// `-n`, else the context's namespace.
    pub namespace: String,
}

impl Target {
    /// Policies of the namespace.
    pub fn api(&self) -> Api<FailoverPolicy> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The client.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Policies of every namespace.
    pub fn all(&self) -> Api<FailoverPolicy> {
        Api::all(self.client.clone())
    }
}

/// Connects as kubectl would with these flags: a kubeconfig file (default: KUBECONFIG, else
/// `~/.kube/config`, else the Pod's service account), a context of it (default: its current one),
/// and a namespace (default: the context's).
pub async fn connect(
    kubeconfig: Option<PathBuf>,
    context: Option<String>,
    namespace: Option<String>,
) -> anyhow::Result<Target> {
    let options = KubeConfigOptions {
        context,
        ..Default::default()
    };
    let config = match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(&path)
                .map_err(|e| anyhow::anyhow!("cannot read kubeconfig {}: {e}", path.display()))?;
            Config::from_custom_kubeconfig(file, &options).await
        }
        None if options.context.is_some() => Config::from_kubeconfig(&options).await,
        None => {
            return from_config(
                Config::infer()
                    .await
                    .map_err(|e| anyhow::anyhow!("no usable kubeconfig: {e}"))?,
                namespace,
            );
        }
    }
    .map_err(|e| anyhow::anyhow!("no usable kubeconfig: {e}"))?;
    from_config(config, namespace)
}

fn from_config(config: Config, namespace: Option<String>) -> anyhow::Result<Target> {
    let namespace = namespace.unwrap_or_else(|| config.default_namespace.clone());
    Ok(Target {
        client: Client::try_from(config)?,
        namespace,
    })
}
