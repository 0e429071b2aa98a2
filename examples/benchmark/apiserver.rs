//! The API server's own timing of TrafficSplit writes, from its `/metrics`: tells the time spent
//! inside the API server (and inside its etcd calls) from the time spent in a client.

use kube::Client;

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
}

/// TrafficSplit applies as the API server timed them, and its etcd updates of TrafficSplits.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct SplitTimes {
    pub applies: Slow,
    pub etcd_updates: Slow,
}

impl SplitTimes {
    /// The counts so far (all zero when the API server's metrics cannot be read).
    pub async fn now(client: &Client) -> Self {
        let Ok(request) = http::Request::get("/metrics").body(Vec::new()) else {
            return Self::default();
        };
        let text = client.request_text(request).await.unwrap_or_default();
        Self {
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
        }
    }

    /// One line for the log.
    pub fn describe(&self) -> String {
        let (a, e) = (&self.applies, &self.etcd_updates);
        format!(
            "the API server timed {} TrafficSplit applies, {} over 25 ms and {} over 50 ms; its etcd updates of TrafficSplits: {}, {} over 25 ms, {} over 50 ms",
            a.requests, a.over_25ms, a.over_50ms, e.requests, e.over_25ms, e.over_50ms
        )
    }
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
