//! What every queue of a node is opened with: the node's name and fence
//! region, the engine and writer configs, and the task policies by queue.
//!
//! Invariant: a queue's engine config is a function of these settings, its
//! name and the settings stored with it alone ([`Settings::engine_for`]), so
//! every node that opens the queue's partitions runs them alike once it has
//! read the same stored settings.

use std::collections::BTreeMap;

use super::MatcherConfig;
use crate::core::engine::{EngineConfig, Pauses, TaskPolicy};
use crate::model::QueueName;
use crate::partition::WriterConfig;
use crate::security::{Grant, tenant_prefixes};
use crate::store::QueueSettings;

/// What every queue of a node is opened with.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// How this node names itself to others (its listening address).
    pub node: String,
    /// The region written into the partitions this node takes: only nodes
    /// of that region take them next, fenced by its Paxos. This node's
    /// `cluster.region` under manual failover; empty (any region: the fence
    /// is global) under automatic failover.
    pub fence_region: String,
    /// The home of queues created without one (see
    /// [`crate::cluster::ClusterConfig::home_of_new_queues`]).
    pub default_home: String,
    /// How each partition buffers, persists and collects; its task policy is
    /// set per queue (see [`Settings::engine_for`]).
    pub engine: EngineConfig,
    /// Group commit of each partition's writes.
    pub writer: WriterConfig,
    /// Polls, sync match and the partition count of new queues.
    pub matcher: MatcherConfig,
    /// The default task policy, and the queues that override it.
    pub tasks: TaskPolicy,
    /// The task policies of the queues that override `tasks`, by queue name.
    pub queues: BTreeMap<String, TaskPolicy>,
    /// Defaults of the queues named by a prefix and at least one more
    /// character (say, the visit scheduler's `visits.`), ahead of `tasks`;
    /// the first prefix that matches wins.
    pub prefixed: Vec<(String, TaskPolicy)>,
    /// The tenant-bound grants (`fairness_prefix`) of the principals: on the
    /// queues they cover, each prefix's keys share one fair share.
    pub tenant_grants: Vec<Grant>,
    /// Where dispatch latencies also go when metrics are pushed over OTLP.
    pub dispatch_latency_otlp: Option<opentelemetry::metrics::Histogram<f64>>,
}

impl Settings {
    /// The engine config of `queue`'s partitions: the node's, with the
    /// queue's task policy (its own section, else the default of its
    /// prefix, else `[tasks]`) and the settings `stored` with the queue over
    /// it, and the prefixes of the tenants granted adds to it among its
    /// fairness groups.
    pub fn engine_for(&self, queue: &QueueName, stored: &QueueSettings) -> EngineConfig {
        let name = queue.as_str();
        let by_prefix = self
            .prefixed
            .iter()
            .find(|(prefix, _)| name.strip_prefix(prefix.as_str()).is_some_and(|rest| !rest.is_empty()))
            .map(|(_, policy)| policy);
        let tasks = stored.policy_over(self.queues.get(name).or(by_prefix).unwrap_or(&self.tasks));
        let mut engine =
            EngineConfig { tasks, weights: stored.weights_over(&self.engine.weights), ..self.engine.clone() };
        engine.weights.groups.extend(tenant_prefixes(&self.tenant_grants, name));
        engine.weights.groups.sort();
        engine.weights.groups.dedup();
        engine
    }

    /// The keys (or the whole queue) the settings `stored` with a queue pause.
    pub fn pauses(stored: &QueueSettings) -> Pauses {
        Pauses::new(stored.paused, stored.paused_keys.iter().cloned())
    }
}
