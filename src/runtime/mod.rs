//! What every step of the pipeline runs against, below the sources and the steps: the API
//! client ([`api_client`]), the metrics registry ([`metrics`], the per-policy series in
//! [`policy_metrics`]), this replica's leadership ([`leader`]), the only way to write, each
//! write checked for leadership right before its request ([`writer`]), the memory of what this replica wrote or is about to write
//! ([`written`]), the one queue fair by namespace that tenants' work waits in ([`fair`]), the backoff of failed writes ([`retry`]), the alerts and webhooks that tell people of transitions ([`notify`]), and the memory a burst freed handed back to the system ([`heap`]).

pub mod api_client;
pub mod events;
pub mod fair;
pub mod heap;
pub mod leader;
pub mod metrics;
pub mod notify;
pub mod policy_metrics;
pub mod retry;
pub mod writer;
pub mod written;
