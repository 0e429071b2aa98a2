//! The API client: kube's client stack over HTTP/2, so every request to one API server shares
//! one connection, as client-go's do.
//!
//! kube's own client speaks HTTP/1.1 only, and its connection pool opens one connection per
//! request in flight and keeps it idle for 90 s. The start-up pass (32 reconciles and 32 status
//! writers at once, beside the watches) left 86 sockets open where the idle process has 9, each
//! with its TLS session and read and write buffers: at 1,000 policies, 7.5 MiB of the cold
//! start's 9.5 MiB of anonymous memory above an idle process holding 2.0 MiB
//! (docs/benchmarks.md, "Memory"). Over HTTP/2 (negotiated by ALPN; a server that offers only
//! HTTP/1.1 still gets HTTP/1.1) those requests are streams of one connection.
//!
//! The stack is kube's (`kube::client::ClientBuilder` for a `Config`) with the connector's ALPN
//! and HTTP/2 keep-alive added: the base URI, the authentication, the extra headers, the
//! server-side retry of 429 and 503 answers, and the connect, read and write timeouts. Only its
//! debug spans per request are left out.

use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::ConfigExt as _;
use kube::client::retry::RetryPolicy;
use tower::retry::RetryLayer;
use tower::{BoxError, ServiceBuilder};

/// How often an HTTP/2 connection is pinged, and how long a ping may go unanswered before the
/// connection is dropped (client-go's 30 s read-idle and 15 s ping timeouts): a watch on a
/// connection the network silently lost is noticed and listed again.
const PING_EVERY: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(15);

/// A client for `config`'s API server over one HTTP/2 connection.
pub fn client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let tls = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    let tls = match &config.tls_server_name {
        Some(name) => tls.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(
            name.clone().try_into().map_err(|e| {
                kube::Error::RustlsTls(kube::client::RustlsTlsError::InvalidServerName(e))
            })?,
        )),
        None => tls,
    };
    let mut connector = hyper_timeout::TimeoutConnector::new(
        tls.enable_http1().enable_http2().wrap_connector(http),
    );
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .http2_keep_alive_interval(PING_EVERY)
        .http2_keep_alive_timeout(PING_TIMEOUT)
        .http2_keep_alive_while_idle(true)
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
