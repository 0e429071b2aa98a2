//! The [`Exchange`]s besides HTTP/1 for the load generator, each to the proxy on loopback and
//! each answered by the test backends (`hack/testbackend`) with their name:
//! - [`Grpc`]: a unary call of `grpc.testing.TestService` over HTTP/2 without TLS (h2c, prior
//!   knowledge), for a hostname (the request's `:authority`);
//! - [`Tls`]: a TLS connection with an SNI name (any certificate accepted: the backends make
//!   their own), one line sent and one read;
//! - [`Tcp`]: a TCP connection, one line sent and one read.
//!
//! A gRPC call is served (status 200) when the HTTP status is 200, `grpc-status` is 0 and the
//! reply names a backend; a connection is served when the backend's name came back.

use std::{
    io,
    net::{Ipv4Addr, SocketAddr},
    sync::Arc,
};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::{
    client::legacy::{
        Client,
        connect::{HttpConnector, dns::Name},
    },
    rt::TokioExecutor,
};
use tokio::{
    io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader},
    net::TcpStream,
};
use tokio_rustls::{
    TlsConnector,
    rustls::{self, pki_types::ServerName},
};

use super::traffic::{Exchange, Outcome};

/// The gRPC method the backends serve: its reply names the backend (`SimpleResponse.hostname`).
pub const UNARY_CALL: &str = "/grpc.testing.TestService/UnaryCall";

/// Every name resolves to loopback: the proxy's address, whatever hostname a request is for.
type Loopback = fn(Name) -> std::future::Ready<io::Result<std::iter::Once<SocketAddr>>>;

fn loopback(_: Name) -> std::future::Ready<io::Result<std::iter::Once<SocketAddr>>> {
    std::future::ready(Ok(std::iter::once((Ipv4Addr::LOCALHOST, 0).into())))
}

/// Unary gRPC calls through the proxy's HTTP entrypoint, for a hostname.
pub struct Grpc {
    client: Client<HttpConnector<tower::util::ServiceFn<Loopback>>, Full<Bytes>>,
    uri: hyper::Uri,
}

impl Grpc {
    /// Calls to `host` through the proxy at `port` on loopback.
    pub fn new(port: u16, host: &str) -> Result<Self, String> {
        let uri = format!("http://{host}:{port}{UNARY_CALL}")
            .parse()
            .map_err(|e| format!("{host}: {e}"))?;
        let resolve: Loopback = loopback;
        let connector = HttpConnector::new_with_resolver(tower::service_fn(resolve));
        let client = Client::builder(TokioExecutor::new())
            .http2_only(true)
            .build(connector);
        Ok(Self { client, uri })
    }
}

impl Exchange for Grpc {
    fn exchange(&self) -> Outcome<'_> {
        Box::pin(async move {
            let request = hyper::Request::post(self.uri.clone())
                .header(hyper::header::CONTENT_TYPE, "application/grpc")
                .header(hyper::header::TE, "trailers")
                // One message, uncompressed and empty: a default SimpleRequest.
                .body(Full::new(Bytes::from_static(&[0, 0, 0, 0, 0])))
                .ok()?;
            let response = self.client.request(request).await.ok()?;
            let status = response.status().as_u16();
            let body = response.into_body().collect().await.ok()?;
            let grpc_status = body
                .trailers()
                .and_then(|t| t.get("grpc-status"))
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let name = hostname(&body.to_bytes());
            if status != 200 {
                return Some((status, None));
            }
            let served = grpc_status.as_deref() == Some("0") && name.is_some();
            Some((if served { 200 } else { 0 }, name))
        })
    }
}

/// `SimpleResponse.hostname` (field 6, a string) of a reply of one uncompressed message.
fn hostname(body: &[u8]) -> Option<String> {
    let (header, mut message) = body.split_at_checked(5)?;
    if header[0] != 0 || u32::from_be_bytes(header[1..5].try_into().ok()?) as usize != message.len()
    {
        return None;
    }
    while let Some((&key, rest)) = message.split_first() {
        // Every field of a SimpleResponse the backends fill is length-delimited (wire type 2)
        // and shorter than 128 bytes: one byte of length.
        let (&len, rest) = rest.split_first()?;
        if key & 7 != 2 || len >= 128 {
            return None;
        }
        let (value, rest) = rest.split_at_checked(usize::from(len))?;
        if key >> 3 == 6 {
            return String::from_utf8(value.to_vec()).ok();
        }
        message = rest;
    }
    None
}

/// Sends a line, reads one: the backend's name (on a connection held open, TLS or TCP: `None`
/// once it is closed). A backend's name is a DNS label (a Service's
/// name): any other line (the proxy answering for itself, e.g. an HTTP 400 from a TLS entrypoint
/// that has no route for the SNI name yet) is no answer.
pub async fn ask_held<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut BufReader<S>,
) -> Option<String> {
    stream.get_mut().write_all(b"name?\n").await.ok()?;
    let mut line = String::new();
    stream.read_line(&mut line).await.ok()?;
    let name = line.trim();
    let label = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    label.then(|| name.to_string())
}

/// One TCP connection to the proxy at `port` on loopback per exchange.
pub struct Tcp {
    port: u16,
}

impl Tcp {
    /// Connections to the proxy's TCP entrypoint at `port` on loopback.
    pub fn new(port: u16) -> Self {
        Self { port }
    }

    /// A connection: the backend that holds it answers each line with its name.
    pub async fn connect(&self) -> Option<BufReader<TcpStream>> {
        let stream = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port))
            .await
            .ok()?;
        Some(BufReader::new(stream))
    }
}

impl Exchange for Tcp {
    fn exchange(&self) -> Outcome<'_> {
        Box::pin(async move {
            let name = ask_held(&mut self.connect().await?).await;
            Some((if name.is_some() { 200 } else { 0 }, name))
        })
    }
}

/// One TLS connection to the proxy at `port` on loopback per exchange, for an SNI name.
pub struct Tls {
    port: u16,
    sni: ServerName<'static>,
    connector: TlsConnector,
}

impl Tls {
    /// Connections to the proxy's TLS entrypoint at `port` on loopback, for `sni`.
    pub fn new(port: u16, sni: &str) -> Result<Self, String> {
        let sni = ServerName::try_from(sni.to_string()).map_err(|e| format!("{sni}: {e}"))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth();
        Ok(Self {
            port,
            sni,
            connector: TlsConnector::from(Arc::new(config)),
        })
    }

    /// A connection, handshaken: the backend that holds it answers each line with its name.
    pub async fn connect(&self) -> Option<BufReader<tokio_rustls::client::TlsStream<TcpStream>>> {
        let tcp = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port))
            .await
            .ok()?;
        let tls = self.connector.connect(self.sni.clone(), tcp).await.ok()?;
        Some(BufReader::new(tls))
    }
}

impl Exchange for Tls {
    fn exchange(&self) -> Outcome<'_> {
        Box::pin(async move {
            let name = ask_held(&mut self.connect().await?).await;
            Some((if name.is_some() { 200 } else { 0 }, name))
        })
    }
}

/// Accepts any server certificate (the backends sign their own), checking only the handshake's
/// signatures.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[test]
fn a_reply_names_its_backend_by_field_6() {
    // SimpleResponse{server_id: "web" (field 4), hostname: "web" (field 6)}, framed.
    let message = [0x22, 3, b'w', b'e', b'b', 0x32, 3, b'w', b'e', b'b'];
    let mut body = vec![0, 0, 0, 0, message.len() as u8];
    body.extend_from_slice(&message);
    assert_eq!(hostname(&body).as_deref(), Some("web"));
    assert_eq!(hostname(&body[..8]), None, "a cut reply names no one");
}
