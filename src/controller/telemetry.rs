//! Logging through `tracing`: plain or JSON lines, level by flag or `RUST_LOG`.

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// Log line format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Plain,
    /// One JSON object per line.
    Json,
}

/// kube-runtime's watcher logs each failed list as a WARN with the client's whole error dump;
/// the controller logs every watch error itself, as a short sentence (see [`crate::sources::watch`]), so
/// that one is kept to errors unless a directive names kube-runtime.
fn with_quiet_watcher(level: &str) -> String {
    if level.contains("kube") {
        level.to_string()
    } else {
        format!("{level},kube_runtime::watcher=error")
    }
}

/// Installs the global subscriber. `level` is an `EnvFilter` directive such as `info` or
/// `failover=debug,kube=info`; `RUST_LOG`, when set, wins.
pub fn init(level: &str, format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(with_quiet_watcher(level)))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let registry = tracing_subscriber::registry().with(filter);
    let result = match format {
        LogFormat::Plain => registry
            .with(
                fmt::layer()
                    .with_target(false)
                    .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout())),
            )
            .try_init(),
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(true)
                    .with_span_list(false),
            )
            .try_init(),
    };
    // A subscriber installed earlier (tests) is kept.
    let _ = result;
}
