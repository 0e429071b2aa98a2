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
