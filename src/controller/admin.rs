//! The admin HTTP server: `/metrics` (Prometheus text format), `/healthz` (the process is alive)
//! and `/readyz` (every CRD it needs installed, caches synced, and leader or standby state known;
//! otherwise the reason).

use std::{convert::Infallible, net::SocketAddr, sync::Arc};

use axum::{
    Router, body::Body, extract::State, http::StatusCode, http::header, response::IntoResponse,
    routing::get,
};
use tokio::net::TcpListener;
use tracing::info;

use crate::{runtime::leader::Role, sources::Context};

/// What the admin endpoints report on: the running controller's context (its metrics, its
/// leadership, its caches' readiness).
pub type AdminState = Arc<Context>;

/// Errors of the admin server.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The listen address could not be bound.
    #[error("binding admin server to {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The server failed while running.
    #[error("admin server: {0}")]
    Serve(#[source] std::io::Error),
}

/// Binds the admin server; returns the bound address and the future that serves it.
pub async fn bind(
    addr: SocketAddr,
    state: AdminState,
) -> Result<(SocketAddr, impl Future<Output = Result<(), AdminError>>), AdminError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| AdminError::Bind { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| AdminError::Bind { addr, source })?;
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(state);
    info!(address = %local, "admin server listening");
    Ok((local, async move {
        axum::serve(listener, app).await.map_err(AdminError::Serve)
    }))
}

/// The exposition, encoded on a blocking thread a chunk at a time (at most [`CHUNKS_AHEAD`]
/// ahead of the client), never on the thread that runs the reconciles, the watches and the
/// Lease: a scrape of many policies' series delays no failover.
async fn metrics(State(state): State<AdminState>) -> impl IntoResponse {
    let (chunks, received) = tokio::sync::mpsc::channel::<String>(CHUNKS_AHEAD);
    let metrics = state.metrics().clone();
    tokio::task::spawn_blocking(move || {
        for chunk in metrics.exposition() {
            // The client went away: stop encoding.
            if chunks.blocking_send(chunk).is_err() {
                break;
            }
        }
    });
    let body = futures::stream::unfold(received, |mut received| async move {
        let chunk = received.recv().await?;
        Some((Ok::<_, Infallible>(chunk), received))
    });
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        Body::from_stream(body),
    )
}

/// How many chunks of the exposition are encoded ahead of what the client has read.
const CHUNKS_AHEAD: usize = 2;

async fn readyz(State(state): State<AdminState>) -> impl IntoResponse {
    match (
        crate::controller::not_ready(&state.caches),
        state.writer.role(),
    ) {
        (Some(why), _) => (StatusCode::SERVICE_UNAVAILABLE, why),
        (None, Role::Pending) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "leader election pending".to_string(),
        ),
        (None, Role::Leader) => (StatusCode::OK, "ok (leader)".to_string()),
        (None, Role::Standby) => (StatusCode::OK, "ok (standby)".to_string()),
    }
}
