//! `kubectl failover`: a kubectl plugin for FailoverPolicies. kubectl finds it on the PATH by its
//! name, `kubectl-failover`.
//!
//! ```text
//! kubectl failover status [POLICY] [-A] [-l SELECTOR] [-w] [-o text|json|yaml]
//!                                                    per-backend table and conditions
//! kubectl failover explain-decision POLICY            why traffic is where it is
//! kubectl failover history POLICY [-o text|json|yaml]
//!                                                    the last transitions, the newest last
//! kubectl failover pin POLICY BACKEND | unpin POLICY  all traffic to one backend
//! kubectl failover suspend POLICY | resume POLICY     freeze the generated route
//! kubectl failover what-if POLICY [--down B,..] [--up B] [--ready B=N] [--health B=V] [--at 5m]
//!                                                    what the controller would do, no write
//! kubectl failover drill POLICY --to B --for 10m [--force] | drill POLICY --abort
//!                                                    all traffic to B, lifted by itself
//! kubectl failover version | completion SHELL
//! ```
//!
//! It reads policies through the API as kubectl does (KUBECONFIG, the current context and its
//! namespace; `--kubeconfig` and `--context` choose others, since kubectl does not hand its own
//! flags to a plugin) and changes them with server-side apply under its own field manager. A
//! change waits until the controller has acted on it (`--timeout`). Exit codes: 0 when every
//! policy shown is ready, 1 on an error, 2 when some policy shown is not ready (or the
//! controller has not yet acted on its spec).

mod connect;
mod edit;
mod explain;
mod history;
mod live;
mod show;
mod watch;
mod what_if;

use std::{path::PathBuf, process::ExitCode, time::Duration};

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use failover_core::api::{FailoverPolicy, rules::parse_duration};
use kube::{Api, api::ListParams};

/// FailoverPolicy status, decisions and operator controls.
#[derive(Parser, Debug)]
#[command(name = "kubectl failover", version = failover_core::VERSION, about)]
struct Cli {
    /// Namespace of the policies (default: the context's).
    #[arg(short, long, global = true)]
    namespace: Option<String>,

    /// The kubeconfig file (default: KUBECONFIG, else ~/.kube/config, else in-cluster).
    #[arg(long, global = true, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,

    /// The kubeconfig context (default: its current context).
    #[arg(long, global = true, value_name = "NAME")]
    context: Option<String>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Each policy with a per-backend table (readiness, endpoints, weight, share, since) and its
    /// conditions. Exits 2 when some policy is not ready.
    Status(Status),
    /// Why traffic is where it is: the rule that decided, the holds and when they fall due.
    ExplainDecision {
        /// The policy.
        policy: String,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = Format::Text)]
        output: Format,
    },
    /// The policy's last transitions as the controller recorded them (status.history), the newest
    /// last. Exits 0 whatever the policy's readiness.
    History {
        /// The policy.
        policy: String,
        /// Output format (json and yaml: the entries themselves).
        #[arg(short, long, value_enum, default_value_t = Format::Text)]
        output: Format,
    },
    /// Sends all traffic to one backend (the primary or a secondary), whatever its readiness.
    Pin {
        /// The policy.
        policy: String,
        /// The backend Service.
        backend: String,
        #[command(flatten)]
        wait: Wait,
    },
    /// Ends a pin: traffic follows readiness again.
    Unpin {
        /// The policy.
        policy: String,
        #[command(flatten)]
        wait: Wait,
    },
    /// Freezes the generated route; the status keeps showing what would happen.
    Suspend {
        /// The policy.
        policy: String,
        #[command(flatten)]
        wait: Wait,
    },
    /// Ends a suspension: the route follows the decision again.
    Resume {
        /// The policy.
        policy: String,
        #[command(flatten)]
        wait: Wait,
    },
    /// What the controller would do if backends changed: its own rules, step by step until the
    /// decision settles (holds, ramp steps, a drill's end). Writes nothing.
    WhatIf(WhatIf),
    /// A failover drill: all traffic to one backend for a while, then the controller lifts it by
    /// itself. Refused for a backend that is not ready, unless --force.
    Drill(Drill),
    /// The plugin's version and the API version it reads.
    Version,
    /// A shell completion script, e.g. `source <(kubectl failover completion bash)`.
    Completion {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// `status`: which policies, and how they are shown.
#[derive(Args, Debug)]
struct Status {
    /// One policy; all policies of the namespace when omitted.
    policy: Option<String>,
    /// Policies of every namespace.
    #[arg(short = 'A', long, conflicts_with = "policy")]
    all_namespaces: bool,
    /// Only policies with these labels (a label selector, e.g. `team=shop,tier!=edge`).
    #[arg(short = 'l', long, conflicts_with = "policy")]
    selector: Option<String>,
    /// After the policies, print each one again whenever it changes, until interrupted.
    #[arg(short, long)]
    watch: bool,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Text)]
    output: Format,
}

/// `what-if`: the change to imagine.
#[derive(Args, Debug)]
struct WhatIf {
    /// The policy.
    policy: String,
    /// Backends whose endpoints all turn not ready (comma-separated or repeated).
    #[arg(long, value_delimiter = ',', value_name = "BACKEND")]
    down: Vec<String>,
    /// Backends whose endpoints all turn ready (comma-separated or repeated).
    #[arg(long, value_delimiter = ',', value_name = "BACKEND")]
    up: Vec<String>,
    /// This many of a backend's endpoints are ready, e.g. `web=2` (repeatable).
    #[arg(long, value_name = "BACKEND=COUNT", value_parser = what_if::parse_ready)]
    ready: Vec<(String, i32)>,
    /// A backend's health query reads this value, e.g. `web=0.3` (repeatable).
    #[arg(long, value_name = "BACKEND=VALUE", value_parser = what_if::parse_health)]
    health: Vec<(String, f64)>,
    /// When the change happens, from now, e.g. `+5m` (default: now).
    #[arg(long, value_name = "DURATION", value_parser = what_if::parse_at, default_value = "0s")]
    at: Duration,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Text)]
    output: Format,
}

/// `drill`: where traffic goes and for how long, or `--abort`.
#[derive(Args, Debug)]
struct Drill {
    /// The policy.
    policy: String,
    /// The backend that takes all traffic during the drill.
    #[arg(long, value_name = "BACKEND", required_unless_present = "abort")]
    to: Option<String>,
    /// How long the drill lasts, e.g. `10m` (at most 24h).
    #[arg(long = "for", value_name = "DURATION", value_parser = parse_timeout, required_unless_present = "abort")]
    duration: Option<Duration>,
    /// Send traffic even to a backend that is not ready.
    #[arg(long, conflicts_with = "abort")]
    force: bool,
    /// End the running drill now.
    #[arg(long, conflicts_with_all = ["to", "duration"])]
    abort: bool,
    #[command(flatten)]
    wait: Wait,
}

/// How long a change waits for the controller to act on it.
#[derive(Args, Debug, Clone, Copy)]
pub struct Wait {
    /// How long to wait for the controller to act on the change (its status observing the new
    /// generation), e.g. `30s` or `2m`; `0s` does not wait.
    #[arg(long, default_value = "30s", value_parser = parse_timeout)]
    pub timeout: Duration,
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    parse_duration(text).map_err(|e| e.to_string())
}

/// How results are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Tables for people, at most 100 columns wide (`history` rows: as wide as their cells).
    Text,
    /// JSON, for scripts.
    Json,
    /// YAML, for scripts.
    Yaml,
}

/// How a command ended, as its exit code tells a script.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Done; every policy shown is ready.
    Ready,
    /// Done; some policy shown is not ready, or its spec not yet acted on.
    NotReady,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    // A usage error exits 1, as every error does (clap's own code, 2, means "not ready" here);
    // `--help` and `--version` exit 0.
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match run(cli).await {
        Ok(Verdict::Ready) => ExitCode::SUCCESS,
        Ok(Verdict::NotReady) => ExitCode::from(2),
        Err(e) => {
            eprintln!("error: {}", screen(&format!("{e:#}")));
            ExitCode::FAILURE
        }
    }
}

/// What is printed, with every control character but the line breaks written as its escape: a
/// status is anyone's text (a tenant's query quoted in it), and is shown, never obeyed.
pub fn screen(text: &str) -> String {
    text.split('\n')
        .map(|line| failover_core::message::escaped(line).into_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

async fn run(cli: Cli) -> anyhow::Result<Verdict> {
    match cli.command {
        Command::Version => {
            println!(
                "kubectl-failover {} (API failover.dev/v1alpha1)",
                failover_core::VERSION
            );
            return Ok(Verdict::Ready);
        }
        Command::Completion { shell } => {
            let mut command = Cli::command();
            clap_complete::generate(
                shell,
                &mut command,
                "kubectl-failover",
                &mut std::io::stdout(),
            );
            return Ok(Verdict::Ready);
        }
        _ => {}
    }
    let target = connect::connect(cli.kubeconfig, cli.context, cli.namespace).await?;
    let (api, namespace) = (target.api(), target.namespace.as_str());
    match cli.command {
        Command::Status(status) => show_status(&target, status).await,
        Command::ExplainDecision { policy, output } => {
            let policy = get(&api, &policy, namespace).await?;
            print!("{}", screen(&explain::render(&policy, output)?));
            Ok(show::verdict(std::slice::from_ref(&policy)))
        }
        Command::History { policy, output } => {
            let policy = get(&api, &policy, namespace).await?;
            print!("{}", screen(&history::render(&policy, output)?));
            Ok(Verdict::Ready)
        }
        Command::Pin {
            policy,
            backend,
            wait,
        } => edit::pin(&api, &policy, &backend, wait).await,
        Command::Unpin { policy, wait } => edit::unpin(&api, &policy, wait).await,
        Command::Suspend { policy, wait } => edit::suspend(&api, &policy, true, wait).await,
        Command::Resume { policy, wait } => edit::suspend(&api, &policy, false, wait).await,
        Command::WhatIf(w) => what_if(&target, w).await,
        Command::Drill(d) => drill(&api, d).await,
        Command::Version | Command::Completion { .. } => Ok(Verdict::Ready),
    }
}

/// `what-if`: the report of what the controller would do.
async fn what_if(target: &connect::Target, w: WhatIf) -> anyhow::Result<Verdict> {
    let scenario = what_if::Scenario {
        down: w.down,
        up: w.up,
        ready: w.ready,
        health: w.health,
        at: w.at,
    };
    let report = what_if::run(
        target.client(),
        &target.namespace,
        &w.policy,
        &scenario,
        w.output,
    )
    .await?;
    print!("{}", screen(&report));
    Ok(Verdict::Ready)
}

/// `drill`: start one, or `--abort` the running one.
async fn drill(api: &Api<FailoverPolicy>, d: Drill) -> anyhow::Result<Verdict> {
    match (d.abort, d.to, d.duration) {
        (false, Some(to), Some(duration)) => {
            let request = edit::DrillRequest {
                to: &to,
                duration,
                force: d.force,
            };
            edit::drill(api, &d.policy, &request, d.wait).await
        }
        _ => edit::abort_drill(api, &d.policy, d.wait).await,
    }
}

/// `status`: the policies, then (with `--watch`) each change of them.
async fn show_status(target: &connect::Target, s: Status) -> anyhow::Result<Verdict> {
    let api = if s.all_namespaces {
        target.all()
    } else {
        target.api()
    };
    let policies = match &s.policy {
        Some(name) => vec![get(&api, name, &target.namespace).await?],
        None => {
            let params = ListParams {
                label_selector: s.selector.clone(),
                ..Default::default()
            };
            api.list(&params).await?.items
        }
    };
    print!("{}", screen(&show::render(&policies, s.output)?));
    if s.watch {
        let (name, selector) = (s.policy.as_deref(), s.selector.as_deref());
        watch::follow(&api, &policies, name, selector, s.output).await?;
    }
    Ok(show::verdict(&policies))
}

/// One policy, or an error that names it and its namespace.
async fn get(
    api: &Api<FailoverPolicy>,
    name: &str,
    namespace: &str,
) -> anyhow::Result<FailoverPolicy> {
    api.get_opt(name)
        .await?
        .ok_or_else(|| anyhow::anyhow!("FailoverPolicy {name} not found in namespace {namespace}"))
}
