//! Leader election between controller processes: one leader writes, and a standby takes over
//! after SIGKILL (once the Lease expires) and after SIGTERM (the Lease released).

use std::time::{Duration, Instant};

use crate::support::{
    self, ControllerProcess, ON_EAST, ON_WEB, PolicyBuilder, TestEnv, WAIT, WEB_BACKENDS,
    api_writes, election_args, metric, test_env, wait_until,
};

/// Every holder the controllers' Lease has had since the watch started (`None`: released).
struct LeaseHolders {
    seen: std::sync::Arc<tokio::sync::Mutex<Vec<Option<String>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl LeaseHolders {
    async fn watch(env: &TestEnv) -> Self {
        use futures::StreamExt;
        use k8s_openapi::api::coordination::v1::Lease;
        use kube::runtime::{WatchStreamExt, watcher};
        let seen = std::sync::Arc::new(tokio::sync::Mutex::new(Vec::new()));
        let leases: kube::Api<Lease> = env.api();
        let record = seen.clone();
        let task = tokio::spawn(async move {
            let mut stream = watcher(leases, watcher::Config::default())
                .applied_objects()
                .boxed();
            while let Some(Ok(lease)) = stream.next().await {
                let holder = lease.spec.and_then(|s| s.holder_identity);
                let mut seen = record.lock().await;
                if seen.last() != Some(&holder) {
                    seen.push(holder);
                }
            }
        });
        let ready = wait_until(WAIT, || async { !seen.lock().await.is_empty() }).await;
        assert!(ready, "the Lease is never listed");
        Self { seen, task }
    }

    /// The holder now.
    async fn last(&self) -> Option<String> {
        self.seen.lock().await.last().cloned().flatten()
    }

    /// Every holder seen, the first as the watch found it.
    async fn since_start(&self) -> Vec<Option<String>> {
        self.seen.lock().await.clone()
    }
}

impl Drop for LeaseHolders {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn is_leader(c: &ControllerProcess) -> bool {
    metric(&c.admin_get("/metrics").await.1, "failover_leader") == Some(1.0)
}

async fn writes(c: &ControllerProcess) -> f64 {
    api_writes(c, &["trafficsplit", "status", "event"])
        .await
        .values()
        .sum()
}

#[tokio::test]
async fn one_leader_writes_and_a_standby_takes_over_after_sigkill_and_sigterm() {
    let Some(env) = test_env!() else { return };
    env.ready_backends(&WEB_BACKENDS).await;
    let args = election_args(&env.ns);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut a = ControllerProcess::start(&env, &args);
    let mut b = ControllerProcess::start(&env, &args);
    env.apply(&PolicyBuilder::web());
    env.wait_weights("web", &ON_WEB, WAIT).await;
    assert!(
        wait_until(WAIT, || async {
            is_leader(&a).await != is_leader(&b).await
        })
        .await,
        "exactly one leader"
    );
    if is_leader(&b).await {
        std::mem::swap(&mut a, &mut b);
    }
    // Exactly one writes.
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(writes(&a).await >= 2.0, "the leader wrote");
    assert_eq!(writes(&b).await, 0.0, "the standby wrote nothing");
    assert!(
        wait_until(WAIT, || async {
            b.admin_get("/readyz").await == (200, "ok (standby)".to_string())
        })
        .await
    );

    // SIGKILL the leader, then change readiness: the standby takes over once the Lease expires
    // (nothing released it) and completes the change.
    let holders = LeaseHolders::watch(&env).await;
    let before = holders.last().await;
    a.signal("KILL");
    let killed = Instant::now();
    env.set_endpoints("web", 1, 0).await;
    env.wait_weights("web", &ON_WEB, WAIT).await;
    let sigkill_takeover = killed.elapsed();
    assert!(is_leader(&b).await, "the standby leads");
    let seen = holders.since_start().await;
    assert!(
        seen.iter().all(Option::is_some) && seen.last() != Some(&before),
        "after SIGKILL the Lease passes to the standby without being released: {seen:?}"
    );

    // A new standby joins; SIGTERM the leader: the lease is released and the standby takes
    // over within a couple of seconds.
    let c = ControllerProcess::start(&env, &args);
    assert!(
        wait_until(WAIT, || async {
            c.admin_get("/readyz").await == (200, "ok (standby)".to_string())
        })
        .await
    );
    let holders = LeaseHolders::watch(&env).await;
    b.signal("TERM");
    let terminated = Instant::now();
    env.set_endpoints("web", 0, 1).await;
    env.wait_weights("web", &ON_EAST, WAIT).await;
    let sigterm_takeover = terminated.elapsed();
    assert!(
        b.logs().contains("released the leader Lease"),
        "{}",
        b.logs()
    );
    assert!(is_leader(&c).await, "the new standby leads");
    let seen = holders.since_start().await;
    let released = seen.iter().position(Option::is_none);
    assert!(
        released.is_some_and(|at| seen[at + 1..].iter().any(Option::is_some)),
        "after SIGTERM the Lease is released, then taken by the standby: {seen:?}"
    );
    support::figure(format!(
        "takeover: after SIGKILL {sigkill_takeover:?} (lease 4s), after SIGTERM {sigterm_takeover:?}"
    ));
}
