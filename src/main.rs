//! `failover-controller`: runs the FailoverPolicy controller.

use std::{net::SocketAddr, num::NonZeroU32, sync::Arc, time::Duration};

use anyhow::Context as _;
use clap::Parser;
use failover::{
    controller::{
        self, Settings,
        admin::{self, AdminState},
        telemetry::{self, LogFormat},
    },
    runtime::{
        leader::{self, Leadership, LeaseSettings},
        metrics::Metrics,
        notify::NotifySettings,
    },
    sources::health::budget::{DEFAULT_QUERIES_PER_SECOND, InFlight},
};
use failover_core::{labels::Selector, tenancy::Gateways};
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};
use tokio::sync::watch;
use tracing::{info, warn};

/// The system allocator, counting what it hands out: the heap figures of `/metrics`
/// (`failover_heap_*`). Two atomic additions per allocation.
#[global_allocator]
static GLOBAL: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// The heap as the allocator counts it.
fn heap() -> failover::runtime::metrics::Heap {
    let s = GLOBAL.stats();
    failover::runtime::metrics::Heap {
        // A reallocation's growth or shrinkage is already in the bytes allocated or freed.
        bytes: s.bytes_allocated as i64 - s.bytes_deallocated as i64,
        live_allocations: s.allocations as i64 - s.deallocations as i64,
        allocations: (s.allocations + s.reallocations) as i64,
    }
}

/// Fails traffic over between backend Services by owning SMI TrafficSplits, driven by
/// EndpointSlice readiness.
#[derive(Parser, Debug)]
#[command(version = failover_core::VERSION, about)]
struct Args {
    /// Path to a kubeconfig; without it, the KUBECONFIG variable (one or more paths), then
    /// ~/.kube/config, then the in-cluster service account is used.
    #[arg(long)]
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

    /// Address of the admin HTTP server (/metrics, /healthz, /readyz).
    #[arg(long, env = "ADMIN_ADDR", default_value = "0.0.0.0:8080")]
    admin_addr: SocketAddr,

    /// Most policies reconciled at once.
    #[arg(long, default_value_t = 16)]
    concurrency: u16,

    /// Own only the policies and groups of the namespaces this label selector picks, e.g.
    /// `failover.dev/shard=a` (as `kubectl get -l` reads it): one controller per shard, each
    /// with its own `--lease-name`. Not with `--namespace`.
    #[arg(long, env = "SHARD", value_parser = parse_shard, conflicts_with = "namespace")]
    shard: Option<Selector>,

    /// Elect a leader among replicas through a Lease; only the leader writes.
    #[arg(long, env = "LEADER_ELECT", default_value_t = false)]
    leader_elect: bool,

    /// Name of the leader Lease.
    #[arg(long, default_value = DEFAULT_LEASE_NAME)]
    lease_name: String,

    /// Namespace of the leader Lease (default: the Pod's namespace, else `default`).
    #[arg(long, env = "POD_NAMESPACE")]
    lease_namespace: Option<String>,

    /// Prometheus for health queries of policies that name none, e.g. `http://prometheus:9090`.
    #[arg(long, env = "PROMETHEUS_ADDRESS")]
    prometheus_address: Option<String>,

    /// Other addresses a policy's `spec.health.prometheus.address` may name (comma-separated;
    /// paths below each are allowed too). Any other is refused and never asked.
    #[arg(long, env = "PROMETHEUS_ALLOWED_ADDRESSES", value_delimiter = ',')]
    prometheus_allowed_addresses: Vec<String>,

    /// The label every selector of a health query is scoped by to the policy's namespace, so a
    /// policy reads only its namespace's series; empty: queries are sent as written (a cluster
    /// of one tenant).
    #[arg(long, env = "PROMETHEUS_NAMESPACE_LABEL", default_value = "namespace")]
    prometheus_namespace_label: String,

    /// The most health queries sent to Prometheus a second, every policy's together, shared by
    /// namespace: while several namespaces wait, each gets the next query in turn.
    #[arg(long, env = "PROMETHEUS_QUERIES_PER_SECOND", default_value_t = DEFAULT_QUERIES_PER_SECOND)]
    prometheus_queries_per_second: NonZeroU32,

    /// The most health queries in flight at once, every namespace's together: keep it below
    /// Prometheus' own `--query.max-concurrency` (20 by default), so its rules and dashboards
    /// keep room.
    #[arg(long, env = "PROMETHEUS_QUERIES_IN_FLIGHT", default_value_t = InFlight::default().total as u16, value_parser = clap::value_parser!(u16).range(1..))]
    prometheus_queries_in_flight: u16,

    /// The most health queries of one namespace in flight at once: a namespace's slow queries
    /// hold its own slots, never another namespace's.
    #[arg(long, env = "PROMETHEUS_QUERIES_IN_FLIGHT_PER_NAMESPACE", default_value_t = InFlight::default().per_namespace as u16, value_parser = clap::value_parser!(u16).range(1..))]
    prometheus_queries_in_flight_per_namespace: u16,

    /// Gateways of other namespaces that policies' HTTPRoutes may attach to, each
    /// `namespace/name` or `namespace/*` (comma-separated). A policy always may attach to a
    /// Gateway of its own namespace; any other is left out of its route (`GatewayNotAllowed`).
    #[arg(long, env = "ALLOWED_GATEWAYS", value_delimiter = ',')]
    allowed_gateways: Vec<String>,

    /// Let policies with `capacity.scale` raise their secondaries' HorizontalPodAutoscalers and
    /// Deployments before a failover (needs the chart's `scaling.enabled` RBAC). Off: they are
    /// told so in their `ScaledUp` condition, and traffic moves as the ready capacity allows.
    #[arg(long, env = "ALLOW_SCALING")]
    allow_scaling: bool,

    /// Namespace of the Secrets that declare remote clusters (labelled `failover.dev/cluster`);
    /// default: the Pod's namespace, else `default`.
    #[arg(long)]
    cluster_secret_namespace: Option<String>,

    /// How long a lease lasts without renewal before a standby takes it, e.g. `15s`.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    lease_duration: Duration,

    /// How long the leader keeps trying to renew before it stops writing, e.g. `10s`.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    renew_deadline: Duration,

    /// How often the lease is renewed or tried, e.g. `2s`.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    retry_period: Duration,

    /// On SIGTERM/SIGINT, how long in-flight writes may take before the process exits.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    shutdown_grace: Duration,

    /// Alertmanager that alerts are posted to while a policy is failed over, has no ready
    /// backend or runs a drill, e.g. `http://alertmanager:9093` (none: no alert is posted).
    #[arg(long, env = "ALERTMANAGER_URL")]
    alertmanager_url: Option<String>,

    /// How often the alerts that fire are posted to Alertmanager again, e.g. `1m`; each ends
    /// four of these after it was last posted, unless posted again.
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    alert_resend_interval: Duration,

    /// URLs a policy's webhook sinks (`spec.notifications.webhooks`) may name (comma-separated;
    /// paths below each are allowed too). Any other is refused and never contacted.
    #[arg(long, env = "NOTIFICATION_ALLOWED_URLS", value_delimiter = ',')]
    notification_allowed_urls: Vec<String>,

    /// Identity of this replica in Events and the leader Lease (default: host name and pid).
    #[arg(long, env = "POD_NAME")]
    instance: Option<String>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    failover_core::api::rules::parse_duration(s).map_err(|e| e.to_string())
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
    failover::runtime::api_client::client(config).context("building the API client")
}

/// Resolves when SIGTERM or SIGINT arrives.
async fn termination() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => info!("SIGTERM received"),
                    _ = tokio::signal::ctrl_c() => info!("SIGINT received"),
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    telemetry::init(&args.log_level, args.log_format);
    if args.leader_elect && args.renew_deadline >= args.lease_duration {
        anyhow::bail!("--renew-deadline must be shorter than --lease-duration");
    }
    if args.leader_elect && args.shard.is_some() && args.lease_name == DEFAULT_LEASE_NAME {
        anyhow::bail!("--shard needs a --lease-name of its own: each shard elects its own leader");
    }
    let allowed_gateways = Gateways::parse(&args.allowed_gateways).map_err(anyhow::Error::msg)?;
    let client = client(&args).await?;
    let metrics = Arc::new(Metrics::new());
    metrics.read_heap_with(heap);
    tokio::spawn(failover::runtime::heap::trim_after_bursts(|| heap().bytes));
    let identity = identity(&args);
    let leadership = if args.leader_elect {
        Leadership::pending()
    } else {
        metrics.leader.set(1);
        Leadership::always()
    };
    // Shutdown: stop taking work, finish in-flight writes within the grace period, then release
    // the lease so a standby takes over at once.
    let stopping = stopping();
    let settings = Settings {
        allowed_gateways,
        ..settings(&args, &identity)
    };
    let (handle, run) = controller::start(
        client.clone(),
        settings,
        metrics.clone(),
        leadership.clone(),
        stopped(stopping.clone()),
    );
    serve_admin(args.admin_addr, handle).await?;
    let (election_stop, election) = election(&args, &identity, client, leadership, metrics);
    info!(namespace = args.namespace.as_deref().unwrap_or("<all>"), identity = %identity, "starting");
    let grace = async move {
        stopped(stopping).await;
        tokio::time::sleep(args.shutdown_grace).await;
    };
    tokio::select! {
        _ = run => info!("in-flight work finished"),
        _ = grace => warn!("in-flight work did not finish within the shutdown grace period"),
    }
    let _ = election_stop.send(true);
    if let Some(election) = election {
        let _ = tokio::time::timeout(Duration::from_secs(5), election).await;
    }
    info!("stopped");
    Ok(())
}

/// The leader Lease's name when `--lease-name` names none.
const DEFAULT_LEASE_NAME: &str = "failover-controller";

/// `--shard`: a label selector on namespaces, as `kubectl get -l` reads one.
fn parse_shard(text: &str) -> Result<Selector, String> {
    Selector::parse(text)
}

/// What the controller is set to do, from its flags.
fn settings(args: &Args, identity: &str) -> Settings {
    Settings {
        namespace: args.namespace.clone(),
        shard: args.shard.clone(),
        concurrency: args.concurrency,
        instance: Some(identity.to_string()),
        secret_namespace: args
            .cluster_secret_namespace
            .clone()
            .or_else(|| args.lease_namespace.clone())
            .unwrap_or_else(|| "default".into()),
        prometheus_address: args.prometheus_address.clone(),
        prometheus_allowed_addresses: args.prometheus_allowed_addresses.clone(),
        prometheus_namespace_label: Some(args.prometheus_namespace_label.clone())
            .filter(|l| !l.is_empty()),
        prometheus_queries_per_second: args.prometheus_queries_per_second,
        prometheus_in_flight: InFlight {
            total: usize::from(args.prometheus_queries_in_flight),
            per_namespace: usize::from(args.prometheus_queries_in_flight_per_namespace),
        },
        allowed_gateways: Gateways::default(),
        allow_scaling: args.allow_scaling,
        notify: NotifySettings {
            alertmanager: args.alertmanager_url.clone().filter(|u| !u.is_empty()),
            alert_resend: args.alert_resend_interval.max(Duration::from_secs(1)),
            allowed_urls: args.notification_allowed_urls.clone(),
        },
    }
}

/// This replica's identity: `--instance`, else the host name and process id.
fn identity(args: &Args) -> String {
    args.instance.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        format!("{}-{}", host.trim(), std::process::id())
    })
}

/// Turns true when SIGTERM or SIGINT arrives.
fn stopping() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        termination().await;
        let _ = tx.send(true);
    });
    rx
}

/// Resolves once `stopping` turns true.
async fn stopped(mut stopping: watch::Receiver<bool>) {
    let _ = stopping.wait_for(|s| *s).await;
}

/// Binds the admin server and serves it in the background.
async fn serve_admin(addr: SocketAddr, state: AdminState) -> anyhow::Result<()> {
    let (_, serve) = admin::bind(addr, state).await?;
    tokio::spawn(async move {
        if let Err(e) = serve.await {
            warn!(error = %e, "admin server stopped");
        }
    });
    Ok(())
}

/// Starts leader election when asked for; returns its stop switch and task.
fn election(
    args: &Args,
    identity: &str,
    client: kube::Client,
    leadership: Leadership,
    metrics: Arc<Metrics>,
) -> (watch::Sender<bool>, Option<tokio::task::JoinHandle<()>>) {
    let (stop, stop_rx) = watch::channel(false);
    let task = args.leader_elect.then(|| {
        let lease = LeaseSettings {
            namespace: args.lease_namespace.clone().unwrap_or_else(|| "default".into()),
            name: args.lease_name.clone(),
            identity: identity.to_string(),
            lease_duration: args.lease_duration,
            renew_deadline: args.renew_deadline,
            retry_period: args.retry_period,
        };
        info!(lease = %lease.name, namespace = %lease.namespace, identity = %lease.identity, "leader election enabled");
        tokio::spawn(leader::run_election(client, lease, leadership, metrics, stop_rx))
    });
    (stop, task)
}
