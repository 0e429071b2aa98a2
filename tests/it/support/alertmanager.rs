//! A real Alertmanager (built from its Go module by `hack/build-control-plane.sh --prometheus`),
//! which the controller posts its alerts to, read back through its API.

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use serde_json::Value;

use super::{ControlPlane, wait_until};

/// An Alertmanager on loopback, alone (no cluster), routing every alert to a receiver that sends
/// nothing: what it holds is what was posted to it. It stops, and its data goes, when dropped.
pub struct AlertmanagerServer {
    child: Child,
    dir: PathBuf,
    /// Its `http://host:port`.
    pub url: String,
}

impl AlertmanagerServer {
    /// Starts Alertmanager from the control plane's bin folder and waits until it is ready;
    /// fails with the build command when it is missing.
    pub async fn start(cp: &ControlPlane) -> Self {
        let binary = cp.bin("alertmanager");
        assert!(
            binary.exists(),
            "no alertmanager in {}: build it once with hack/build-control-plane.sh --prometheus",
            cp.bin_dir.display()
        );
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let dir = std::env::temp_dir().join(format!("failover-alertmanager-{port}"));
        std::fs::create_dir_all(&dir).expect("alertmanager dir");
        // The receiver is named `null`, quoted: a bare null is YAML's null, no name at all.
        let config = "route: {receiver: 'null'}\nreceivers: [{name: 'null'}]\n";
        std::fs::write(dir.join("alertmanager.yml"), config).expect("alertmanager config");
        let address = format!("127.0.0.1:{port}");
        let log = std::fs::File::create(dir.join("alertmanager.log")).expect("log");
        let child = Command::new(&binary)
            .arg(format!(
                "--config.file={}",
                dir.join("alertmanager.yml").display()
            ))
            .arg(format!("--storage.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={address}"))
            // No peers, no gossip port.
            .arg("--cluster.listen-address=")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting alertmanager");
        // Owned before the wait, so a failed start still stops it and removes its folder.
        let server = Self {
            child,
            dir,
            url: format!("http://{address}"),
        };
        let up = wait_until(Duration::from_secs(30), || async {
            super::http_get(&address, "/-/ready").0 == 200
        })
        .await;
        if !up {
            let log =
                std::fs::read_to_string(server.dir.join("alertmanager.log")).unwrap_or_default();
            panic!("alertmanager did not start on {address}; its log:\n{log}");
        }
        server
    }

    /// Every alert it holds, whatever its state (active, silenced, inhibited, unprocessed), as
    /// its API v2 gives them: `{labels, annotations, startsAt, endsAt, status: {state}, ...}`.
    pub fn alerts(&self) -> Vec<Value> {
        let address = self.url.trim_start_matches("http://");
        let path = "/api/v2/alerts?active=true&silenced=true&inhibited=true&unprocessed=true";
        let (status, body) = get(address, path);
        assert_eq!(
            status,
            200,
            "GET {path} from alertmanager: {}",
            String::from_utf8_lossy(&body)
        );
        serde_json::from_slice(&body).unwrap_or_else(|e| {
            panic!(
                "alertmanager's alerts are not a JSON array ({e}): {}",
                String::from_utf8_lossy(&body)
            )
        })
    }

    /// The active alert named `alertname` for `policy` (its labels `alertname` and `policy`).
    pub fn firing(&self, alertname: &str, policy: &str) -> Option<Value> {
        self.alerts().into_iter().find(|a| {
            a["labels"]["alertname"] == alertname
                && a["labels"]["policy"] == policy
                && a["status"]["state"] == "active"
        })
    }
}

impl Drop for AlertmanagerServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `GET path` over loopback, HTTP/1.1: (status code, body), the body whole whether it came with
/// a length or in chunks (Go's server chunks an answer longer than its buffer); (0, error) when
/// unreachable.
fn get(address: &str, path: &str) -> (u16, Vec<u8>) {
    let Ok(mut stream) = TcpStream::connect(address) else {
        return (0, format!("cannot connect to {address}").into_bytes());
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
    );
    if stream.write_all(request.as_bytes()).is_err() {
        return (0, b"write failed".to_vec());
    }
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let Some(at) = response.windows(4).position(|w| w == b"\r\n\r\n") else {
        return (0, response);
    };
    let head = String::from_utf8_lossy(&response[..at]).to_ascii_lowercase();
    let body = &response[at + 4..];
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let chunked = head.lines().any(|l| {
        l.split_once(':')
            .is_some_and(|(n, v)| n.trim() == "transfer-encoding" && v.contains("chunked"))
    });
    let body = if chunked {
        dechunked(body)
    } else {
        body.to_vec()
    };
    (status, body)
}

/// A chunked body's bytes: each chunk is its size in hex, CRLF, the bytes, CRLF; size 0 ends it.
fn dechunked(mut raw: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    while let Some(at) = raw.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&raw[..at])
            .ok()
            .and_then(|s| usize::from_str_radix(s.split(';').next()?.trim(), 16).ok())
            .unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = at + 2;
        let end = (start + size).min(raw.len());
        body.extend_from_slice(&raw[start..end]);
        raw = raw.get(end + 2..).unwrap_or_default();
    }
    body
}
