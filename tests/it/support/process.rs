//! The controller binary run as a child process, exactly as in production, and its admin
//! server read over plain HTTP.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command},
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use super::{COUNTER, TestEnv, repo_root};

/// The controller binary, run as a child process exactly as in production.
pub struct ControllerProcess {
    child: Child,
    /// Where its log goes.
    pub log: PathBuf,
    admin: Option<String>,
}

impl ControllerProcess {
    /// Starts `failover-controller` for one namespace with the admin kubeconfig.
    pub fn start(env: &TestEnv, extra: &[&str]) -> Self {
        Self::start_with_kubeconfig(env, &env.cp.kubeconfig, extra)
    }

    /// Starts `failover-controller` for one namespace with the given kubeconfig.
    pub fn start_with_kubeconfig(env: &TestEnv, kubeconfig: &Path, extra: &[&str]) -> Self {
        Self::start_binary(&binary(), env, kubeconfig, extra)
    }

    /// Starts `failover-controller` for every namespace (on a control plane of the test's own:
    /// on the shared one it would act on other tests' policies).
    pub fn start_cluster_wide(env: &TestEnv, extra: &[&str]) -> Self {
        Self::launch(&binary(), env, &env.cp.kubeconfig, None, extra)
    }

    /// Starts a given `failover-controller` binary for one namespace.
    pub fn start_binary(binary: &Path, env: &TestEnv, kubeconfig: &Path, extra: &[&str]) -> Self {
        Self::launch(binary, env, kubeconfig, Some(&env.ns), extra)
    }

    fn launch(
        binary: &Path,
        env: &TestEnv,
        kubeconfig: &Path,
        namespace: Option<&str>,
        extra: &[&str],
    ) -> Self {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let log = std::env::temp_dir().join(format!("failover-controller-{}-{n}.log", env.ns));
        let file = std::fs::File::create(&log).expect("controller log file");
        let mut args: Vec<&str> = namespace
            .map(|ns| vec!["--namespace", ns])
            .unwrap_or_default();
        if !extra.contains(&"--log-level") {
            args.extend(["--log-level", "info,failover=debug"]);
        }
        // A free port picked here, so the address is known whatever the log level.
        let admin = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.to_string())
            .expect("free port");
        if !extra.contains(&"--admin-addr") {
            args.extend(["--admin-addr", &admin]);
        }
        let child = Command::new(binary)
            .env("KUBECONFIG", kubeconfig)
            .env_remove("RUST_LOG")
            .args(&args)
            .args(extra)
            .stdout(file.try_clone().expect("log file"))
            .stderr(file)
            .spawn()
            .expect("starting failover-controller");
        Self {
            child,
            log,
            admin: (!extra.contains(&"--admin-addr")).then_some(admin),
        }
    }

    /// The controller's log so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The admin server's address, from the log (waits up to 10 s for it).
    pub async fn admin_addr(&self) -> String {
        if let Some(addr) = &self.admin {
            return addr.clone();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(addr) = self
                .logs()
                .lines()
                .find(|l| l.contains("admin server listening"))
                .and_then(|l| l.split("address=").nth(1))
                .and_then(|rest| rest.split_whitespace().next())
            {
                return addr.trim_matches('"').to_string();
            }
            assert!(
                Instant::now() < deadline,
                "controller did not start its admin server:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// GET on the admin server: (status code, body).
    pub async fn admin_get(&self, path: &str) -> (u16, String) {
        let addr = self.admin_addr().await;
        // Right after start the server may not listen yet: retry refused connections briefly.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let answer = http_get(&addr, path);
            if answer.0 != 0 || Instant::now() >= deadline {
                return answer;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether the process is still the one started: it has not exited (crashed, or been
    /// killed for its memory).
    pub fn still_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The controller's own count of bytes on its heap (`failover_heap_bytes`).
    pub async fn heap_bytes(&self) -> f64 {
        let (_, text) = self.admin_get("/metrics").await;
        super::metric(&text, "failover_heap_bytes").unwrap_or(0.0)
    }

    /// The child's process id.
    #[allow(
        dead_code,
        reason = "the benchmark's (examples/benchmark): no test reads it"
    )]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The CPU time the process has used so far.
    pub fn cpu_time(&self) -> Duration {
        Duration::from_secs_f64(cpu_seconds(self.child.id()))
    }

    /// Freezes the process (SIGSTOP): it reads and writes nothing until [`Self::resume`], so a
    /// test can change the cluster and start a fault before the controller has reacted.
    pub fn pause(&self) {
        self.send("STOP");
    }

    /// Lets a frozen process run again (SIGCONT).
    pub fn resume(&self) {
        self.send("CONT");
    }

    fn send(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .expect("running kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// Sends a signal (e.g. "TERM", "KILL") and waits for the process to exit.
    pub fn signal(&mut self, signal: &str) {
        let _ = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// The CPU time a process has used so far, user and system, in seconds (from `/proc`, in
/// clock ticks of 10 ms).
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command's name, which ends at the last ')'; utime and stime are
    // fields 14 and 15 of the line, 12 and 13 after the name.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (field(11) + field(12)) / 100.0
}

/// The controller binary this test build made.
fn binary() -> PathBuf {
    option_env!("CARGO_BIN_EXE_failover-controller")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/release/failover-controller"))
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A minimal HTTP/1.1 GET over loopback: (status code, body); (0, error) when unreachable.
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return (0, format!("cannot connect to {addr}"));
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return (0, "write failed".into());
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}
