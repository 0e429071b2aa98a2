//! The API client: kube's client stack, with Nagle's algorithm off on its sockets.
//!
//! kube's own client (`kube::Client::try_from(Config)`) leaves `TCP_NODELAY` unset (kube-rs
//! issue 2056). A new connection's TLS handshake ends in small writes (with a client
//! certificate: the certificate, its proof and the Finished message), and the request that
//! follows waits for the server's delayed acknowledgement of them, far longer than an
//! established connection takes to answer. The controller opens a connection per watch when it
//! starts (each streamed-list probe ends its own), so that wait would be most of the start-up of
//! a controller with nothing to do (docs/benchmarks.md, "Memory"). Every socket this client
//! opens has `TCP_NODELAY` set: no request waits for a delayed acknowledgement.
//!
//! The stack is otherwise kube's, built from the same `Config` parts: the base URI, the
//! server-side retry of 429 and 503 answers, the authentication, the extra headers, the TLS
//! connector (with the configured server name) and the connect, read and write timeouts. Only
//! kube's debug span per request is left out, and idle connections are bounded
//! ([`IDLE_CONNECTIONS`]).

use hyper_util::{client::legacy::connect::HttpConnector, rt::TokioExecutor};
use kube::client::{ConfigExt as _, retry::RetryPolicy};
use tower::{BoxError, ServiceBuilder, retry::RetryLayer};

/// The connections kept open while idle, per API server: as many as the writes in flight at
/// the default concurrency (16 status writes, 16 reconciles). Every request that finds no idle
/// connection opens one, and without a bound every connection a burst opened stays, each with
/// its TLS state and buffers, for as long as the pool keeps reusing it; beyond these, one
/// closes once its request is done.
pub const IDLE_CONNECTIONS: usize = 32;

/// A client for `config`'s API server whose sockets send each write at once. A kubeconfig that
/// names a proxy gets kube's own client, which says whether it can use that proxy.
pub fn client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    if config.proxy_url.is_some() {
        return kube::Client::try_from(config);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let mut connector =
        hyper_timeout::TimeoutConnector::new(config.rustls_https_connector_with_connector(http)?);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(IDLE_CONNECTIONS)
        .build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http);
    Ok(kube::Client::new(service, config.default_namespace))
}

/// An API error as a short sentence: the API server's own message and reason, not the client's
/// debug dump.
pub fn describe(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if !status.message.is_empty() && !status.reason.is_empty() => {
            failover_core::message::line(&format!("{} ({})", status.message, status.reason))
        }
        kube::Error::Api(status) if !status.message.is_empty() => {
            failover_core::message::line(&status.message)
        }
        kube::Error::Api(status) => {
            failover_core::message::line(&format!("HTTP {} {}", status.code, status.reason))
        }
        other => failover_core::message::with_causes(other),
    }
}

/// Whether the API server refused a write because the namespace is being deleted.
pub fn namespace_terminating(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(e) if e.code == 403 && e.message.contains("being terminated"))
}
