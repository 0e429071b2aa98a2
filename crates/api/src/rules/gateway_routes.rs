//! The rules of the Gateway API route outputs: what every kind shares, stated once, and what
//! each kind adds or refuses.

use super::CrossFieldRule;

/// Most backendRefs one rule of a Gateway API route holds (its CRD's `maxItems`, the same for
/// every kind): the primary and the secondaries of a policy with a route output must fit in one
/// rule.
pub const MAX_ROUTE_BACKENDS: usize = 16;
/// A route output fits its backends in one rule of at most [`MAX_ROUTE_BACKENDS`].
pub const ROUTE_BACKENDS_FIT: CrossFieldRule = CrossFieldRule {
    cel: "(self.output == 'TrafficSplit' && !has(self.routeRef)) || size(self.secondaries) <= 15",
    message: "a Gateway API route output takes at most 15 secondaries: with the primary, one route rule holds at most 16 backendRefs",
    field: ".secondaries",
};
/// The Gateways a route attaches to are distinct (a rule on the list).
pub const DISTINCT_GATEWAYS: CrossFieldRule = CrossFieldRule {
    cel: "self.all(g, self.exists_one(h, h == g))",
    message: "gateways must be distinct",
    field: ".gateways",
};
/// A Gateway named twice is named by listener each time (a rule on the list), as the Gateway
/// API asks of `parentRefs`. (`namespace` is a reserved word of CEL: Kubernetes spells the field
/// `__namespace__` in rules.)
pub const SAME_GATEWAY_NEEDS_SECTION: CrossFieldRule = CrossFieldRule {
    cel: "self.all(g, has(g.sectionName) || has(g.port) || self.exists_one(h, h.name == g.name && (has(h.__namespace__) ? h.__namespace__ : '') == (has(g.__namespace__) ? g.__namespace__ : '')))",
    message: "a Gateway listed more than once in gateways needs sectionName or port each time",
    field: ".gateways",
};

/// The rules of one Gateway API route output and of the spec field that shapes its route: the
/// same rules for every kind, spelled out once (`gateway_route_rules!`), and those of the kinds
/// a field of the shared type does not fit.
pub struct GatewayRouteRules {
    /// The output needs its field (with the backends' port).
    pub needs_port: CrossFieldRule,
    /// The route attaches to something: the apex Service, or at least one Gateway.
    pub needs_a_parent: CrossFieldRule,
    /// [`DISTINCT_GATEWAYS`], reported at the field's `gateways`.
    pub distinct_gateways: CrossFieldRule,
    /// [`SAME_GATEWAY_NEEDS_SECTION`], reported at the field's `gateways`.
    pub same_gateway_needs_section: CrossFieldRule,
    /// The route's name never changes.
    pub name_fixed: CrossFieldRule,
    /// The field only with its output (the kinds added after HTTPRoute, so that no policy
    /// written before is refused).
    pub only_with_output: Option<CrossFieldRule>,
    /// No path prefix: the kind does not match paths.
    pub no_path: Option<CrossFieldRule>,
    /// What the kind asks of the hostnames.
    pub hostnames: Hostnames,
}

/// What a route kind asks of `hostnames`.
pub enum Hostnames {
    /// Any number, none included.
    Any,
    /// At least one (this rule).
    Required(CrossFieldRule),
    /// None (this rule).
    Refused(CrossFieldRule),
}

impl GatewayRouteRules {
    /// The rules the CRD states on the whole spec (those on `gateways` are on the list).
    pub fn schema_rules(&self) -> impl Iterator<Item = &CrossFieldRule> {
        let hostnames = match &self.hostnames {
            Hostnames::Any => None,
            Hostnames::Required(rule) | Hostnames::Refused(rule) => Some(rule),
        };
        [&self.needs_port, &self.needs_a_parent, &self.name_fixed]
            .into_iter()
            .chain(self.only_with_output.as_ref())
            .chain(self.no_path.as_ref())
            .chain(hostnames)
    }
}

/// The [`GatewayRouteRules`] of output `$output` and spec field `$field`.
macro_rules! gateway_route_rules {
    ($output:literal, $field:literal, newer: $newer:literal, hostnames: $hostnames:expr) => {
        GatewayRouteRules {
            needs_port: CrossFieldRule {
                cel: concat!("self.output != '", $output, "' || has(self.", $field, ")"),
                message: concat!(
                    $field,
                    " (with the backends' port) is required with output ",
                    $output
                ),
                field: concat!(".", $field),
            },
            needs_a_parent: CrossFieldRule {
                cel: concat!(
                    "!has(self.",
                    $field,
                    ") || !has(self.",
                    $field,
                    ".serviceParent) || self.",
                    $field,
                    ".serviceParent || (has(self.",
                    $field,
                    ".gateways) && size(self.",
                    $field,
                    ".gateways) > 0)"
                ),
                message: concat!(
                    $field,
                    ".serviceParent false needs at least one of ",
                    $field,
                    ".gateways: the route would attach to nothing"
                ),
                field: concat!(".", $field, ".serviceParent"),
            },
            distinct_gateways: CrossFieldRule {
                field: concat!(".", $field, ".gateways"),
                ..DISTINCT_GATEWAYS
            },
            same_gateway_needs_section: CrossFieldRule {
                field: concat!(".", $field, ".gateways"),
                ..SAME_GATEWAY_NEEDS_SECTION
            },
            name_fixed: CrossFieldRule {
                cel: concat!(
                    "(has(self.",
                    $field,
                    ") && has(self.",
                    $field,
                    ".name) ? self.",
                    $field,
                    ".name : '') == (has(oldSelf.",
                    $field,
                    ") && has(oldSelf.",
                    $field,
                    ".name) ? oldSelf.",
                    $field,
                    ".name : '')"
                ),
                message: concat!(
                    $field,
                    ".name cannot be changed; create a new policy instead"
                ),
                field: concat!(".", $field, ".name"),
            },
            only_with_output: if $newer {
                Some(CrossFieldRule {
                    cel: concat!("!has(self.", $field, ") || self.output == '", $output, "'"),
                    message: concat!($field, " is only meaningful with output ", $output),
                    field: concat!(".", $field),
                })
            } else {
                None
            },
            no_path: if $newer {
                Some(CrossFieldRule {
                    cel: concat!(
                        "!has(self.",
                        $field,
                        ") || !has(self.",
                        $field,
                        ".pathPrefix)"
                    ),
                    message: concat!(
                        $field,
                        ".pathPrefix is not supported: a ",
                        $output,
                        " does not match paths"
                    ),
                    field: concat!(".", $field, ".pathPrefix"),
                })
            } else {
                None
            },
            hostnames: $hostnames,
        }
    };
}
pub(crate) use gateway_route_rules;

/// What a TLSRoute asks of `tlsRoute.hostnames`: it routes by the SNI hostname, so it names one.
pub const TLS_HOSTNAMES: CrossFieldRule = CrossFieldRule {
    cel: "!has(self.tlsRoute) || (has(self.tlsRoute.hostnames) && size(self.tlsRoute.hostnames) > 0)",
    message: "tlsRoute.hostnames needs at least one hostname: a TLSRoute routes connections by their SNI hostname",
    field: ".tlsRoute.hostnames",
};
/// What a TCPRoute asks of `tcpRoute.hostnames`: it takes every connection of its listeners, so
/// it names no hostname.
pub const TCP_HOSTNAMES: CrossFieldRule = CrossFieldRule {
    cel: "!has(self.tcpRoute) || !has(self.tcpRoute.hostnames) || size(self.tcpRoute.hostnames) == 0",
    message: "tcpRoute.hostnames is not supported: a TCPRoute takes every connection of its listeners",
    field: ".tcpRoute.hostnames",
};

/// The CRD's rules of every Gateway API route output, added to the spec's schema (a schemars
/// transform: the derive takes one rule per attribute).
pub fn gateway_route_schema_rules(schema: &mut schemars::Schema) {
    for rule in crate::kind_rules::GATEWAY_ROUTES
        .iter()
        .flat_map(|kind| kind.schema_rules())
    {
        // Every rule is a constant whose CEL and message serialize: a failure is a programming
        // error, caught by the CRD tests.
        kube::core::validate(schema, rule.schema_rule()).expect("a CEL rule");
    }
}
