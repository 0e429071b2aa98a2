//! The route a decision asks for: the whole object to write, and the rules it must say.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::core::DynamicObject;

use crate::{
    policy::ValidPolicy,
    route::{RouteKey, RouteRules, RouteTarget, metadata},
};

/// The route a plan asks for.
#[derive(Clone, Debug)]
pub struct DesiredRoute {
    /// Which route.
    pub target: RouteTarget,
    /// Its namespace.
    pub namespace: String,
    /// The name of the policy that owns it (its label value).
    pub policy: String,
    /// The uid of the policy that owns it.
    pub owner_uid: String,
    /// What it must say.
    pub rules: RouteRules,
    /// The whole object to write.
    pub object: DynamicObject,
}

impl DesiredRoute {
    /// The route of a valid policy with these weights, owned by `owner` (the policy).
    pub fn of(owner: OwnerReference, valid: &ValidPolicy, weights: &[i32]) -> Self {
        let owner_uid = owner.uid.clone();
        let target = valid.route.clone();
        let rules = target.rules(&valid.service, valid.backend_refs(), weights);
        let meta = metadata(&target.name, &valid.namespace, &valid.name, owner);
        let object = target.object(meta, &rules);
        Self {
            target,
            namespace: valid.namespace.to_string(),
            policy: valid.name.to_string(),
            owner_uid,
            rules,
            object,
        }
    }

    /// This route without the hostnames `lost` (held by other policies): the rules and the
    /// object written say only the others.
    pub fn without_hostnames(&self, lost: &[&str]) -> Self {
        let mut narrowed = self.clone();
        narrowed
            .rules
            .hostnames
            .retain(|h| !lost.contains(&h.as_str()));
        narrowed.target = self.target.without_hostnames(lost);
        narrowed.object = narrowed
            .target
            .object(self.object.metadata.clone(), &narrowed.rules);
        narrowed
    }

    /// The route's key in the route cache.
    pub fn key(&self) -> RouteKey {
        self.target.key(&self.namespace)
    }
}
