//! The condition types of a policy's status and every reason they carry, stated once. The
//! controller writes them, the plugin (`kubectl failover`) reads them and the tests check them,
//! all through these constants: renaming one cannot silently break another.

/// Condition type: traffic is routed to a ready backend through the owned route.
pub const READY: &str = "Ready";
/// Condition type: some backend is not ready.
pub const DEGRADED: &str = "Degraded";
/// Condition type: `spec.suspend` freezes the generated route.
pub const SUSPENDED: &str = "Suspended";
/// Condition type: `spec.pin` sends all traffic to one backend.
pub const PINNED: &str = "Pinned";
/// Condition type: a drill (`spec.drill`) is set: `True` while it sends all traffic to its
/// backend, `False` while it waits for that backend or after it ended.
pub const DRILL: &str = "Drill";
/// Condition type, with `spec.capacity`: some of the demand is sent where no ready endpoint
/// serves it (no backend has the capacity).
pub const DEMAND_UNSERVED: &str = "DemandUnserved";
/// Condition type, with `spec.capacity.scale`: the controller holds some secondary's workload
/// raised for a failover.
pub const SCALED_UP: &str = "ScaledUp";
/// Condition type: a health query fails (the last verdict is kept).
pub const HEALTH_QUERY_FAILED: &str = "HealthQueryFailed";
/// Condition type: every cluster the policy reads readiness from answers.
pub const CLUSTERS_REACHABLE: &str = "ClustersReachable";
/// Condition type (output `HTTPRoute`): every parent of the route accepted it.
pub const ATTACHED: &str = "Attached";
/// Condition type, present only while `True`: the policy cannot make progress until someone
/// changes it or the cluster. It carries the `Ready` condition's reason and message; GitOps tools
/// (kstatus) read it as Failed.
pub const STALLED: &str = "Stalled";

/// Condition type, present only while `False`: a webhook sink of `spec.notifications` is not
/// contacted (its reason says why).
pub const NOTIFIED: &str = "Notified";

/// Reasons of the `Ready` condition, and of the Events that announce where traffic went.
pub mod ready {
    /// The primary is ready and takes all traffic.
    pub const PRIMARY_ACTIVE: &str = "PrimaryActive";
    /// The primary is not ready; the secondaries take the traffic.
    pub const FAILED_OVER: &str = "FailedOver";
    /// `Proportional`: traffic is shared by health.
    pub const SPILLOVER: &str = "Spillover";
    /// The primary is not ready, and `failoverAfter` holds traffic on it.
    pub const FAILOVER_PENDING: &str = "FailoverPending";
    /// The primary is ready again, and `failbackAfter` holds traffic on the secondaries.
    pub const FAILBACK_PENDING: &str = "FailbackPending";
    /// A failback ramp is under way.
    pub const FAILBACK_RAMP: &str = "FailbackRamp";
    /// With `spec.capacity`: the primary is back and takes what its ready endpoints serve; the
    /// secondaries keep the rest.
    pub const FAILBACK_BY_CAPACITY: &str = "FailbackByCapacity";
    /// The primary is ready but serves only part of the demand (`spec.capacity`): the
    /// secondaries take the rest, within their capacity.
    pub const SPILLOVER_BY_CAPACITY: &str = "SpilloverByCapacity";
    /// `spec.pin` sends all traffic to a ready backend.
    pub const PINNED: &str = "Pinned";
    /// `spec.pin` sends all traffic to a backend that is not ready.
    pub const PINNED_BACKEND_NOT_READY: &str = "PinnedBackendNotReady";
    /// A drill (`spec.drill`) sends all traffic to a ready backend until its end time.
    pub const DRILL: &str = "Drill";
    /// A forced drill sends all traffic to a backend that is not ready.
    pub const DRILL_BACKEND_NOT_READY: &str = "DrillBackendNotReady";
    /// No backend is ready; `whenNoneReady` chose the weights.
    pub const NO_READY_BACKEND: &str = "NoReadyBackend";
    /// The policy's `FailoverGroup` routes its members to one site; the policy's backends there
    /// take the traffic.
    pub const FOLLOWING_GROUP: &str = "FollowingGroup";
    /// `spec.suspend` freezes the route; its status is `True` while the route it keeps sends
    /// traffic to a ready backend.
    pub const SUSPENDED: &str = "Suspended";
    /// The spec breaks a rule; nothing is decided.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// `spec.routeRef` names a route, or a rule of it, that does not exist.
    pub const ROUTE_REF_NOT_FOUND: &str = "RouteRefNotFound";
    /// The rule `spec.routeRef` names routes to other backends than the policy's.
    pub const ROUTE_REF_BACKENDS_DIFFER: &str = "RouteRefBackendsDiffer";
    /// The route `spec.routeRef` names does not consent to the policy's changes (its annotation
    /// `failover.dev/policies` does not name the policy); nothing of it is written.
    pub const ROUTE_REF_NOT_CONSENTED: &str = "RouteRefNotConsented";
    /// Another policy, which claimed it first, routes the same apex Service (the same rule of a
    /// route the user owns, or every hostname and path of the route on a Gateway listener); this
    /// one writes no route.
    pub const APEX_CONFLICT: &str = "ApexConflict";

    /// The `Ready` reasons of a failure that no transition Event announces, besides each
    /// kind's `WriteFailed` and `CRDMissing` ([`is_failure`]).
    pub const FAILURES: [&str; 4] = [
        INVALID_SPEC,
        ROUTE_REF_NOT_FOUND,
        ROUTE_REF_BACKENDS_DIFFER,
        ROUTE_REF_NOT_CONSENTED,
    ];

    /// The `Ready` reasons that mean the policy cannot make progress until someone changes it or
    /// the cluster, besides each kind's `Conflict` and `CRDMissing` ([`is_stalling`]).
    pub const STALLING: [&str; 5] = [
        INVALID_SPEC,
        ROUTE_REF_NOT_FOUND,
        ROUTE_REF_BACKENDS_DIFFER,
        ROUTE_REF_NOT_CONSENTED,
        APEX_CONFLICT,
    ];

    /// Whether `reason` is a failure that no transition Event announces: each raises a Warning
    /// Event of the same reason when it starts.
    pub fn is_failure(reason: &str) -> bool {
        FAILURES.contains(&reason)
            || crate::Output::ALL.iter().any(|output| {
                let kind = output.reasons();
                [kind.write_failed, kind.crd_missing].contains(&reason)
            })
    }

    /// Whether `reason` means the policy cannot make progress until someone changes it or the
    /// cluster: it sets `Stalled`. A failed write is retried, so it does not.
    pub fn is_stalling(reason: &str) -> bool {
        STALLING.contains(&reason)
            || crate::Output::ALL.iter().any(|output| {
                let kind = output.reasons();
                [kind.conflict, kind.crd_missing].contains(&reason)
            })
    }
}

/// Reasons of the `Degraded` condition.
pub mod degraded {
    /// Every backend is ready.
    pub const ALL_BACKENDS_READY: &str = "AllBackendsReady";
    /// The primary is not ready.
    pub const PRIMARY_NOT_READY: &str = "PrimaryNotReady";
    /// The primary is ready and some secondary is not.
    pub const SECONDARY_NOT_READY: &str = "SecondaryNotReady";
}

/// Reasons of the `Pinned` condition.
pub mod pinned {
    /// The pinned backend is ready.
    pub const PINNED_BACKEND_READY: &str = "PinnedBackendReady";
    /// The pinned backend is not ready.
    pub const PINNED_BACKEND_NOT_READY: &str = "PinnedBackendNotReady";
}

/// Reasons of the `Drill` condition, and of the Events at a drill's start and end.
pub mod drill {
    /// The drill sends all traffic to its backend.
    pub const RUNNING: &str = "DrillRunning";
    /// The drill's backend is not ready, so the drill moves nothing until it is (without
    /// `force`).
    pub const WAITING: &str = "DrillWaitingForBackend";
    /// `spec.pin` takes precedence over the drill.
    pub const OVERRIDDEN_BY_PIN: &str = "DrillOverriddenByPin";
    /// The drill's end time has passed.
    pub const ENDED: &str = "DrillEnded";
    /// Event: a drill started moving traffic.
    pub const STARTED: &str = "DrillStarted";
}

/// Reasons of the `DemandUnserved` condition.
pub mod capacity {
    /// The ready backends the traffic goes to serve all of the demand.
    pub const ENOUGH_CAPACITY: &str = "EnoughCapacity";
    /// Some of the demand goes where no ready endpoint serves it.
    pub const NOT_ENOUGH_CAPACITY: &str = "NotEnoughCapacity";
}

/// Reasons of the `ScaledUp` condition, and of the Events of scaling.
pub mod scaling {
    /// Some workload is raised for a failover (an Event of this reason for each raise).
    pub const SCALED_UP: &str = "ScaledUp";
    /// No workload is raised.
    pub const NOT_SCALED: &str = "NotScaled";
    /// A workload could not be scaled: not allowed, not found, or refused.
    pub const SCALING_FAILED: &str = "ScalingFailed";
    /// A workload a `scaleTarget` names does not consent to the policy's changes (its annotation
    /// `failover.dev/policies` does not name the policy): it is neither raised nor restored.
    pub const SCALE_TARGET_NOT_CONSENTED: &str = "ScaleTargetNotConsented";
    /// Event: a raised workload was restored after the failback.
    pub const SCALE_RESTORED: &str = "ScaleRestored";
}

/// Reasons of the `Suspended` condition.
pub mod suspended {
    /// `spec.suspend` is set.
    pub const SUSPENDED: &str = "Suspended";
}

/// Reasons of the `HealthQueryFailed` condition.
pub mod health {
    /// Every health query answers.
    pub const QUERIES_ANSWER: &str = "QueriesAnswer";
    /// Some health query fails.
    pub const HEALTH_QUERY_FAILED: &str = "HealthQueryFailed";
    /// The query's address is not one the cluster admin allowed; nothing is sent.
    pub const ADDRESS_NOT_ALLOWED: &str = "AddressNotAllowed";
    /// The query reads series outside the policy's namespace; nothing is sent.
    pub const QUERY_NOT_ALLOWED: &str = "QueryNotAllowed";
}

/// Reasons of the `ClustersReachable` condition.
pub mod clusters {
    /// Every cluster the policy reads from answers.
    pub const ALL_CLUSTERS_REACHABLE: &str = "AllClustersReachable";
    /// Some cluster does not answer, or is not declared.
    pub const CLUSTER_UNREACHABLE: &str = "ClusterUnreachable";
    /// A cluster does not grant the policy's namespace a namespace it reads from.
    pub const NAMESPACE_NOT_GRANTED: &str = "NamespaceNotGranted";
}

/// Reasons of the `Attached` condition.
pub mod attached {
    /// Every parent's controller accepted the route.
    pub const ACCEPTED: &str = "Accepted";
    /// A parent's controller refused the route.
    pub const NOT_ACCEPTED: &str = "NotAccepted";
    /// No controller has answered for some parent yet.
    pub const NO_ANSWER: &str = "NoAnswer";
    /// A Gateway of another namespace that the cluster admin does not allow policies of this
    /// namespace to attach to (`--allowed-gateways`): the route is not attached to it.
    pub const GATEWAY_NOT_ALLOWED: &str = "GatewayNotAllowed";
    /// No listener of the Gateway that the route names (by `sectionName`, by `port`, or all of
    /// them) admits the route's namespace or kind (`allowedRoutes`): the route is not attached to
    /// it, and the policy claims nothing there. The Gateway API's reason of the same name.
    pub const NOT_ALLOWED_BY_LISTENERS: &str = "NotAllowedByListeners";
    /// The Gateway has no listener of the `sectionName` or `port` the route names. The Gateway
    /// API's reason of the same name.
    pub const NO_MATCHING_PARENT: &str = "NoMatchingParent";
    /// The listeners that would admit the route also admit namespaces of other shards, and the
    /// Gateway's namespace is in another shard (`--shard`): that shard's controller alone routes
    /// there, so no hostname on a listener is claimed by two shards.
    pub const LISTENER_OF_ANOTHER_SHARD: &str = "ListenerOfAnotherShard";
    /// A hostname of the route that another policy, which claimed it first, routes on a Gateway
    /// listener: the route is written without it and serves the policy's other hostnames.
    pub const HOSTNAME_HELD_ELSEWHERE: &str = "HostnameHeldElsewhere";
}

/// Reasons of the Events that announce a transition (besides `FailedOver` and
/// `NoReadyBackend`, the `Ready` reasons of the same name).
pub mod events {
    /// Traffic returned to the primary.
    pub const FAILED_BACK: &str = "FailedBack";
    /// A backend is ready again after none was.
    pub const RECOVERED: &str = "Recovered";
    /// A failback ramp moved to its next step.
    pub const FAILBACK_STEP: &str = "FailbackStep";
    /// A Warning: the API server refused the object's status for what it is (too large with the
    /// object's metadata, or invalid); it is tried again after up to 5 minutes.
    pub const STATUS_NOT_WRITTEN: &str = "StatusNotWritten";
}

/// Reasons of the `Notified` condition.
pub mod notified {
    /// A webhook sink's URL is not one the cluster admin allows (`--notification-allowed-urls`):
    /// it is never contacted.
    pub const WEBHOOK_NOT_ALLOWED: &str = "WebhookNotAllowed";
}

/// The reasons of a `FailoverGroup`'s conditions and Events.
pub mod group {
    /// `Ready`: every member that follows routes to the group's first site.
    pub const SITE_READY: &str = "SiteReady";
    /// `Ready`: a member is not ready in the current site; its `failoverAfter` holds the group.
    pub const FAILOVER_PENDING: &str = "FailoverPending";
    /// `Ready`, while every member routes to a site other than the first, and an Event when the
    /// group moves to the next site where every member is ready.
    pub const FAILED_OVER: &str = "GroupFailedOver";
    /// `Ready`: every member is ready in a better site; the longest `failbackAfter` holds the
    /// group.
    pub const FAILBACK_PENDING: &str = "FailbackPending";
    /// An Event: the group moved back to a better site.
    pub const FAILED_BACK: &str = "GroupFailedBack";
    /// `Ready` False: no site has every member ready; each member routes by its own rules.
    pub const NO_SITE_READY: &str = "NoSiteReady";
    /// `Degraded` False: every member follows the group.
    pub const ALL_FOLLOWING: &str = "AllMembersFollowing";
    /// `Degraded` True: a member does not follow (a site it lacks, a pin, a suspend, a drill,
    /// strategy `Proportional`, another group listing it first, or no such valid policy).
    pub const MEMBERS_NOT_FOLLOWING: &str = "MembersNotFollowing";
}
