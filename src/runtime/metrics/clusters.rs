//! The series of remote clusters: whether each answers, how old its data is, its watches'
//! restarts; each declared cluster's series live until it is no longer declared.

use chrono::{DateTime, Utc};

use super::{ClusterLabels, Metrics};

impl Metrics {
    /// Records a remote cluster's liveness: whether its readiness counts now, and when it last
    /// answered.
    pub fn set_cluster_state(&self, cluster: &str, counts: bool, last_seen: Option<DateTime<Utc>>) {
        let labels = ClusterLabels {
            cluster: cluster.to_string(),
        };
        self.cluster_reachable
            .get_or_create(&labels)
            .set(i64::from(counts));
        let _ = self.cluster_watch_restarts.get_or_create_owned(&labels);
        if let Some(at) = last_seen {
            self.cluster_seen
                .lock()
                .insert(cluster.to_string(), at.timestamp_millis() as f64 / 1000.0);
        }
    }

    /// A declared cluster whose Secret cannot be used: not reachable, no data.
    pub fn cluster_unusable(&self, cluster: &str) {
        let labels = ClusterLabels {
            cluster: cluster.to_string(),
        };
        self.cluster_seen.lock().remove(cluster);
        self.cluster_data_age.remove(&labels);
        self.cluster_reachable.get_or_create(&labels).set(0);
        let _ = self.cluster_watch_restarts.get_or_create_owned(&labels);
    }

    /// Counts one watch restart of a remote cluster.
    pub fn cluster_watch_restart(&self, cluster: &str) {
        self.cluster_watch_restarts
            .get_or_create(&ClusterLabels {
                cluster: cluster.to_string(),
            })
            .inc();
    }

    /// Forgets every series of a cluster no longer declared.
    pub fn forget_cluster(&self, cluster: &str) {
        let labels = ClusterLabels {
            cluster: cluster.to_string(),
        };
        self.cluster_seen.lock().remove(cluster);
        self.cluster_reachable.remove(&labels);
        self.cluster_data_age.remove(&labels);
        self.cluster_watch_restarts.remove(&labels);
    }
}
