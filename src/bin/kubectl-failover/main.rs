//! `kubectl failover`: a kubectl plugin for FailoverPolicies. kubectl finds it on the PATH by its
//! name, `kubectl-failover`.
//!
//! ```text
//! kubectl failover status [POLICY] [-A] [-o text|json|yaml]   per-backend table and conditions
//! kubectl failover explain-decision POLICY                     why traffic is where it is
//! kubectl failover pin POLICY BACKEND | unpin POLICY           all traffic to one backend
//! kubectl failover suspend POLICY | resume POLICY              freeze the generated route
//! ```
//!
//! It reads policies through the API as kubectl does (KUBECONFIG, the current context and its
//! namespace) and changes them with server-side apply under its own field manager.

mod edit;
mod explain;
mod show;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use failover::api::FailoverPolicy;
use kube::{Api, Client, api::ListParams};

/// FailoverPolicy status, decisions and operator controls.
#[derive(Parser, Debug)]
#[command(name = "kubectl failover", version, about)]
struct Cli {
    /// Namespace of the policies (default: the current context's).
    #[arg(short, long, global = true)]
    namespace: Option<String>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Each policy with a per-backend table (readiness, endpoints, weight, share, since) and its
    /// conditions.
    Status {
        /// One policy; all policies of the namespace when omitted.
        policy: Option<String>,
        /// Policies of every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = Format::Text)]
        output: Format,
    },
    /// Why traffic is where it is: the rule that decided, the holds and when they fall due.
    ExplainDecision {
        /// The policy.
        policy: String,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = Format::Text)]
        output: Format,
    },
    /// Sends all traffic to one backend (the primary or a secondary), whatever its readiness.
    Pin {
        /// The policy.
        policy: String,
        /// The backend Service.
        backend: String,
    },
    /// Ends a pin: traffic follows readiness again.
    Unpin {
        /// The policy.
        policy: String,
    },
    /// Freezes the generated route; the status keeps showing what would happen.
    Suspend {
        /// The policy.
        policy: String,
    },
    /// Ends a suspension: the route follows the decision again.
    Resume {
        /// The policy.
        policy: String,
    },
}

/// How results are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Tables for people, at most 100 columns wide.
    Text,
    /// JSON, for scripts.
    Json,
    /// YAML, for scripts.
    Yaml,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", screen(&format!("{e:#}")));
            ExitCode::FAILURE
        }
    }
}

/// What is printed, with every control character but the line breaks written as its escape: a
/// status is anyone's text (a tenant's query quoted in it), and is shown, never obeyed.
fn screen(text: &str) -> String {
    text.split('\n')
        .map(|line| failover::message::escaped(line).into_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let config = kube::Config::infer()
        .await
        .map_err(|e| anyhow::anyhow!("no usable kubeconfig: {e}"))?;
    let namespace = cli
        .namespace
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = Client::try_from(config)?;
    let api: Api<FailoverPolicy> = Api::namespaced(client.clone(), &namespace);
    match cli.command {
        Command::Status {
            policy,
            all_namespaces,
            output,
        } => {
            let policies = match (policy, all_namespaces) {
                (Some(name), _) => vec![get(&api, &name, &namespace).await?],
                (None, true) => {
                    Api::<FailoverPolicy>::all(client)
                        .list(&ListParams::default())
                        .await?
                        .items
                }
                (None, false) => api.list(&ListParams::default()).await?.items,
            };
            print!("{}", screen(&show::render(&policies, output)?));
        }
        Command::ExplainDecision { policy, output } => {
            let policy = get(&api, &policy, &namespace).await?;
            print!("{}", screen(&explain::render(&policy, output)?));
        }
        Command::Pin { policy, backend } => edit::pin(&api, &policy, &backend).await?,
        Command::Unpin { policy } => edit::unpin(&api, &policy).await?,
        Command::Suspend { policy } => edit::suspend(&api, &policy, true).await?,
        Command::Resume { policy } => edit::suspend(&api, &policy, false).await?,
    }
    Ok(())
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
