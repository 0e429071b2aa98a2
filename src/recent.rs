//! The last value this replica wrote to an object, kept until its cache shows that write.
//!
//! A watch event for one kind (a route) can trigger a reconcile before the watch of another kind
//! (the policy, with the status just written) has caught up. Deciding from that stale cache
//! would write or announce a transition twice. Each entry lives only until the cache reaches the
//! written version. Versions are compared as numbers, as etcd-backed API servers issue them; a
//! version that is not a number simply disables the shortcut.

use std::collections::HashMap;

use parking_lot::Mutex;

/// Recent writes of one kind of value, by object key.
#[derive(Debug)]
pub struct Recent<T> {
    entries: Mutex<HashMap<String, (u64, T)>>,
}

impl<T> Default for Recent<T> {
    fn default() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: Clone> Recent<T> {
    /// Remembers a write that the API server acknowledged at `written_version`.
    pub fn record(&self, key: String, written_version: Option<&str>, value: T) {
        if let Some(version) = written_version.and_then(|v| v.parse::<u64>().ok()) {
            self.entries.lock().insert(key, (version, value));
        }
    }

    /// The value written last when the cache (at `cached_version`) has not caught up with it;
    /// once it has, the entry is dropped and the cache wins.
    pub fn newer_than(&self, key: &str, cached_version: Option<&str>) -> Option<T> {
        let mut entries = self.entries.lock();
        let (written, value) = entries.get(key)?;
        match cached_version.and_then(|v| v.parse::<u64>().ok()) {
            Some(cached) if cached < *written => Some(value.clone()),
            _ => {
                entries.remove(key);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_writes_win_until_the_cache_catches_up() {
        let recent: Recent<&str> = Recent::default();
        recent.record("a".into(), Some("10"), "written");
        assert_eq!(recent.newer_than("a", Some("9")), Some("written"));
        assert_eq!(
            recent.newer_than("a", Some("10")),
            None,
            "caught up: the cache wins"
        );
        assert_eq!(
            recent.newer_than("a", Some("9")),
            None,
            "and the entry is gone"
        );
        recent.record("b".into(), Some("not-a-number"), "written");
        assert_eq!(recent.newer_than("b", Some("1")), None);
    }
}
