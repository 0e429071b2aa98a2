//! 64-bit digests of values that are only ever compared, never read back: a route's rules, an
//! owner's uid, an EndpointSlice's name. A digest is one word where the value took an allocation.
//! Digests are the same for equal values within one process and are never stored elsewhere.

use std::hash::{DefaultHasher, Hash, Hasher};

/// The digest of a value.
pub fn digest(value: &(impl Hash + ?Sized)) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_have_equal_digests_and_different_ones_differ() {
        assert_eq!(digest("web-x1"), digest(&String::from("web-x1")));
        assert_ne!(digest("web-x1"), digest("web-x2"));
    }
}
