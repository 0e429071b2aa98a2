//! What the control plane did during a phase of the benchmark: the API server's own timing of
//! TrafficSplit writes (its `/metrics`), which tells the time spent inside the API server (and
//! inside its etcd calls) from the time spent in a client; the keys etcd compacted (etcd's
//! `/metrics`; the API server asks etcd to compact every 5 minutes); and the CPU time of etcd,
//! kube-apiserver and kube-controller-manager, which share the machine's cores with the
//! controller.

use crate::support::{ControlPlane, metrics::metric, process::http_get};

/// One latency histogram over a phase: requests, and how many took longer than 25 and 50 ms.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Slow {
    pub requests: f64,
    pub over_25ms: f64,
    pub over_50ms: f64,
}

impl Slow {
    fn minus(self, before: Self) -> Self {
        Self {
            requests: self.requests - before.requests,
            over_25ms: self.over_25ms - before.over_25ms,
            over_50ms: self.over_50ms - before.over_50ms,
        }
    }

    fn plus(self, other: Self) -> Self {
        Self {
            requests: self.requests + other.requests,
            over_25ms: self.over_25ms + other.over_25ms,
            over_50ms: self.over_50ms + other.over_50ms,
        }
    }
}

/// The control plane's components, in the order their CPU time is kept.
const COMPONENTS: [&str; 3] = ["etcd", "kube-apiserver", "kube-controller-manager"];

/// TrafficSplit applies as the API server timed them, its etcd updates of TrafficSplits, the keys
/// etcd compacted, and the CPU seconds of each of [`COMPONENTS`].
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ControlPlaneLoad {
    pub applies: Slow,
    pub etcd_updates: Slow,
    pub etcd_compacted_keys: f64,
    pub cpu_s: [f64; 3],
    /// The API server's garbage collections (Go), and its heap in use at the end, in MiB.
    pub apiserver_gc_cycles: f64,
    pub apiserver_heap_mib: f64,
    /// What the API server allocated, in MiB: the work that drives its garbage collections,
    /// whichever window a collection falls in.
    pub apiserver_allocated_mib: f64,
    /// Requests the API server answered, by verb and resource (`apiserver_request_total`).
    #[serde(skip)]
    pub requests: std::collections::BTreeMap<(String, String), f64>,
}

impl ControlPlaneLoad {
    /// The counts so far (all zero when the API server's metrics cannot be read).
    pub async fn now(env: &crate::support::TestEnv) -> Self {
        let Ok(request) = http::Request::get("/metrics").body(Vec::new()) else {
            return Self::default();
        };
        let text = env.client.request_text(request).await.unwrap_or_default();
        Self {
            etcd_compacted_keys: etcd_compacted_keys(env.cp).await,
            cpu_s: COMPONENTS.map(|c| cpu_seconds(env.cp, c)),
            requests: requests(&text),
            apiserver_gc_cycles: metric(&text, "go_gc_duration_seconds_count").unwrap_or(0.0),
            apiserver_heap_mib: metric(&text, "go_memstats_heap_inuse_bytes").unwrap_or(0.0)
                / 1_048_576.0,
            apiserver_allocated_mib: metric(&text, "go_memstats_alloc_bytes_total").unwrap_or(0.0)
                / 1_048_576.0,
            applies: histogram(
                &text,
                "apiserver_request_duration_seconds_bucket",
                &[
                    "resource=\"trafficsplits\"",
                    "verb=\"APPLY\"",
                    "subresource=\"\"",
                ],
            ),
            etcd_updates: histogram(
                &text,
                "etcd_request_duration_seconds_bucket",
                &["resource=\"trafficsplits\"", "operation=\"update\""],
            ),
        }
    }

    /// What happened between `before` and these counts.
    pub fn since(self, before: Self) -> Self {
        Self {
            applies: self.applies.minus(before.applies),
            etcd_updates: self.etcd_updates.minus(before.etcd_updates),
            etcd_compacted_keys: self.etcd_compacted_keys - before.etcd_compacted_keys,
            cpu_s: [0, 1, 2].map(|i| self.cpu_s[i] - before.cpu_s[i]),
            apiserver_gc_cycles: self.apiserver_gc_cycles - before.apiserver_gc_cycles,
            apiserver_heap_mib: self.apiserver_heap_mib,
            apiserver_allocated_mib: self.apiserver_allocated_mib - before.apiserver_allocated_mib,
            requests: self
                .requests
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v - before.requests.get(k).copied().unwrap_or(0.0),
                    )
                })
                .filter(|(_, v)| *v > 0.0)
                .collect(),
        }
    }

    /// The sum of two spans' counts (the heap as at the later one).
    pub fn plus(self, other: Self) -> Self {
        let mut requests = self.requests;
        for (k, v) in other.requests {
            *requests.entry(k).or_default() += v;
        }
        Self {
            applies: self.applies.plus(other.applies),
            etcd_updates: self.etcd_updates.plus(other.etcd_updates),
            etcd_compacted_keys: self.etcd_compacted_keys + other.etcd_compacted_keys,
            cpu_s: [0, 1, 2].map(|i| self.cpu_s[i] + other.cpu_s[i]),
            apiserver_gc_cycles: self.apiserver_gc_cycles + other.apiserver_gc_cycles,
            apiserver_heap_mib: other.apiserver_heap_mib,
            apiserver_allocated_mib: self.apiserver_allocated_mib + other.apiserver_allocated_mib,
            requests,
        }
    }

    /// One line for the log, then the requests the API server answered.
    pub fn describe(&self) -> String {
        let (a, e) = (&self.applies, &self.etcd_updates);
        let mut requests: Vec<_> = self.requests.iter().collect();
        requests.sort_by(|a, b| b.1.total_cmp(a.1));
        let requests: Vec<String> = requests
            .iter()
            .map(|((verb, resource), n)| format!("{n} {verb} {resource}"))
            .collect();
        let summary = format!(
            "the API server timed {} TrafficSplit applies, {} over 25 ms and {} over 50 ms; its etcd updates of TrafficSplits: {}, {} over 25 ms, {} over 50 ms; etcd compacted {} keys; CPU: etcd {:.1} s, kube-apiserver {:.1} s, kube-controller-manager {:.1} s",
            a.requests,
            a.over_25ms,
            a.over_50ms,
            e.requests,
            e.over_25ms,
            e.over_50ms,
            self.etcd_compacted_keys,
            self.cpu_s[0],
            self.cpu_s[1],
            self.cpu_s[2]
        );
        format!(
            "{summary}; the API server allocated {:.0} MiB and collected garbage {} times (heap in use {:.0} MiB); requests: {}",
            self.apiserver_allocated_mib,
            self.apiserver_gc_cycles,
            self.apiserver_heap_mib,
            requests.join(", ")
        )
    }
}

/// Requests answered so far by verb and resource, summed over the other labels.
fn requests(text: &str) -> std::collections::BTreeMap<(String, String), f64> {
    let mut counts = std::collections::BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let label = |name: &str| {
            let start = line.find(&format!("{name}=\""))? + name.len() + 2;
            let end = line[start..].find('"')? + start;
            Some(line[start..end].to_string())
        };
        let (Some(verb), Some(resource), Some(value)) = (
            label("verb"),
            label("resource"),
            line.rsplit_once(' ')
                .and_then(|(_, v)| v.parse::<f64>().ok()),
        ) else {
            continue;
        };
        let subresource = label("subresource").unwrap_or_default();
        let resource = if subresource.is_empty() {
            resource
        } else {
            format!("{resource}/{subresource}")
        };
        *counts.entry((verb, resource)).or_insert(0.0) += value;
    }
    counts
}

/// CPU seconds a control plane component has used (0 when it cannot be read).
pub fn cpu_seconds(cp: &ControlPlane, component: &str) -> f64 {
    std::fs::read_to_string(cp.dir.join(format!("{component}.pid")))
        .ok()
        .and_then(|pid| pid.trim().parse().ok())
        .map_or(0.0, |pid| crate::startup::usage(pid).0)
}

/// The keys etcd has compacted since it started (0 when its metrics cannot be read).
async fn etcd_compacted_keys(cp: &ControlPlane) -> f64 {
    let env = std::fs::read_to_string(cp.dir.join("env")).unwrap_or_default();
    let Some(addr) = env
        .lines()
        .find_map(|l| l.strip_prefix("ETCD_URL=http://"))
        .map(str::to_string)
    else {
        return 0.0;
    };
    let text = tokio::task::spawn_blocking(move || http_get(&addr, "/metrics").1)
        .await
        .unwrap_or_default();
    metric(&text, "etcd_debugging_mvcc_db_compaction_keys_total").unwrap_or(0.0)
}

/// Sums the series of a histogram family whose labels include all of `labels`.
fn histogram(text: &str, family: &str, labels: &[&str]) -> Slow {
    let mut slow = Slow::default();
    let series = text
        .lines()
        .filter(|l| l.strip_prefix(family).is_some_and(|r| r.starts_with('{')))
        .filter(|l| labels.iter().all(|label| l.contains(label)));
    for line in series {
        let Some(value) = line
            .rsplit_once(' ')
            .and_then(|(_, v)| v.parse::<f64>().ok())
        else {
            continue;
        };
        if line.contains("le=\"+Inf\"") {
            slow.requests += value;
            slow.over_25ms += value;
            slow.over_50ms += value;
        } else if line.contains("le=\"0.025\"") {
            slow.over_25ms -= value;
        } else if line.contains("le=\"0.05\"") {
            slow.over_50ms -= value;
        }
    }
    slow
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_requests_slower_than_25_and_50_ms_from_the_buckets() {
        let text = r#"x_bucket{resource="trafficsplits",verb="APPLY",subresource="",le="0.025"} 7
x_bucket{resource="trafficsplits",verb="APPLY",subresource="",le="0.05"} 9
x_bucket{resource="trafficsplits",verb="APPLY",subresource="",le="+Inf"} 10
x_bucket{resource="trafficsplits",verb="GET",subresource="",le="+Inf"} 99
"#;
        let slow = histogram(text, "x_bucket", &["verb=\"APPLY\""]);
        assert_eq!(
            (slow.requests, slow.over_25ms, slow.over_50ms),
            (10.0, 3.0, 1.0)
        );
    }
}
