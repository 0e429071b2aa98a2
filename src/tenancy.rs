//! What a policy's author may make the controller reach and read.
//!
//! Creating a FailoverPolicy is a right within one namespace; the controller runs with the reach
//! of the whole cluster (its network position, the Prometheus it may ask, the credentials of the
//! remote clusters). Three rules keep a policy within what its own namespace grants, each set by
//! the cluster admin:
//!
//! - **Addresses** ([`Addresses`]): a health query goes only to an address the admin allowed
//!   (`--prometheus-allowed-addresses`, and always `--prometheus-address`). Any other is refused
//!   before a request is sent.
//! - **Series** ([`scope_query`]): every selector of a health query gets the policy's namespace
//!   as a matcher on the namespace label (`--prometheus-namespace-label`, default `namespace`),
//!   so a query reads only its namespace's series; a selector naming another namespace is
//!   refused. The query is parsed and printed again by the `promql-parser` crate, the parser
//!   prom-label-proxy's approach needs (a selector can hide in any function, aggregation,
//!   subquery or `or` branch; editing the text would miss one). Measured on a release build:
//!   scoping `errors{service="web"}` takes 2.8 µs, a two-selector error ratio with `or` 96 µs;
//!   it runs when a policy with a health query changes, never per query sent. The crate adds
//!   0.9 MB to the release binary (17.2 to 18.1 MB). Templates owned by the admin were the
//!   other way: they take from authors the PromQL they know and add an object to manage.
//! - **Remote namespaces** ([`NamespaceGrants`]): a policy reads the readiness of a remote
//!   namespace only when the cluster's Secret grants it to the policy's namespace (annotation
//!   [`NAMESPACES_ANNOTATION`]; without it, each namespace reads its namesake only). A refused
//!   namespace is not watched.
//!
//! Each refusal names the field and the rule, in the policy's status.

use promql_parser::{
    label::{MatchOp, Matcher, Matchers},
    parser::{self, Expr, VectorSelector},
};

/// The annotation of a cluster Secret that grants policy namespaces remote namespaces:
/// `from=to` pairs separated by commas, `*` for any on either side.
pub const NAMESPACES_ANNOTATION: &str = "failover.dev/namespaces";

/// The addresses health queries may go to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Addresses {
    allowed: Vec<String>,
}

impl Addresses {
    /// The allowed addresses and the controller's own Prometheus (always allowed).
    pub fn new(allowed: &[String], default: Option<&str>) -> Self {
        let allowed = allowed
            .iter()
            .map(String::as_str)
            .chain(default)
            .map(|a| a.trim().trim_end_matches('/').to_string())
            .filter(|a| !a.is_empty())
            .collect();
        Self { allowed }
    }

    /// Whether a query may go to `address`: it is an allowed address or lies below one
    /// (`http://prom:9090` allows `http://prom:9090/tenant-a`), with no `..` or escapes.
    pub fn allows(&self, address: &str) -> bool {
        let address = address.trim_end_matches('/');
        if address.contains("..") || address.contains('%') || address.contains('@') {
            return false;
        }
        self.allowed.iter().any(|a| {
            address == a
                || address
                    .strip_prefix(a.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        })
    }

    /// Why `address` is refused, naming the field and the rule.
    pub fn refusal(&self, address: &str) -> String {
        let allowed = if self.allowed.is_empty() {
            "none".to_string()
        } else {
            self.allowed.join(", ")
        };
        format!(
            "spec.health.prometheus.address {address} is not an address the controller may ask (--prometheus-allowed-addresses: {allowed}); no query is sent"
        )
    }
}

/// `query` reading only the series of `namespace`: every selector matches `label` equal to it.
/// With no label (the admin turned scoping off), the query as written.
pub fn scope_query(query: &str, label: Option<&str>, namespace: &str) -> Result<String, String> {
    let Some(label) = label else {
        return Ok(query.to_string());
    };
    let mut expr = parser::parse(query).map_err(|e| {
        format!(
            "spec.health.prometheus.query does not parse: {}",
            crate::message::line(&e)
        )
    })?;
    scope(&mut expr, label, namespace)?;
    Ok(expr.to_string())
}

fn scope(expr: &mut Expr, label: &str, namespace: &str) -> Result<(), String> {
    match expr {
        Expr::Aggregate(e) => {
            scope(&mut e.expr, label, namespace)?;
            match &mut e.param {
                Some(param) => scope(param, label, namespace),
                None => Ok(()),
            }
        }
        Expr::Unary(e) => scope(&mut e.expr, label, namespace),
        Expr::Binary(e) => {
            scope(&mut e.lhs, label, namespace)?;
            scope(&mut e.rhs, label, namespace)
        }
        Expr::Paren(e) => scope(&mut e.expr, label, namespace),
        Expr::Subquery(e) => scope(&mut e.expr, label, namespace),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) => Ok(()),
        Expr::VectorSelector(vs) => scope_selector(vs, label, namespace),
        Expr::MatrixSelector(ms) => scope_selector(&mut ms.vs, label, namespace),
        Expr::Call(call) => call
            .args
            .args
            .iter_mut()
            .try_for_each(|arg| scope(arg, label, namespace)),
        Expr::Extension(_) => Err(
            "spec.health.prometheus.query has a part that cannot be scoped to its namespace".into(),
        ),
    }
}

/// Adds `label="namespace"` to a selector (to each branch of an `or` selector); refuses one that
/// already matches the label any other way.
fn scope_selector(vs: &mut VectorSelector, label: &str, namespace: &str) -> Result<(), String> {
    let Matchers {
        matchers,
        or_matchers,
    } = &mut vs.matchers;
    let branches: Vec<&mut Vec<Matcher>> = if or_matchers.is_empty() {
        vec![matchers]
    } else {
        or_matchers.iter_mut().collect()
    };
    for branch in branches {
        if let Some(m) = branch.iter().find(|m| m.name == label) {
            if matches!(m.op, MatchOp::Equal) && m.value == namespace {
                continue;
            }
            return Err(format!(
                "spec.health.prometheus.query selects {m}; a policy reads only the series of its namespace ({label}=\"{namespace}\" is added to every selector)"
            ));
        }
        branch.push(Matcher::new(MatchOp::Equal, label, namespace));
    }
    Ok(())
}

/// Which policy namespaces may read which namespaces of one remote cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceGrants {
    /// `None`: each namespace reads its namesake only (no annotation).
    pairs: Option<Vec<(String, String)>>,
}

impl NamespaceGrants {
    /// The grants of a cluster Secret's annotation (`None`: not annotated).
    pub fn parse(annotation: Option<&str>) -> Result<Self, String> {
        let Some(text) = annotation else {
            return Ok(Self::default());
        };
        let pairs = text
            .split([',', '\n'])
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|pair| {
                let (from, to) = pair.split_once('=').ok_or_else(|| {
                    format!(
                        "{NAMESPACES_ANNOTATION}: {pair:?} is not policy-namespace=remote-namespace"
                    )
                })?;
                let (from, to) = (from.trim(), to.trim());
                for side in [from, to] {
                    if side != "*" && crate::api::rules::dns1123_label(side, &()).is_err() {
                        return Err(format!(
                            "{NAMESPACES_ANNOTATION}: {side:?} is not a namespace or *"
                        ));
                    }
                }
                Ok((from.to_string(), to.to_string()))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Self { pairs: Some(pairs) })
    }

    /// Whether a policy of `policy_namespace` may read `remote_namespace`.
    pub fn allows(&self, policy_namespace: &str, remote_namespace: &str) -> bool {
        match &self.pairs {
            None => policy_namespace == remote_namespace,
            Some(pairs) => pairs.iter().any(|(from, to)| {
                (from == "*" || from == policy_namespace) && (to == "*" || to == remote_namespace)
            }),
        }
    }

    /// The rule in words, for a refusal.
    pub fn describe(&self) -> String {
        match &self.pairs {
            None => format!(
                "no {NAMESPACES_ANNOTATION} annotation: each namespace reads its namesake only"
            ),
            Some(pairs) if pairs.is_empty() => format!("{NAMESPACES_ANNOTATION} grants nothing"),
            Some(pairs) => format!(
                "{NAMESPACES_ANNOTATION}: {}",
                pairs
                    .iter()
                    .map(|(f, t)| format!("{f}={t}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scoped(query: &str) -> Result<String, String> {
        scope_query(query, Some("namespace"), "shop")
    }

    #[test]
    fn every_selector_reads_only_the_policys_namespace() {
        for (query, expected) in [
            (
                r#"errors{service="web"}"#,
                r#"errors{service="web",namespace="shop"}"#,
            ),
            (
                r#"sum(rate(a[5m])) / sum(rate(b{code=~"5.."}[5m]))"#,
                r#"sum(rate(a{namespace="shop"}[5m])) / sum(rate(b{code=~"5..",namespace="shop"}[5m]))"#,
            ),
            (
                "max_over_time(up[10m:1m]) or vector(0)",
                r#"max_over_time(up{namespace="shop"}[10m:1m]) or vector(0)"#,
            ),
            (
                r#"topk(1, x{namespace="shop"})"#,
                r#"topk(1, x{namespace="shop"})"#,
            ),
            ("time()", "time()"),
        ] {
            let got = scoped(query).expect(query);
            let printed = |q: &str| parser::parse(q).map(|e| e.to_string());
            assert_eq!(printed(&got), printed(expected), "{query}");
        }
    }

    #[test]
    fn a_selector_naming_another_namespace_any_way_is_refused_naming_the_field() {
        for query in [
            r#"errors{namespace="payments"}"#,
            r#"errors{namespace=~".*"}"#,
            r#"errors{namespace!="shop"}"#,
            r#"sum(x) + on() group_left count(y{namespace=~"shop|payments"})"#,
        ] {
            let refused = scoped(query).expect_err(query);
            assert!(
                refused.starts_with("spec.health.prometheus.query selects namespace"),
                "{refused}"
            );
        }
        let broken = scoped("sum(").expect_err("does not parse");
        assert!(broken.starts_with("spec.health.prometheus.query does not parse"));
        assert_eq!(
            scope_query("x{namespace=\"a\"}", None, "shop").as_deref(),
            Ok("x{namespace=\"a\"}")
        );
    }

    #[test]
    fn only_allowed_addresses_and_the_paths_below_them_are_asked() {
        let addresses = Addresses::new(
            &["http://prom.monitoring:9090/".to_string()],
            Some("http://prometheus:9090"),
        );
        for yes in [
            "http://prometheus:9090",
            "http://prometheus:9090/",
            "http://prom.monitoring:9090/tenant",
        ] {
            assert!(addresses.allows(yes), "{yes}");
        }
        for no in [
            "http://169.254.169.254",
            "http://prometheus:90901",
            "http://prometheus:9090.evil",
            "http://prometheus:9090/../admin",
            "http://prometheus:9090@evil:80",
            "http://prometheus:9090/%2e%2e/admin",
        ] {
            assert!(!addresses.allows(no), "{no}");
        }
        assert!(!Addresses::new(&[], None).allows("http://prometheus:9090"));
        assert!(
            Addresses::new(&[], None)
                .refusal("http://x:1")
                .contains("(--prometheus-allowed-addresses: none)")
        );
    }

    #[test]
    fn a_remote_namespace_is_read_only_where_the_cluster_grants_it() {
        let same = NamespaceGrants::parse(None).expect("default");
        assert!(same.allows("shop", "shop") && !same.allows("shop", "payments"));
        let granted = NamespaceGrants::parse(Some("shop=shop-dr, *=shared")).expect("grants");
        assert!(granted.allows("shop", "shop-dr") && granted.allows("payments", "shared"));
        assert!(
            !granted.allows("shop", "shop"),
            "the annotation says exactly what is granted"
        );
        let all = NamespaceGrants::parse(Some("*=*")).expect("all");
        assert!(all.allows("a", "b"));
        let none = NamespaceGrants::parse(Some("")).expect("nothing");
        assert!(!none.allows("shop", "shop"));
        for bad in ["shop", "shop=Shop", "a=b=c"] {
            assert!(NamespaceGrants::parse(Some(bad)).is_err(), "{bad}");
        }
    }
}
