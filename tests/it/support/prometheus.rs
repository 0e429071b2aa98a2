//! A real Prometheus (built from its Go module by `hack/build-control-plane.sh --prometheus`)
//! scraping a small exporter the test controls (its metric text is set per backend), or any
//! other target, such as the proxy's metrics.

use std::{
    io::{Read, Write},
    net::TcpListener,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use super::{ControlPlane, wait_until};

/// An HTTP server on loopback serving `/metrics` from text the test sets; it counts the
/// connections it accepted. It stops when dropped.
pub struct Exporter {
    text: Arc<Mutex<String>>,
    accepted: Arc<AtomicUsize>,
    stopped: Arc<AtomicBool>,
    /// Its `host:port`.
    pub address: String,
}

impl Exporter {
    /// Starts serving (a thread of its own, until dropped).
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("exporter port");
        let address = listener.local_addr().expect("address").to_string();
        let text = Arc::new(Mutex::new(String::new()));
        let accepted = Arc::new(AtomicUsize::new(0));
        let stopped = Arc::new(AtomicBool::new(false));
        let (served, counted, stop) = (text.clone(), accepted.clone(), stopped.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                counted.fetch_add(1, Ordering::SeqCst);
                let mut stream = stream;
                // Read the whole request head: closing with unread bytes resets the connection
                // and fails the scrape.
                let mut request = Vec::new();
                let mut chunk = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&chunk[..n]),
                    }
                }
                let body = served.lock().map(|t| t.clone()).unwrap_or_default();
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Self {
            text,
            accepted,
            stopped,
            address,
        }
    }

    /// The connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Answers every request with this body from now on (a server that is not what it should be).
    pub fn serve(&self, body: String) {
        if let Ok(mut t) = self.text.lock() {
            *t = body;
        }
    }

    /// Sets the error ratio each backend reports (`backend_error_ratio{service="..."}`).
    pub fn set(&self, ratios: &[(&str, f64)]) {
        let text: String = ratios
            .iter()
            .map(|(s, r)| format!("backend_error_ratio{{service=\"{s}\"}} {r}\n"))
            .collect();
        if let Ok(mut t) = self.text.lock() {
            *t = text;
        }
    }
}

impl Drop for Exporter {
    /// Stops the thread: it sees the flag at its next connection, this one.
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(&self.address);
    }
}

/// A Prometheus server scraping one target every second.
pub struct PrometheusServer {
    child: Option<Child>,
    binary: PathBuf,
    dir: PathBuf,
    /// Its `http://host:port`.
    pub url: String,
}

impl PrometheusServer {
    /// Starts Prometheus from the control plane's bin folder, scraping the exporter, its series
    /// in `namespace`; fails with the build command when it is missing.
    pub async fn start(cp: &ControlPlane, exporter: &Exporter, namespace: &str) -> Self {
        Self::scraping(cp, &exporter.address, "127.0.0.1", namespace).await
    }

    /// Starts Prometheus scraping `target` (`host:port`, `/metrics`), listening on `listen`
    /// (an address of this host: loopback, or the node's address for Pods to reach it). The
    /// target's series get the label `namespace` (as a Kubernetes service discovery would give
    /// them), unless they carry one of their own.
    pub async fn scraping(cp: &ControlPlane, target: &str, listen: &str, namespace: &str) -> Self {
        let binary = cp.bin("prometheus");
        assert!(
            binary.exists(),
            "no prometheus in {}: build it once with hack/build-control-plane.sh --prometheus",
            cp.bin_dir.display()
        );
        let port = TcpListener::bind(format!("{listen}:0"))
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let dir = std::env::temp_dir().join(format!("failover-prometheus-{port}"));
        std::fs::create_dir_all(&dir).expect("prometheus dir");
        let config = format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nscrape_configs:\n  - job_name: backends\n    honor_labels: true\n    static_configs: [{{targets: ['{target}'], labels: {{namespace: '{namespace}'}}}}]\n"
        );
        std::fs::write(dir.join("prometheus.yml"), config).expect("prometheus config");
        let mut server = Self {
            child: None,
            binary,
            dir,
            url: format!("http://{listen}:{port}"),
        };
        server.resume().await;
        server
    }

    /// Stops the server (its data stays).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and data; waits until it answers.
    pub async fn resume(&mut self) {
        let address = self.url.trim_start_matches("http://").to_string();
        let log = std::fs::File::create(self.dir.join("prometheus.log")).expect("log");
        let child = Command::new(&self.binary)
            .arg(format!(
                "--config.file={}",
                self.dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                self.dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={address}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting prometheus");
        self.child = Some(child);
        let up = wait_until(Duration::from_secs(30), || async {
            super::http_get(&address, "/-/ready").0 == 200
        })
        .await;
        assert!(up, "prometheus did not start: see {}", self.dir.display());
    }
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A stand-in for a Prometheus that answers a few queries at once (`slots`), each on a thread of
/// its own: a query that names `held` (a tenant's namespace, as its scoped queries do) holds its
/// slot for `hold` before it is answered, as a costly query holds a real Prometheus' slot; any
/// other is answered as soon as it has a slot, with the value set for its `service` label. It
/// counts the queries it saw by whether they name `held`, and stops when dropped.
pub struct SlotHolder {
    values: Arc<Mutex<std::collections::HashMap<String, f64>>>,
    seen: Arc<Mutex<Vec<String>>>,
    stopped: Arc<AtomicBool>,
    address: String,
    /// Its `http://host:port`.
    pub url: String,
}

impl SlotHolder {
    /// Starts answering on loopback.
    pub fn start(slots: usize, held: &str, hold: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("stand-in port");
        let address = listener.local_addr().expect("address").to_string();
        let values: Arc<Mutex<std::collections::HashMap<String, f64>>> = Arc::default();
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let stopped = Arc::new(AtomicBool::new(false));
        let free = Arc::new((Mutex::new(slots), std::sync::Condvar::new()));
        let (answers, queries, stop, held) = (
            values.clone(),
            seen.clone(),
            stopped.clone(),
            held.to_string(),
        );
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let (answers, queries, free, held) =
                    (answers.clone(), queries.clone(), free.clone(), held.clone());
                std::thread::spawn(move || {
                    let Some(query) = read_query(&stream) else {
                        return;
                    };
                    if let Ok(mut seen) = queries.lock() {
                        seen.push(query.clone());
                    }
                    // Wait for a slot, hold it while the query "runs".
                    let (count, freed) = &*free;
                    let mut left = count.lock().unwrap_or_else(|e| e.into_inner());
                    while *left == 0 {
                        left = freed.wait(left).unwrap_or_else(|e| e.into_inner());
                    }
                    *left -= 1;
                    drop(left);
                    if query.contains(&held) {
                        std::thread::sleep(hold);
                    }
                    let value = service_of(&query)
                        .and_then(|s| answers.lock().ok()?.get(&s).copied())
                        .unwrap_or(0.0);
                    *count.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                    freed.notify_one();
                    let body = format!(
                        r#"{{"status":"success","data":{{"resultType":"vector","result":[{{"metric":{{}},"value":[0,"{value}"]}}]}}}}"#
                    );
                    let mut stream = stream;
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                });
            }
        });
        Self {
            values,
            seen,
            stopped,
            url: format!("http://{address}"),
            address,
        }
    }

    /// The value each backend's query returns from now on.
    pub fn set(&self, values: &[(&str, f64)]) {
        if let Ok(mut v) = self.values.lock() {
            *v = values.iter().map(|(s, r)| (s.to_string(), *r)).collect();
        }
    }

    /// The queries seen so far.
    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl Drop for SlotHolder {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(&self.address);
    }
}

/// The `query` parameter of a `GET /api/v1/query` request, decoded.
fn read_query(mut stream: &std::net::TcpStream) -> Option<String> {
    let mut request = Vec::new();
    let mut chunk = [0u8; 4096];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => request.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(&request);
    let target = head.lines().next()?.split_whitespace().nth(1)?.to_string();
    let encoded = target.split("query=").nth(1)?.split('&').next()?;
    Some(percent_decoded(encoded))
}

fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).to_string()
}

/// The value of the `service` label a query selects.
fn service_of(query: &str) -> Option<String> {
    let at = query.find("service=\"")? + "service=\"".len();
    Some(query[at..].split('"').next()?.to_string())
}
