//! Section `[scheduler]`: the origin-visit scheduler's settings.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::core::visits::{Cooldowns, Policy, Sharing};
use crate::model::ValidationError;

/// What a visit task's fairness key is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FairnessKeyOf {
    /// The lister instance (`gitlab/framagit`): one forge, one key.
    #[default]
    Lister,
    /// The origin URL's host: for listers that list origins on many hosts.
    Host,
}

/// When origins without an update date (policy
/// `origins_without_last_update`) may be visited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlindVisits {
    /// Once their next position, on a clock that follows real time, has
    /// come: an origin that keeps not changing is visited ever more rarely,
    /// and spare capacity is not spent on it.
    #[default]
    WhenDue,
    /// In the order of their position on the visit type's own clock, which
    /// moves only as they are scheduled (the reference scheduler's way):
    /// there is always one to visit.
    QueueClock,
}

/// What the policies of a visit type are when the configuration does not say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RoundMode {
    /// `expected_value` alone for recurring visit types: rounds take the
    /// origins whose visits are expected to find the most changes per
    /// loader-second.
    #[default]
    ExpectedValue,
    /// The reference scheduler's weights ([`default_policies`]).
    ReferenceWeights,
}

/// The origin-visit scheduler (section `[scheduler]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerConfig {
    /// Whether this node may run scheduling rounds: it runs those of a
    /// visit type while it holds that type's lease (`rounds_lease`), so one
    /// node at a time does, and another takes over when it dies; leave it
    /// on every node. The service (recording origins and outcomes) runs on
    /// every node.
    pub rounds: bool,
    /// Time between rounds of a visit type while they send visits.
    #[serde(with = "crate::clock::duration_serde")]
    pub round_interval: Duration,
    /// Time between rounds of a visit type after one sent nothing.
    #[serde(with = "crate::clock::duration_serde")]
    pub idle_interval: Duration,
    /// Visits kept waiting in each `visits.<type>` queue: a round fills
    /// the queue's backlog up to this.
    pub queue_length: u64,
    /// How a round shares its slots: `fair` (by policy weight, then equally
    /// among listers, unfilled shares redistributed) or `policy_weights`
    /// (the reference scheduler's way).
    pub sharing: Sharing,
    /// When origins without an update date are visited: `when_due` or
    /// `queue_clock` (policy `origins_without_last_update`).
    pub blind_visits: BlindVisits,
    /// What the policies of a visit type with no `[scheduler.policies.<type>]`
    /// table are: `expected_value` (one policy, by the chance that a visit
    /// finds something new) or `reference_weights` (the reference
    /// scheduler's weighted policies, see [`default_policies`]).
    pub mode: RoundMode,
    /// Visits of one fairness key a round lets wait in the queue, in
    /// multiples of `key_concurrency` (0: no bound): the rest of the queue
    /// is left to keys that can run visits now.
    pub queued_per_key: u32,
    /// The change rate (changes per day) taken for an origin of a lister
    /// whose origins have no estimate yet.
    pub prior_rate: f64,
    /// While fewer than a tenth of `queue_length` visits wait and no origin
    /// is due, origins not due yet whose chance of holding something new is
    /// at least this are sent (1: none are).
    pub spare_chance: f64,
    /// The chance of a change, for a visit of 100 s, at which an origin is
    /// due in `expected_value` rounds while loaders have room (its worth:
    /// the same changes expected per loader-second); higher sends fewer,
    /// surer visits.
    pub due_chance: f64,
    /// The same while due visits fill every free slot: the threshold moves
    /// between the two round by round (see [`crate::core::visits::threshold`]).
    pub due_chance_busy: f64,
    /// Priority of those visits.
    pub spare_priority: u32,
    /// The fairness key of visit tasks: `lister` or `host`.
    pub fairness_key: FairnessKeyOf,
    /// Politeness: visits of one fairness key (a lister's forge, or a host)
    /// in progress at once, for `visits.*` queues without a
    /// `[queues."visits.<type>"]` section of their own (0: no limit).
    pub key_concurrency: u32,
    /// Priority of recurrent visits (1 is the highest).
    pub priority: u32,
    /// Priority of the visits `first_visits_after_listing` chooses.
    pub first_visits_priority: u32,
    /// Priority of "save code now" requests.
    pub save_code_now_priority: u32,
    /// The waits before an origin is scheduled again (section
    /// `[scheduler.cooldowns]`).
    pub cooldowns: Cooldowns,
    /// Policy weights per visit type, e.g. `[scheduler.policies.git]
    /// never_visited_oldest_update_first = 49`. A visit type not listed
    /// takes the defaults of [`default_policies`].
    pub policies: BTreeMap<String, BTreeMap<Policy, f64>>,
    /// The URL schemes of the origins the scheduler records (loader workers
    /// fetch them).
    pub origin_schemes: Vec<String>,
    /// Per lister, the hosts its origins may be on: names, or `*.suffix`
    /// for the hosts under a domain; a lister not listed may record any host.
    pub origin_hosts: BTreeMap<String, Vec<String>>,
    /// How long a node's hold on the rounds of a visit type lasts unless it
    /// renews it (every third of it): the lease `rounds/<visit type>` in the
    /// store. A node runs a visit type's rounds only while it holds that
    /// lease with a third of this left; another node takes the lease over
    /// within about this plus a third of it after the holder dies.
    #[serde(with = "crate::clock::duration_serde")]
    pub rounds_lease: Duration,
    /// The region (`cluster.region`) whose nodes alone may hold the rounds'
    /// leases; none: any node with `rounds = true`.
    pub rounds_region: Option<String>,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            rounds: true,
            round_interval: Duration::from_secs(10),
            idle_interval: Duration::from_secs(60),
            queue_length: 1000,
            sharing: Sharing::Fair,
            blind_visits: BlindVisits::WhenDue,
            mode: RoundMode::ExpectedValue,
            queued_per_key: 3,
            prior_rate: crate::core::visits::value::DEFAULT_RATE,
            spare_chance: 0.7,
            due_chance: 0.75,
            due_chance_busy: 0.95,
            spare_priority: 4,
            fairness_key: FairnessKeyOf::Lister,
            key_concurrency: 10,
            priority: 3,
            first_visits_priority: 2,
            save_code_now_priority: 1,
            cooldowns: Cooldowns::default(),
            policies: BTreeMap::new(),
            origin_schemes: super::origin_url::default_schemes(),
            origin_hosts: BTreeMap::new(),
            rounds_lease: Duration::from_secs(6),
            rounds_region: None,
        }
    }
}

/// The shortest `rounds_lease`: renewed every third of it, it must outlast
/// a store's round trip several times over.
pub const MIN_ROUNDS_LEASE: Duration = Duration::from_secs(1);

/// The reference scheduler's weights (in the order of [`Policy`], as a
/// configured table is): one-shot visit types stop after a
/// success; version-control types weigh lag and first visits 49 each and
/// origins without an update date 2; other types 40 / 40 / 20.
pub fn default_policies(visit_type: &str) -> Vec<(Policy, f64)> {
    match visit_type {
        "content" | "tarball-directory" | "git-checkout" | "hg-checkout" | "svn-export" => {
            vec![(Policy::StopAfterSuccess, 100.0)]
        }
        "git" | "hg" | "svn" | "cvs" | "bzr" => vec![
            (Policy::NeverVisitedOldestUpdateFirst, 49.0),
            (Policy::AlreadyVisitedOrderByLag, 49.0),
            (Policy::OriginsWithoutLastUpdate, 2.0),
        ],
        _ => vec![
            (Policy::NeverVisitedOldestUpdateFirst, 40.0),
            (Policy::AlreadyVisitedOrderByLag, 40.0),
            (Policy::OriginsWithoutLastUpdate, 20.0),
        ],
    }
}

impl SchedulerConfig {
    /// The policies and weights of a visit type (weights above zero only).
    pub fn policies_for(&self, visit_type: &str) -> Vec<(Policy, f64)> {
        match self.policies.get(visit_type) {
            Some(weights) => weights.iter().filter(|(_, w)| **w > 0.0).map(|(p, w)| (*p, *w)).collect(),
            None => {
                let reference = default_policies(visit_type);
                let one_shot = reference.iter().any(|(p, _)| *p == Policy::StopAfterSuccess);
                match self.mode {
                    RoundMode::ExpectedValue if !one_shot => vec![(Policy::ExpectedValue, 100.0)],
                    _ => reference,
                }
            }
        }
    }

    /// The most visits of one fairness key a round lets wait in the queue
    /// (`None`: no bound).
    pub fn queued_key_limit(&self) -> Option<u64> {
        (self.queued_per_key > 0 && self.key_concurrency > 0)
            .then(|| u64::from(self.queued_per_key) * u64::from(self.key_concurrency))
    }

    /// Checks the settings; the error names the key.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let fail = |key: &str, message: String| Err(ValidationError::new(format!("scheduler.{key}"), message));
        if self.queue_length == 0 || self.queue_length > 1_000_000 {
            return fail("queue_length", format!("is {}; it must be 1 to 1000000", self.queue_length));
        }
        let scheme_ok =
            |s: &String| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"+.-".contains(&b));
        if self.origin_schemes.is_empty() || !self.origin_schemes.iter().all(scheme_ok) {
            return fail(
                "origin_schemes",
                format!("is {:?}; it must name URL schemes, one at least", self.origin_schemes),
            );
        }
        for (lister, hosts) in &self.origin_hosts {
            if hosts.iter().any(|h| h.is_empty() || h.contains(['/', ':', ' '])) {
                return fail(
                    &format!("origin_hosts.{lister:?}"),
                    format!("is {hosts:?}; each must be a host or *.domain"),
                );
            }
        }
        if !(self.prior_rate.is_finite() && (1e-5..=100.0).contains(&self.prior_rate)) {
            return fail("prior_rate", format!("is {}; it must be 0.00001 to 100 changes per day", self.prior_rate));
        }
        if !(self.due_chance.is_finite() && self.due_chance > 0.0 && self.due_chance < 1.0) {
            return fail("due_chance", format!("is {}; it must be above 0 and below 1", self.due_chance));
        }
        if !(self.due_chance_busy.is_finite() && self.due_chance_busy >= self.due_chance && self.due_chance_busy < 1.0)
        {
            return fail(
                "due_chance_busy",
                format!(
                    "is {}; it must be at least due_chance ({}) and below 1",
                    self.due_chance_busy, self.due_chance
                ),
            );
        }
        if !(self.spare_chance.is_finite() && (0.0..=1.0).contains(&self.spare_chance)) {
            return fail("spare_chance", format!("is {}; it must be 0 to 1", self.spare_chance));
        }
        if self.queued_per_key > 1000 {
            return fail("queued_per_key", format!("is {}; it must be 0 to 1000", self.queued_per_key));
        }
        if self.round_interval.is_zero() || self.idle_interval.is_zero() {
            return fail("round_interval", "round_interval and idle_interval must be above zero".into());
        }
        for (key, value) in [
            ("priority", self.priority),
            ("first_visits_priority", self.first_visits_priority),
            ("save_code_now_priority", self.save_code_now_priority),
            ("spare_priority", self.spare_priority),
        ] {
            if crate::model::Priority::new(value).is_none() {
                return fail(key, format!("is {value}; it must be 1 to {}", crate::model::PRIORITY_LEVELS));
            }
        }
        for (visit_type, weights) in &self.policies {
            if let Err(e) = crate::model::validate::queue_name("visit type", &format!("visits.{visit_type}")) {
                return fail(&format!("policies.{visit_type}"), e.to_string());
            }
            for (policy, weight) in weights {
                if !weight.is_finite() || *weight < 0.0 {
                    return fail(
                        &format!("policies.{visit_type}.{}", policy.name()),
                        format!("is {weight}; it must be 0 or more"),
                    );
                }
            }
            if weights.values().all(|w| *w == 0.0) {
                return fail(
                    &format!("policies.{visit_type}"),
                    "every weight is 0: the visit type would never be scheduled".into(),
                );
            }
        }
        if self.rounds_lease < MIN_ROUNDS_LEASE || self.rounds_lease > crate::store::leases::MAX_TTL {
            return fail(
                "rounds_lease",
                format!(
                    "is {:?}; it must be {MIN_ROUNDS_LEASE:?} to {:?}",
                    self.rounds_lease,
                    crate::store::leases::MAX_TTL
                ),
            );
        }
        if let Some(region) = &self.rounds_region {
            if region.is_empty() {
                return fail("rounds_region", "is empty; name a region, or leave it out for any".into());
            }
            crate::model::validate::region("scheduler.rounds_region", region)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `[scheduler]` example of docs/scheduler.md parses, and a bad
    /// weight is named.
    #[test]
    fn the_documented_section_parses_and_bad_weights_are_named() {
        let docs = include_str!("../../docs/scheduler.md");
        let start = docs.find("```toml\n[scheduler]").expect("the example") + "```toml\n".len();
        let example = &docs[start..start + docs[start..].find("```").unwrap()];
        #[derive(Deserialize)]
        struct Section {
            scheduler: SchedulerConfig,
        }
        let parsed: Section = toml::from_str(example).expect("the documented example parses");
        assert_eq!(parsed.scheduler.cooldowns, Cooldowns::default());
        assert_eq!(parsed.scheduler.origin_schemes, super::super::origin_url::default_schemes());
        assert_eq!(parsed.scheduler.origin_hosts["save-code-now"], ["github.com", "*.gitlab.io"]);
        assert_eq!(parsed.scheduler.policies_for("git"), default_policies("git"));
        assert!(parsed.scheduler.validate().is_ok());
        let mut bad = parsed.scheduler;
        bad.policies.insert("hg".into(), BTreeMap::from([(Policy::StopAfterSuccess, -1.0)]));
        let ValidationError { field: key, message } = bad.validate().unwrap_err();
        assert_eq!(key, "scheduler.policies.hg.stop_after_success");
        assert!(message.contains("-1"), "{message}");
    }

    /// The rounds' lease settings: the default is 6 s and any region; a
    /// lease out of bounds or an empty or bad region is refused, naming the
    /// field and the limit.
    #[test]
    fn rounds_lease_settings_are_checked() {
        let config = SchedulerConfig::default();
        assert_eq!((config.rounds_lease, config.rounds_region.as_deref()), (Duration::from_secs(6), None));
        let parsed: SchedulerConfig = toml::from_str("rounds_lease = \"9s\"\nrounds_region = \"eu-west\"").unwrap();
        assert_eq!((parsed.rounds_lease, parsed.rounds_region.as_deref()), (Duration::from_secs(9), Some("eu-west")));
        assert!(parsed.validate().is_ok());
        let refused = |config: SchedulerConfig, field: &str, needle: &str| {
            let ValidationError { field: key, message } = config.validate().unwrap_err();
            assert_eq!(key, field);
            assert!(message.contains(needle), "{message}");
        };
        let lease = |ms: u64| SchedulerConfig { rounds_lease: Duration::from_millis(ms), ..SchedulerConfig::default() };
        refused(lease(999), "scheduler.rounds_lease", "1s to 3600s");
        refused(lease(3_600_001), "scheduler.rounds_lease", "1s to 3600s");
        assert!(lease(1_000).validate().is_ok());
        let region = |r: &str| SchedulerConfig { rounds_region: Some(r.into()), ..SchedulerConfig::default() };
        refused(region(""), "scheduler.rounds_region", "leave it out");
        refused(region("eu west"), "scheduler.rounds_region", "48");
    }
}
