//! `failover-controller`: runs the FailoverPolicy controller.

use std::sync::Arc;

use anyhow::Context as _;
use clap::Parser;
use failover::{
    controller::{self, Settings},
    leader::LeaderState,
    metrics::Metrics,
    telemetry::{self, LogFormat},
};
use tracing::info;

/// Fails traffic over between backend Services by owning SMI TrafficSplits, driven by
/// EndpointSlice readiness.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Path to a kubeconfig; without it, KUBECONFIG or the in-cluster service account is used.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<std::path::PathBuf>,

    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "WATCH_NAMESPACE")]
    namespace: Option<String>,

    /// Log level or filter directive, e.g. `info` or `failover=debug` (RUST_LOG wins when set).
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    log_level: String,

    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain)]
    log_format: LogFormat,

    /// Most policies reconciled at once.
    #[arg(long, default_value_t = 16)]
    concurrency: u16,

    /// Identity of this replica in Events and the leader Lease (default: the host name).
    #[arg(long, env = "POD_NAME")]
    instance: Option<String>,
}

async fn client(args: &Args) -> anyhow::Result<kube::Client> {
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .context("loading kubeconfig")?
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig and not in a cluster")?,
    };
    kube::Client::try_from(config).context("building the API client")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    telemetry::init(&args.log_level, args.log_format);
    let client = client(&args).await?;
    let metrics = Arc::new(Metrics::new());
    let leader = LeaderState::always();
    let settings = Settings {
        namespace: args.namespace.clone(),
        concurrency: args.concurrency,
        instance: args.instance.clone(),
    };
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let (_caches, run) = controller::start(client, settings, metrics, leader, shutdown);
    info!(
        namespace = args.namespace.as_deref().unwrap_or("<all>"),
        "starting"
    );
    run.await;
    Ok(())
}
