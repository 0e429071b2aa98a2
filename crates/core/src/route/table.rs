//! The table of route kinds, expanded from the API crate's rows (`route_kinds!`, one row per
//! kind): the [`RouteKind`] key, [`KINDS`] (each kind's [`KindSpec`], from its module) and
//! [`GATEWAY_KINDS`]; and the lookups of a [`RouteKind`] into them.

use kube::core::ApiResource;

use super::{
    RouteObject, RouteTarget, RouteView,
    claim::Traffic,
    gateway::{self, GatewayKind},
    kind::KindSpec,
    referenced, trafficsplit,
};
use crate::api::{FailoverPolicy, Output};

/// The core's side of the rows: the key, the kinds table and the Gateway kinds table.
macro_rules! kinds {
    ($(
        $(#[$doc:meta])*
        $variant:ident: $name:literal, $lower:literal in $group:literal,
            own $own:literal, status $status:ident
            $(, gateway $field:ident $rules:ident ($newer:literal, $hostnames:expr) $traffic:ident)?;
    )*) => {
        /// The kinds of route, without their form: the key of [`KINDS`].
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum RouteKind {
            $( $(#[$doc])* $variant, )*
        }

        impl From<Output> for RouteKind {
            fn from(output: Output) -> Self {
                match output { $(Output::$variant => RouteKind::$variant,)* }
            }
        }

        impl RouteKind {
            /// The output that generates this kind.
            pub const fn output(self) -> Output {
                match self { $(RouteKind::$variant => Output::$variant,)* }
            }
        }

        /// Every route kind, in the order of [`RouteKind`].
        pub const KINDS: &[&KindSpec] = &[$( spec_of_row!($variant $(, $field)?), )*];

        /// Every Gateway API route kind, in the order of [`RouteKind`].
        pub const GATEWAY_KINDS: &[GatewayKind] = &[$($(
            GatewayKind {
                kind: RouteKind::$variant,
                field: |spec| spec.$field.as_ref(),
                traffic: Traffic::$traffic,
            },
        )?)*];
    };
}

/// A row's [`KindSpec`]: a Gateway API kind's, from the generic Gateway module; the one kind of
/// another API, the TrafficSplit, from its own.
macro_rules! spec_of_row {
    ($variant:ident) => {
        &trafficsplit::KIND
    };
    ($variant:ident, $field:ident) => {
        &gateway::kind_spec(RouteKind::$variant)
    };
}

crate::api::route_kinds!(kinds);

// A kind's spec is `KINDS[kind.index()]`.
const _: () = {
    let mut i = 0;
    while i < KINDS.len() {
        assert!(
            KINDS[i].kind.index() == i,
            "KINDS lists the kinds in the order of RouteKind"
        );
        i += 1;
    }
};

impl RouteTarget {
    /// The route a policy generates: the name it sets (default: the policy's name) and the form,
    /// as the module of its output's kind makes it; or the route it names (`spec.routeRef`).
    pub fn of(policy: &FailoverPolicy) -> Self {
        referenced::target(policy)
            .unwrap_or_else(|| RouteKind::from(policy.spec.output).spec().target(policy))
    }
}

impl RouteKind {
    /// Every kind, in the order of [`KINDS`].
    pub const ALL: [RouteKind; KINDS.len()] = {
        let mut all = [RouteKind::TrafficSplit; KINDS.len()];
        let mut i = 0;
        while i < KINDS.len() {
            all[i] = KINDS[i].kind;
            i += 1;
        }
        all
    };

    /// The kind's place in [`KINDS`] and [`Self::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// What holds for every route of this kind.
    pub fn spec(self) -> &'static KindSpec {
        KINDS[self.index()]
    }

    /// The kind as the API names it.
    pub fn as_str(self) -> &'static str {
        self.spec().name
    }

    /// The kind the API names `name`, if it is one of [`Self::ALL`].
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The API resource its watch lists and watches.
    pub fn resource(self) -> ApiResource {
        self.spec().resource()
    }

    /// The kind in lower case, as metric labels (and watches) name it.
    pub fn metric_label(self) -> &'static str {
        self.spec().metric_label
    }

    /// What the controller keeps of an object of this kind.
    pub fn view(self, object: &RouteObject) -> RouteView {
        self.spec().view(object)
    }

    /// The `Ready` reason when a route of this kind and the route's name is not the policy's.
    pub fn conflict_reason(self) -> &'static str {
        self.spec().reasons.conflict
    }

    /// The `Ready` reason when writing a route of this kind failed.
    pub fn write_failed_reason(self) -> &'static str {
        self.spec().reasons.write_failed
    }

    /// The `Ready` reason when the CRD of this kind is not installed.
    pub fn crd_missing_reason(self) -> &'static str {
        self.spec().reasons.crd_missing
    }

    /// The spec field that names the route of this kind.
    pub fn name_field(self) -> &'static str {
        self.spec().name_field
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Output, conditions::ready};

    #[test]
    fn every_output_the_crd_offers_has_its_kind_in_the_table() {
        use kube::CustomResourceExt;
        let crd = serde_json::to_value(crate::api::FailoverPolicy::crd()).expect("crd");
        let outputs = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["properties"]["output"]["enum"];
        let outputs = outputs.as_array().expect("the outputs");
        assert_eq!(outputs.len(), KINDS.len());
        for name in outputs {
            let output: Output = serde_json::from_value(name.clone()).expect("an output");
            let spec = RouteKind::from(output).spec();
            assert_eq!(spec.name, output.kind());
            assert_eq!(Some(spec.name), name.as_str());
        }
    }

    #[test]
    fn every_kinds_reasons_fail_and_stall_as_their_kind_neutral_meaning_says() {
        for spec in KINDS {
            let r = &spec.reasons;
            assert!(ready::is_failure(r.write_failed), "{}", spec.name);
            assert!(ready::is_failure(r.crd_missing), "{}", spec.name);
            assert!(ready::is_stalling(r.conflict), "{}", spec.name);
            assert!(ready::is_stalling(r.crd_missing), "{}", spec.name);
            assert!(
                [r.conflict, r.write_failed, r.crd_missing]
                    .iter()
                    .all(|reason| reason.starts_with(spec.name)),
                "{}",
                spec.name
            );
        }
    }

    #[test]
    fn each_kinds_watch_lists_its_crd() {
        for spec in KINDS {
            let resource = spec.resource();
            assert_eq!(format!("{}.{}", resource.plural, resource.group), spec.crd);
            assert_eq!(resource.kind, spec.name);
            assert_eq!(spec.metric_label, spec.name.to_lowercase());
        }
    }

    /// The top-level spec field of a kind (`httpRoute`, `trafficSplit`), and its field that the
    /// `routeRef` rule names (`httpRoute`, `trafficSplit.name`).
    fn own_field(spec: &KindSpec) -> (&'static str, &'static str) {
        let own = spec.name_field.strip_prefix("spec.").expect("a spec field");
        let top = own.split('.').next().expect("a field");
        let named = if spec.kind == RouteKind::TrafficSplit {
            own
        } else {
            top
        };
        (top, named)
    }

    #[test]
    fn every_kind_is_in_the_route_ref_rule_the_crd_and_the_status() {
        use crate::api::{
            FailoverPolicyStatus, RouteRefKind, RouteRefSpec, rules::ROUTE_REF_ALONE,
        };
        use kube::CustomResourceExt;
        let crd = serde_json::to_value(crate::api::FailoverPolicy::crd()).expect("crd");
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"];
        for spec in KINDS {
            let (top, named) = own_field(spec);
            assert!(
                ROUTE_REF_ALONE.cel.contains(&format!("!has(self.{named})")),
                "the routeRef rule's CEL leaves out {named}"
            );
            assert!(
                ROUTE_REF_ALONE.message.contains(named),
                "the routeRef rule's message leaves out {named}"
            );
            assert!(schema["spec"]["properties"][top].is_object(), "spec.{top}");
            assert!(
                schema["status"]["properties"][top].is_object(),
                "status.{top}"
            );
            let mut status = FailoverPolicyStatus::default();
            *spec.status_name(&mut status) = Some("route".into());
            let status = serde_json::to_value(&status).expect("status");
            assert_eq!(
                status[top], "route",
                "{} names its route in status.{top}",
                spec.name
            );
            // A policy with routeRef and this kind's own field set breaks the rule.
            let mut policy = serde_json::to_value(crate::api::FailoverPolicySpec {
                route_ref: Some(RouteRefSpec {
                    kind: RouteRefKind::HttpRoute,
                    name: "shop".into(),
                    rule: "main".into(),
                }),
                ..Default::default()
            })
            .expect("spec");
            policy[top] = serde_json::json!({"name": "route", "port": 80});
            let policy: crate::api::FailoverPolicySpec =
                serde_json::from_value(policy).expect("a spec");
            assert!(spec.fields_set(&policy), "{}", spec.name);
            let alone = super::super::referenced::checks(&policy, KINDS);
            assert!(
                alone
                    .iter()
                    .any(|(holds, rule)| !holds && rule.field == ROUTE_REF_ALONE.field),
                "{} beside routeRef is refused",
                spec.name
            );
        }
    }
}
