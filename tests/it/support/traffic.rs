//! A load generator: requests at a steady rate to one URL on loopback (the proxy), bounded in
//! count and in time, each recorded with when it was sent, how long it took, its HTTP status and
//! which backend answered (the first line of the body: the test backends answer with their name).
//!
//! Open loop: each request is sent at its time whatever the ones before it are doing (at most
//! [`MAX_IN_FLIGHT`] at once), so a slow or failing backend shows as failed or late requests, not
//! as a lower rate. A request that gets no answer within its timeout counts as failed (status 0).
//!
//! What one request is comes from an [`Exchange`]: HTTP/1 GET here (the default), gRPC, TLS or
//! TCP elsewhere ([`super::exchanges`]).
//!
//! Self-contained (no other helper), so the `load` example shares it as the demo's command-line
//! load generator.

use std::{
    future::Future,
    net::IpAddr,
    pin::Pin,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};

/// Most requests in flight at once.
pub const MAX_IN_FLIGHT: usize = 256;

/// What to send.
#[derive(Clone, Debug)]
pub struct Load {
    /// The URL, on loopback (`http://127.0.0.1:<port>/<path>`).
    pub url: String,
    /// The `Host` header, when the route matches on a hostname.
    pub host: Option<String>,
    /// Requests per second.
    pub per_second: u32,
    /// The longest the load runs.
    pub limit: Duration,
    /// How long one request may take.
    pub timeout: Duration,
}

/// What one exchange became: its status and the first line of its answer, or `None` when no
/// answer came (refused, reset, closed).
pub type Outcome<'a> = Pin<Box<dyn Future<Output = Option<(u16, Option<String>)>> + Send + 'a>>;

/// One exchange with the proxy: a request, a call or a connection.
pub trait Exchange: Send + Sync {
    /// Runs one exchange.
    fn exchange(&self) -> Outcome<'_>;
}

/// HTTP/1 GET of the load's URL, with its `Host` header: the status and the body's first line.
struct HttpGet {
    client: Client<HttpConnector, Empty<Bytes>>,
    uri: hyper::Uri,
    host: Option<String>,
}

impl Exchange for HttpGet {
    fn exchange(&self) -> Outcome<'_> {
        Box::pin(async move {
            let mut request = hyper::Request::get(self.uri.clone());
            if let Some(host) = &self.host {
                request = request.header(hyper::header::HOST, host);
            }
            let response = self
                .client
                .request(request.body(Empty::new()).ok()?)
                .await
                .ok()?;
            let status = response.status().as_u16();
            let body = response.into_body().collect().await.ok()?.to_bytes();
            let first = String::from_utf8_lossy(&body)
                .lines()
                .next()
                .map(str::to_string);
            Some((status, first))
        })
    }
}

/// One request's fate.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// When it was sent.
    pub sent: Instant,
    /// How long until its answer (or until it failed).
    pub took: Duration,
    /// The HTTP status (for gRPC, TLS and TCP: 200 when the backend's name came back); 0 when
    /// no answer came (refused, reset, closed, timed out).
    pub status: u16,
    /// Which backend answered (the body's first line), for a 2xx answer.
    pub backend: Option<String>,
    /// A backend answered 503 `<name> overloaded`: more requests than it serves.
    pub overloaded: bool,
}

impl Answer {
    /// Whether the request failed: no answer, or an answer other than 2xx (a 5xx from the
    /// backend or the proxy, a 404 from a proxy without the route).
    pub fn failed(&self) -> bool {
        !(200..300).contains(&self.status)
    }
}

/// A load under way, sent from a thread of its own: a test that blocks its own thread (a
/// `kubectl` it runs and waits for) neither delays requests nor makes them leave in a burst.
pub struct Running {
    answers: Arc<Mutex<Vec<Answer>>>,
    done: tokio::sync::oneshot::Receiver<()>,
    finished: Arc<std::sync::atomic::AtomicBool>,
    stop: Arc<tokio::sync::Notify>,
    /// When it started.
    #[allow(
        dead_code,
        reason = "the load example's (examples/load): no test reads it"
    )]
    pub started: Instant,
    /// The load's rate, requests per second.
    pub per_second: u32,
}

impl Load {
    /// A load of `per_second` requests per second to `url`, for at most `limit`.
    pub fn new(url: &str, per_second: u32, limit: Duration) -> Self {
        Self {
            url: url.to_string(),
            host: None,
            per_second,
            limit,
            timeout: Duration::from_secs(2),
        }
    }

    /// Starts sending HTTP/1 GETs; fails when the URL is not on loopback or does not parse.
    pub fn start(self) -> Result<Running, String> {
        let uri: hyper::Uri = self.url.parse().map_err(|e| format!("{}: {e}", self.url))?;
        let host = uri.host().unwrap_or_default().trim_matches(['[', ']']);
        let loopback = host == "localhost" || host.parse::<IpAddr>().is_ok_and(|a| a.is_loopback());
        if !loopback || uri.scheme_str() != Some("http") {
            return Err(format!(
                "{}: the load generator sends plain HTTP to loopback only",
                self.url
            ));
        }
        let get = HttpGet {
            client: Client::builder(TokioExecutor::new()).build_http(),
            uri,
            host: self.host.clone(),
        };
        self.start_with(Arc::new(get))
    }

    /// Starts sending, each request one `exchange` (which is on loopback: the caller checks); the
    /// load's URL and host are the exchange's business.
    pub fn start_with(self, exchange: Arc<dyn Exchange>) -> Result<Running, String> {
        if self.per_second == 0 {
            return Err("the rate must be at least one request per second".into());
        }
        let answers = Arc::new(Mutex::new(Vec::new()));
        let started = Instant::now();
        let stop = Arc::new(tokio::sync::Notify::new());
        let finished = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (tell_done, done) = tokio::sync::oneshot::channel();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("the load's runtime: {e}"))?;
        let (sent, flag, halt) = (answers.clone(), finished.clone(), stop.clone());
        let per_second = self.per_second;
        std::thread::Builder::new()
            .name("load".into())
            .spawn(move || {
                runtime.block_on(send(self, exchange, sent, started, halt));
                flag.store(true, std::sync::atomic::Ordering::Release);
                let _ = tell_done.send(());
            })
            .map_err(|e| format!("the load's thread: {e}"))?;
        Ok(Running {
            answers,
            done,
            finished,
            stop,
            started,
            per_second,
        })
    }
}

/// Sends every request of the load at its time, until `limit` or until told to stop; then waits
/// for the requests in flight (each within its timeout), so every request sent is counted.
async fn send(
    load: Load,
    exchange: Arc<dyn Exchange>,
    answers: Arc<Mutex<Vec<Answer>>>,
    started: Instant,
    stop: Arc<tokio::sync::Notify>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
    let every = Duration::from_secs(1) / load.per_second;
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0u32.. {
        let at = started + every * n;
        if at.duration_since(started) >= load.limit {
            break;
        }
        tokio::select! {
            () = tokio::time::sleep_until(at.into()) => {}
            () = stop.notified() => break,
        }
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            // Too many in flight: this request is refused here, as failed.
            record(
                &answers,
                Answer {
                    sent: Instant::now(),
                    took: Duration::ZERO,
                    status: 0,
                    backend: None,
                    overloaded: false,
                },
            );
            continue;
        };
        let (exchange, answers, timeout) = (exchange.clone(), answers.clone(), load.timeout);
        tasks.spawn(async move {
            let answer = one(exchange.as_ref(), timeout).await;
            record(&answers, answer);
            drop(slot);
        });
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
}

fn record(answers: &Mutex<Vec<Answer>>, answer: Answer) {
    answers
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(answer);
}

/// One request, within its timeout.
async fn one(exchange: &dyn Exchange, timeout: Duration) -> Answer {
    let sent = Instant::now();
    let (status, first) = tokio::time::timeout(timeout, exchange.exchange())
        .await
        .ok()
        .flatten()
        .unwrap_or((0, None));
    Answer {
        sent,
        took: sent.elapsed(),
        status,
        overloaded: status == 503 && first.as_deref().is_some_and(|l| l.ends_with(" overloaded")),
        backend: first.filter(|_| (200..300).contains(&status)),
    }
}

/// A load dropped without [`Running::stop`] (a test that failed midway) stops sending: it never
/// goes on into the next test.
impl Drop for Running {
    fn drop(&mut self) {
        self.stop.notify_one();
    }
}

impl Running {
    /// Every answer so far, in the order they came.
    pub fn answers(&self) -> Vec<Answer> {
        self.answers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Whether the load has sent its last request and every answer is in.
    #[allow(
        dead_code,
        reason = "the load example's (examples/load): no test waits for it"
    )]
    pub fn finished(&self) -> bool {
        self.finished.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Stops sending, waits for the requests in flight (each answered or timed out, so counted
    /// as served or failed) and returns every answer.
    pub async fn stop(mut self) -> Vec<Answer> {
        self.stop.notify_one();
        let _ = (&mut self.done).await;
        std::mem::take(
            &mut *self
                .answers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// Requests sent in `[from, to)`, by the backend that answered (`failed` for no answer or an
/// answer other than 2xx), as `(backend, count)` in name order.
pub fn by_backend(answers: &[Answer], from: Instant, to: Instant) -> Vec<(String, usize)> {
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for a in answers.iter().filter(|a| a.sent >= from && a.sent < to) {
        let who = if a.failed() {
            "failed".to_string()
        } else {
            a.backend
                .clone()
                .unwrap_or_else(|| format!("HTTP {}", a.status))
        };
        *counts.entry(who).or_default() += 1;
    }
    counts.into_iter().collect()
}
