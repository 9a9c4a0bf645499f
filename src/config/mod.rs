//! Configuration, in layers: built-in defaults, then a TOML file, then
//! `FAIRWAY_*` environment variables, then command-line flags. The result is
//! validated as a whole; every error names the key at fault.
//!
//! Environment variables name keys with `__` between sections:
//! `FAIRWAY_LISTEN`, `FAIRWAY_STORE`, `FAIRWAY_ENGINE__BUFFER_TASKS`,
//! `FAIRWAY_MATCHER__DEFAULT_POLL_WAIT=10s`.

mod store_url;

/// Durations as human strings (kept in [`crate::clock`], below every
/// section that has one).
use crate::clock::duration_serde;

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use store_url::StoreUrl;

use crate::cluster::{ClusterConfig, Failover};
use crate::console::ConsoleConfig;
use crate::core::engine::{EngineConfig, TaskPolicy};
use crate::matcher::{MatcherConfig, Settings};
use crate::model::validate::{self, Limits, ValidationError};
use crate::partition::WriterConfig;
use crate::schedules::SchedulesConfig;
use crate::security::SecurityConfig;
use crate::store::cassandra::CassandraConfig;
use crate::store::embedded::EmbeddedConfig;
use crate::telemetry::TelemetryConfig;
use crate::visits::SchedulerConfig;

/// The longest `shutdown_grace`.
const MAX_SHUTDOWN_GRACE: Duration = Duration::from_secs(600);

/// Sections renamed, old name first: a file, variable or flag may still use
/// the old name (not both names at once).
const RENAMED_SECTIONS: &[(&str, &str)] = &[("partition", "engine")];

/// The current name of a section.
fn current_section(name: String) -> String {
    match RENAMED_SECTIONS.iter().find(|(old, _)| *old == name) {
        Some((_, new)) => (*new).to_owned(),
        None => name,
    }
}

/// Environment variables of the CLI itself, not config keys.
const NOT_CONFIG_KEYS: &[&str] = &[
    "FAIRWAY_CONFIG",
    "FAIRWAY_SERVER",
    "FAIRWAY_LOG",
    "FAIRWAY_TLS_CA",
    "FAIRWAY_TLS_CERT",
    "FAIRWAY_TLS_KEY",
    "FAIRWAY_TOKEN",
];

/// A node's whole configuration: the defaults, the file, the environment and
/// the flags, merged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Where the gRPC server listens.
    pub listen: SocketAddr,
    /// `embedded:DIR` or `cassandra://HOST:PORT/KEYSPACE`.
    pub store: String,
    /// At shutdown, how long requests in flight may take to finish before
    /// their connections are closed and the node goes on to hand its
    /// partitions over (a client that never finishes a request must not
    /// hold a shutdown). At most 10 min.
    #[serde(with = "duration_serde")]
    pub shutdown_grace: Duration,
    /// Bounds on outside input (section `[limits]`).
    pub limits: Limits,
    /// How each partition's engine buffers, persists and collects (section
    /// `[engine]`; `[partition]`, its name before, is read as it).
    #[serde(alias = "partition")]
    pub engine: EngineConfig,
    /// Group commit of each partition's writes (section `[writer]`).
    pub writer: WriterConfig,
    /// Polls, sync match and partitions per queue (section `[matcher]`).
    pub matcher: MatcherConfig,
    /// Used when `store` is an `embedded:` URL.
    pub embedded: EmbeddedConfig,
    /// Used when `store` is a `cassandra://` URL.
    pub cassandra: CassandraConfig,
    /// Used when several nodes share the store.
    pub cluster: ClusterConfig,
    /// How queues treat dispatched tasks: leases, retries, per-key limits.
    pub tasks: TaskPolicy,
    /// Per-queue overrides of `tasks`, by queue name (every node should
    /// have the same). A queue's section replaces `[tasks]` as a whole:
    /// unset keys take the built-in defaults.
    pub queues: BTreeMap<String, TaskPolicy>,
    /// Metrics and traces: where to serve and push them (off by default).
    pub telemetry: TelemetryConfig,
    /// The origin-visit scheduler.
    pub scheduler: SchedulerConfig,
    /// Recurring schedules: how this node fires them.
    pub schedules: SchedulesConfig,
    /// TLS on the gRPC port.
    pub security: SecurityConfig,
    /// The web console (section `[console]`).
    pub console: ConsoleConfig,
    /// `FAIRWAY_*` variables of the environment that name no config key
    /// (Kubernetes sets `FAIRWAY_SERVICE_HOST`, `FAIRWAY_PORT`, … for a
    /// Service named `fairway`; scripts may set their own): ignored, for the
    /// server to warn of. A variable that names a section but a key it does
    /// not have is an error, as a typo.
    #[serde(skip)]
    pub ignored_env: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 7070)),
            store: "embedded:./fairway-data".to_owned(),
            shutdown_grace: Duration::from_secs(10),
            limits: Limits::default(),
            engine: EngineConfig::default(),
            writer: WriterConfig::default(),
            matcher: MatcherConfig::default(),
            embedded: EmbeddedConfig::default(),
            cassandra: CassandraConfig::default(),
            cluster: ClusterConfig::default(),
            tasks: TaskPolicy::default(),
            queues: BTreeMap::new(),
            telemetry: TelemetryConfig::default(),
            scheduler: SchedulerConfig::default(),
            schedules: SchedulesConfig::default(),
            security: SecurityConfig::default(),
            console: ConsoleConfig::default(),
            ignored_env: Vec::new(),
        }
    }
}

/// A configuration that cannot be used, and the key to blame.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("config {key}: {message}")]
pub struct ConfigError {
    /// The key at fault, dotted (`engine.buffer_tasks`), or the file or
    /// variable that could not be used.
    pub key: String,
    /// What is wrong with it.
    pub message: String,
}

impl From<ValidationError> for ConfigError {
    fn from(error: ValidationError) -> Self {
        ConfigError::new(error.field, error.message)
    }
}

impl ConfigError {
    pub(crate) fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError { key: key.into(), message: message.into() }
    }
}

impl Config {
    /// Layers `file`, then the `FAIRWAY_*` entries of `env`, then the
    /// `(key, value)` flag overrides, over the defaults; then validates.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        flags: &[(&str, String)],
    ) -> Result<Config, ConfigError> {
        let mut tree = toml::Value::try_from(Config::default()).expect("defaults serialize");
        if let Some(path) = file {
            let key = format!("file {}", path.display());
            let text = std::fs::read_to_string(path).map_err(|e| ConfigError::new(&key, e.to_string()))?;
            // Deserializing the file alone gives errors with its line and key.
            toml::from_str::<Config>(&text).map_err(|e| ConfigError::new(&key, e.to_string()))?;
            let table: toml::Table = toml::from_str(&text).map_err(|e| ConfigError::new(&key, e.to_string()))?;
            let table = table.into_iter().map(|(name, value)| (current_section(name), value)).collect();
            merge(&mut tree, toml::Value::Table(table));
        }
        let mut env: Vec<(String, String)> = env
            .into_iter()
            .filter(|(name, _)| name.starts_with("FAIRWAY_") && !NOT_CONFIG_KEYS.contains(&name.as_str()))
            .collect();
        env.sort();
        let mut ignored_env = Vec::new();
        // Which variable or flag set each key, to name it if its value is refused.
        let mut set_by: HashMap<String, String> = HashMap::new();
        for (name, raw) in env {
            let mut path: Vec<String> =
                name["FAIRWAY_".len()..].split("__").map(|part| part.to_ascii_lowercase()).collect();
            path[0] = current_section(std::mem::take(&mut path[0]));
            if tree.get(&path[0]).is_none() {
                ignored_env.push(name);
                continue;
            }
            set(&mut tree, &path, env_value(&raw)).map_err(|message| ConfigError::new(&name, message))?;
            set_by.insert(path.join("."), name);
        }
        for (key, raw) in flags {
            let mut path: Vec<String> = key.split('.').map(str::to_owned).collect();
            path[0] = current_section(std::mem::take(&mut path[0]));
            set(&mut tree, &path, toml::Value::String(raw.clone()))
                .map_err(|message| ConfigError::new(*key, message))?;
            set_by.insert(path.join("."), (*key).to_owned());
        }
        let mut config: Config = serde_path_to_error::deserialize(tree).map_err(|e| {
            let key = e.path().to_string();
            let message = format!("{key}: {}", e.inner().message());
            ConfigError::new(set_by.remove(&key).unwrap_or(key), message)
        })?;
        config.validate()?;
        config.ignored_env = ignored_env;
        Ok(config)
    }

    /// Checks every rule that a value's type does not already enforce.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.store_url()?;
        if self.shutdown_grace > MAX_SHUTDOWN_GRACE {
            return Err(ConfigError::new(
                "shutdown_grace",
                format!("is {:?}; it must be at most {MAX_SHUTDOWN_GRACE:?}", self.shutdown_grace),
            ));
        }
        self.limits.validate()?;
        self.engine.validate()?;
        self.writer.validate()?;
        self.matcher.validate()?;
        self.embedded.validate()?;
        self.cassandra.validate()?;
        self.cluster.validate()?;
        self.tasks.validate("tasks")?;
        for (name, policy) in &self.queues {
            let section = format!("queues.{name:?}");
            validate::queue_name(&section, name)?;
            policy.validate(&section)?;
        }
        self.telemetry.validate(self.listen)?;
        self.console.address(self.listen, &self.security)?;
        self.scheduler.validate()?;
        self.schedules.validate()?;
        self.security.validate()?;
        self.validate_across_sections()
    }

    /// The rules that tie one section to another.
    fn validate_across_sections(&self) -> Result<(), ConfigError> {
        let smallest_write = 4 * self.limits.max_payload_bytes.max(64 * 1024);
        if self.writer.max_write_bytes < smallest_write {
            return Err(ConfigError::new(
                "writer.max_write_bytes",
                format!(
                    "is {}; it must be at least {smallest_write} (4 × limits.max_payload_bytes, and 256 KiB), so that \
                     a task always fits in a write beside the work it carries",
                    self.writer.max_write_bytes
                ),
            ));
        }
        if self.matcher.default_poll_wait > self.limits.max_poll_wait {
            return Err(ConfigError::new("matcher.default_poll_wait", "must not exceed limits.max_poll_wait"));
        }
        self.validate_node_name()?;
        self.validate_regions()
    }

    /// On a shared store a node's name (`cluster.advertise`, else `listen`)
    /// is the address the other nodes reach it at, and tells it apart from
    /// them: an unspecified address (`0.0.0.0`, `[::]`) is neither.
    fn validate_node_name(&self) -> Result<(), ConfigError> {
        if !matches!(self.store_url()?, StoreUrl::Cassandra { .. }) {
            return Ok(());
        }
        let (name, is) = match self.cluster.advertise.as_str() {
            "" => (self.listen.to_string(), "is empty, so this node is named after `listen`,"),
            advertised => (advertised.to_owned(), "is"),
        };
        let host = name.rsplit_once(':').map_or(name.as_str(), |(host, _)| host);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.parse::<IpAddr>().is_ok_and(|ip| ip.is_unspecified()) {
            return Err(ConfigError::new(
                "cluster.advertise",
                format!(
                    "{is} {name}: no node can reach another there, and every node listening on {host} would bear \
                     the same name (each taking the others' partitions); set cluster.advertise to the HOST:PORT \
                     the other nodes reach this one at"
                ),
            ));
        }
        Ok(())
    }

    /// The levels a multi-region deployment may use. `LOCAL_QUORUM` needs a
    /// driver kept to one datacenter (`cassandra.local_datacenter`, or the
    /// region's). A fence at `LOCAL_SERIAL` is one region's Paxos: sound
    /// only when every owner of a partition is in that region, so it needs
    /// a named region, a driver kept to its datacenter, and manual failover.
    /// Automatic failover hands partitions to other regions' nodes on its
    /// own, so its fence and writes must be global (`SERIAL`, `QUORUM`).
    fn validate_regions(&self) -> Result<(), ConfigError> {
        use scylla::statement::{Consistency, SerialConsistency};
        let cassandra = self.cassandra.in_region(&self.cluster.region);
        cassandra.consistency().map_err(|message| ConfigError::new("cassandra.consistency", message))?;
        let serial = cassandra
            .serial_consistency()
            .map_err(|message| ConfigError::new("cassandra.serial_consistency", message))?;
        let local_fence = serial == SerialConsistency::LocalSerial;
        if local_fence && self.cluster.region.is_empty() {
            return Err(ConfigError::new(
                "cassandra.serial_consistency",
                "LOCAL_SERIAL needs cluster.region: the region whose nodes alone own the queues homed there",
            ));
        }
        if self.cluster.failover == Failover::Automatic {
            if self.cluster.region.is_empty() {
                return Err(ConfigError::new("cluster.failover", "\"automatic\" needs cluster.region"));
            }
            let local_writes = matches!(cassandra.consistency(), Ok(Consistency::LocalQuorum));
            if local_fence || local_writes {
                return Err(ConfigError::new(
                    "cluster.failover",
                    "\"automatic\" needs cassandra.serial_consistency = \"SERIAL\" and cassandra.consistency = \
                     \"QUORUM\": a region cut off from the others must not fence or acknowledge on its own, or \
                     the regions that take its queues over would miss what it acknowledged",
                ));
            }
        }
        Ok(())
    }

    /// The store named by `store`, parsed; the error names the key `store`.
    pub fn store_url(&self) -> Result<StoreUrl, ConfigError> {
        self.store.parse().map_err(|message| ConfigError::new("store", message))
    }

    /// What every queue of this node is opened with, from these sections
    /// (`visits.*` queues get `scheduler.key_concurrency`).
    pub fn settings(&self) -> Settings {
        Settings {
            node: self.listen.to_string(),
            fence_region: match self.cluster.failover {
                Failover::Manual => self.cluster.region.clone(),
                Failover::Automatic => String::new(),
            },
            default_home: self.cluster.home_of_new_queues().to_owned(),
            engine: self.engine.clone(),
            writer: self.writer.clone(),
            matcher: self.matcher.clone(),
            tasks: self.tasks.clone(),
            queues: self.queues.clone(),
            prefixed: vec![(
                crate::visits::QUEUE_PREFIX.to_owned(),
                TaskPolicy { key_concurrency: self.scheduler.key_concurrency, ..self.tasks.clone() },
            )],
            tenant_grants: self
                .security
                .principals
                .iter()
                .flat_map(|p| &p.grants)
                .filter(|g| g.fairness_prefix.is_some())
                .cloned()
                .collect(),
            dispatch_latency_otlp: None,
        }
    }
}

/// An environment value as TOML (numbers, booleans), else as a string.
fn env_value(raw: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_owned()))
}

fn merge(base: &mut toml::Value, over: toml::Value) {
    match (base, over) {
        (toml::Value::Table(base), toml::Value::Table(over)) => {
            for (key, value) in over {
                match base.get_mut(&key) {
                    Some(existing) => merge(existing, value),
                    None => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (base, over) => *base = over,
    }
}

/// Sets a key that the defaults have (or an entry of a map such as
/// `engine.weights.keys`).
fn set(tree: &mut toml::Value, path: &[String], value: toml::Value) -> Result<(), String> {
    let dotted = path.join(".");
    let (last, parents) = path.split_last().ok_or("empty key")?;
    let mut node = tree;
    for part in parents {
        node = node.get_mut(part).filter(|n| n.is_table()).ok_or_else(|| format!("there is no config key {dotted}"))?;
    }
    let table = node.as_table_mut().ok_or_else(|| format!("there is no config key {dotted}"))?;
    let is_map = parents.last().is_some_and(|p| p == "keys");
    if !table.contains_key(last) && !is_map {
        return Err(format!("there is no config key {dotted}"));
    }
    table.insert(last.clone(), value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn visit_queues_default_to_the_schedulers_politeness_unless_configured() {
        let limit = |config: &Config, queue: &str| {
            let queue = validate::queue_name("queue", queue).unwrap();
            config.settings().engine_for(&queue, &Default::default()).tasks.key_concurrency
        };
        let mut config = Config::default();
        assert_eq!((limit(&config, "visits.git"), limit(&config, "jobs")), (10, 0));
        assert_eq!(limit(&config, "visits."), 0, "the prefix alone names no visit type");
        config.queues.insert("visits.git".into(), TaskPolicy { key_concurrency: 3, ..TaskPolicy::default() });
        config.scheduler.key_concurrency = 7;
        assert_eq!((limit(&config, "visits.git"), limit(&config, "visits.hg")), (3, 7));
    }

    #[test]
    fn layers_apply_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("fairway.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.1:9000\"\n[engine]\nbuffer_tasks = 500\n[matcher]\ndefault_poll_wait = \"10s\"\n",
        )
        .unwrap();
        let config = Config::load(
            Some(&file),
            env(&[("FAIRWAY_ENGINE__BUFFER_TASKS", "400"), ("FAIRWAY_LISTEN", "127.0.0.1:9001"), ("HOME", "/x")]),
            &[("listen", "127.0.0.1:9002".into())],
        )
        .unwrap();
        assert_eq!(config.engine.buffer_tasks, 400, "env beats file");
        assert_eq!(config.listen.port(), 9002, "flag beats env");
        assert_eq!(config.matcher.default_poll_wait, std::time::Duration::from_secs(10));
    }

    #[test]
    fn the_engine_section_is_still_read_under_its_old_name_but_not_under_both() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("old.toml");
        std::fs::write(&old, "[partition]\nbuffer_tasks = 500\ngc_min_acks = 7\n").unwrap();
        let config = Config::load(Some(&old), env(&[("FAIRWAY_PARTITION__BUFFER_TASKS", "400")]), &[]).unwrap();
        assert_eq!((config.engine.buffer_tasks, config.engine.gc_min_acks), (400, 7), "file and env");

        let both = dir.path().join("both.toml");
        std::fs::write(&both, "[partition]\nbuffer_tasks = 500\n[engine]\nbuffer_tasks = 600\n").unwrap();
        let err = Config::load(Some(&both), env(&[]), &[]).unwrap_err();
        assert!(err.message.contains("duplicate field `engine`"), "{err:?}");
    }

    #[test]
    fn consistency_levels_that_lose_tasks_or_split_owners_are_refused() {
        for (key, value) in [
            ("FAIRWAY_CASSANDRA__CONSISTENCY", "ONE"),
            ("FAIRWAY_CASSANDRA__CONSISTENCY", "two"),
            ("FAIRWAY_CASSANDRA__CONSISTENCY", "LOCAL_ONE"),
        ] {
            let err = Config::load(None, env(&[(key, value)]), &[]).unwrap_err();
            let field = key.trim_start_matches("FAIRWAY_").replace("__", ".").to_ascii_lowercase();
            assert_eq!(err.key, field, "{err}");
            assert!(err.message.contains("refused"), "{err}");
        }
        for level in ["QUORUM", "EACH_QUORUM", "ALL"] {
            Config::load(None, env(&[("FAIRWAY_CASSANDRA__CONSISTENCY", level)]), &[]).expect("a quorum level");
        }
    }

    /// A local level is a quorum of one datacenter only if the driver keeps
    /// to one: without one named, a read coordinated in another datacenter
    /// could miss what this one acknowledged.
    #[test]
    fn local_quorum_needs_a_local_datacenter() {
        let local_quorum = ("FAIRWAY_CASSANDRA__CONSISTENCY", "LOCAL_QUORUM");
        let err = Config::load(None, env(&[local_quorum]), &[]).unwrap_err();
        assert_eq!(err.key, "cassandra.consistency", "{err}");
        assert!(err.message.contains("needs cassandra.local_datacenter (or cluster.region)"), "{err}");
        let named = Config::load(None, env(&[local_quorum, ("FAIRWAY_CASSANDRA__LOCAL_DATACENTER", "dc1")]), &[]);
        assert_eq!(named.expect("a datacenter named").cassandra.local_datacenter, "dc1");
        Config::load(None, env(&[local_quorum, ("FAIRWAY_CLUSTER__REGION", "eu-west")]), &[])
            .expect("the region names the datacenter");
    }

    /// On a shared store a node's name is the address the others reach it
    /// at, and tells it apart from them: never 0.0.0.0 or [::].
    #[test]
    fn a_node_of_a_shared_store_is_not_named_by_an_unspecified_address() {
        let cassandra = ("FAIRWAY_STORE", "cassandra://127.0.0.1:9042/fairway");
        for vars in [
            vec![cassandra, ("FAIRWAY_LISTEN", "0.0.0.0:7070")],
            vec![cassandra, ("FAIRWAY_LISTEN", "[::]:7070")],
            vec![cassandra, ("FAIRWAY_CLUSTER__ADVERTISE", "0.0.0.0:7070")],
            vec![cassandra, ("FAIRWAY_LISTEN", "0.0.0.0:7070"), ("FAIRWAY_CLUSTER__ADVERTISE", "[::]:7070")],
        ] {
            let err = Config::load(None, env(&vars), &[]).unwrap_err();
            assert_eq!(err.key, "cluster.advertise", "{vars:?}: {err}");
            assert!(err.message.contains("set cluster.advertise"), "{vars:?}: {err}");
        }
        for vars in [
            vec![cassandra, ("FAIRWAY_LISTEN", "0.0.0.0:7070"), ("FAIRWAY_CLUSTER__ADVERTISE", "10.0.0.5:7070")],
            vec![cassandra, ("FAIRWAY_LISTEN", "0.0.0.0:7070"), ("FAIRWAY_CLUSTER__ADVERTISE", "fairway-0.nodes:7070")],
            vec![cassandra, ("FAIRWAY_LISTEN", "10.0.0.5:7070")],
            vec![("FAIRWAY_LISTEN", "0.0.0.0:7070")],
        ] {
            Config::load(None, env(&vars), &[]).unwrap_or_else(|err| panic!("{vars:?}: {err}"));
        }
    }

    /// `LOCAL_SERIAL` only where a queue's owners are all in one region;
    /// automatic failover only with global levels.
    #[test]
    fn region_levels_are_checked_across_sections() {
        let load = |vars: &[(&str, &str)]| Config::load(None, env(vars), &[]);
        let local_serial = ("FAIRWAY_CASSANDRA__SERIAL_CONSISTENCY", "LOCAL_SERIAL");
        let local_quorum = ("FAIRWAY_CASSANDRA__CONSISTENCY", "LOCAL_QUORUM");
        let region = ("FAIRWAY_CLUSTER__REGION", "eu-west");
        let automatic = ("FAIRWAY_CLUSTER__FAILOVER", "automatic");
        let refused = |vars: &[(&str, &str)], key: &str, says: &str| {
            let err = load(vars).unwrap_err();
            assert_eq!(err.key, key, "{vars:?}: {err}");
            assert!(err.message.contains(says), "{vars:?}: {err}");
        };
        refused(
            &[local_serial],
            "cassandra.serial_consistency",
            "needs cassandra.local_datacenter (or cluster.region)",
        );
        refused(
            &[local_serial, ("FAIRWAY_CASSANDRA__LOCAL_DATACENTER", "dc1")],
            "cassandra.serial_consistency",
            "LOCAL_SERIAL needs cluster.region",
        );
        let homed = load(&[local_serial, local_quorum, region]).expect("one region's fence for its own queues");
        assert_eq!(homed.settings().fence_region, "eu-west");
        assert_eq!(homed.settings().default_home, "eu-west");
        refused(&[automatic], "cluster.failover", "needs cluster.region");
        refused(&[automatic, region, local_serial], "cluster.failover", "SERIAL");
        refused(&[automatic, region, local_quorum], "cluster.failover", "QUORUM");
        let global = load(&[automatic, region]).expect("SERIAL and QUORUM fail over on their own");
        assert_eq!(global.settings().fence_region, "", "a global fence: any region may take a partition");
        refused(&[("FAIRWAY_CLUSTER__REGION", "eu west")], "cluster.region", "datacenter");
        let elsewhere = load(&[region, ("FAIRWAY_CLUSTER__DEFAULT_HOME", "us-east")]).unwrap();
        assert_eq!(elsewhere.settings().default_home, "us-east");
    }

    #[test]
    fn variables_that_name_no_section_are_ignored_and_named_but_typos_in_a_section_are_errors() {
        // What Kubernetes puts in every pod of a Service named `fairway`, and
        // a variable of the Cassandra script.
        let kubernetes = [
            ("FAIRWAY_SERVICE_HOST", "10.0.0.7"),
            ("FAIRWAY_SERVICE_PORT", "7070"),
            ("FAIRWAY_PORT", "tcp://10.0.0.7:7070"),
            ("FAIRWAY_PORT_7070_TCP_ADDR", "10.0.0.7"),
            ("FAIRWAY_CASSANDRA_HEAP", "2G"),
            ("FAIRWAY_LISTEN", "127.0.0.1:9001"),
        ];
        let config = Config::load(None, env(&kubernetes), &[]).unwrap();
        assert_eq!(config.listen.port(), 9001);
        assert_eq!(
            config.ignored_env,
            [
                "FAIRWAY_CASSANDRA_HEAP",
                "FAIRWAY_PORT",
                "FAIRWAY_PORT_7070_TCP_ADDR",
                "FAIRWAY_SERVICE_HOST",
                "FAIRWAY_SERVICE_PORT"
            ]
        );
        let err = Config::load(None, env(&[("FAIRWAY_MATCHER__SYNC_MACH", "true")]), &[]).unwrap_err();
        assert_eq!(err.key, "FAIRWAY_MATCHER__SYNC_MACH");
    }

    #[test]
    fn errors_name_the_key() {
        let err = Config::load(None, env(&[("FAIRWAY_ENGINE__BUFER", "1")]), &[]).unwrap_err();
        assert_eq!(err.key, "FAIRWAY_ENGINE__BUFER");
        assert!(err.message.contains("engine.bufer"), "{err}");

        let err = Config::load(None, env(&[("FAIRWAY_ENGINE__RELOAD_AT", "5000")]), &[]).unwrap_err();
        assert_eq!(err.key, "engine.reload_at");

        let err = Config::load(None, env(&[("FAIRWAY_STORE", "ftp://x")]), &[]).unwrap_err();
        assert_eq!(err.key, "store");

        let late = env(&[("FAIRWAY_CASSANDRA__SPECULATIVE_RETRY_AFTER", "12s")]);
        let err = Config::load(None, late, &[]).unwrap_err();
        assert_eq!(err.key, "cassandra.speculative_retry_after");
        assert!(err.message.contains("request_timeout"), "{err}");
        let never = env(&[("FAIRWAY_CASSANDRA__SPECULATIVE_RETRY_AFTER", "0s")]);
        assert!(Config::load(None, never, &[]).is_ok());

        // Each section checks itself and names the key in full.
        let err = Config::load(None, env(&[("FAIRWAY_TASKS__MAX_ATTEMPTS", "0")]), &[]).unwrap_err();
        assert_eq!(err.key, "tasks.max_attempts");
        let err = Config::load(None, env(&[("FAIRWAY_CLUSTER__MEMBER_TIMEOUT", "1s")]), &[]).unwrap_err();
        assert_eq!(err.key, "cluster.member_timeout");
        let err = Config::load(None, env(&[("FAIRWAY_SHUTDOWN_GRACE", "11m")]), &[]).unwrap_err();
        assert_eq!((err.key.as_str(), err.message.as_str()), ("shutdown_grace", "is 660s; it must be at most 600s"));
        for bad in ["0s", "301s"] {
            let err = Config::load(None, env(&[("FAIRWAY_CLUSTER__FORWARD_TIMEOUT", bad)]), &[]).unwrap_err();
            assert_eq!(err.key, "cluster.forward_timeout");
            assert!(err.message.contains("(0s, 300s]"), "{err}");
        }
        let err = Config::load(None, env(&[("FAIRWAY_MATCHER__QUIET_HOLD", "11s")]), &[]).unwrap_err();
        assert_eq!(err.key, "matcher.quiet_hold");
        assert!(Config::load(None, env(&[("FAIRWAY_MATCHER__QUIET_HOLD", "0s")]), &[]).is_ok(), "0 holds nothing");
        for bad in ["0", "100001"] {
            let err = Config::load(None, env(&[("FAIRWAY_MATCHER__MAX_HELD_TASKS", bad)]), &[]).unwrap_err();
            assert_eq!((err.key.as_str(), err.message.as_str()), ("matcher.max_held_tasks", "must be 1 to 100000"));
        }
        // A value of the wrong type names the variable that set it and the key.
        let err = Config::load(None, env(&[("FAIRWAY_SCHEDULES__CONCURRENT_FIRES", "many")]), &[]).unwrap_err();
        assert_eq!(err.key, "FAIRWAY_SCHEDULES__CONCURRENT_FIRES");
        assert!(err.message.starts_with("schedules.concurrent_fires: invalid type"), "{err}");
        let err = Config::load(None, env(&[("FAIRWAY_SCHEDULES__SCAN_INTERVAL", "soon")]), &[]).unwrap_err();
        assert_eq!(err.key, "FAIRWAY_SCHEDULES__SCAN_INTERVAL");
        assert!(err.message.starts_with("schedules.scan_interval: "), "{err}");
        for bad in ["0", "257"] {
            let err = Config::load(None, env(&[("FAIRWAY_SCHEDULES__CONCURRENT_FIRES", bad)]), &[]).unwrap_err();
            assert_eq!(
                (err.key.as_str(), err.message.as_str()),
                ("schedules.concurrent_fires", format!("is {bad}; it must be 1 to 256").as_str())
            );
        }
        let err = Config::load(None, env(&[("FAIRWAY_MATCHER__PARTITIONS_PER_QUEUE", "257")]), &[]).unwrap_err();
        assert_eq!(
            (err.key.as_str(), err.message.as_str()),
            ("matcher.partitions_per_queue", "is 257; it must be 1 to 256")
        );

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bad.toml");
        std::fs::write(&file, "[matcher]\npartitions_per_queue = \"many\"\n").unwrap();
        let err = Config::load(Some(&file), env(&[]), &[]).unwrap_err();
        assert!(err.to_string().contains("partitions_per_queue"), "{err}");
    }

    /// The example of the README is a valid config file.
    #[test]
    fn readme_example_parses() {
        let readme = include_str!("../../README.md");
        let start = readme.find("```toml\n").expect("a toml block") + "```toml\n".len();
        let end = start + readme[start..].find("```").expect("its end");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("readme.toml");
        std::fs::write(&file, &readme[start..end]).unwrap();
        let config = Config::load(Some(&file), env(&[]), &[]).unwrap();
        assert_eq!(config.engine.weights.keys["acme"], 3.0);
    }

    fn load_text(text: &str, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("fairway.toml");
        std::fs::write(&file, text).unwrap();
        Config::load(Some(&file), env(vars), &[])
    }

    /// The config files shipped in deploy/ are valid.
    #[test]
    fn deployment_configs_parse() {
        let systemd = load_text(include_str!("../../deploy/systemd/fairway.toml"), &[]).unwrap();
        assert_eq!(systemd.cluster.advertise, "10.0.0.5:7070");
        let manifest = include_str!("../../deploy/k8s/fairway.yaml");
        let start = manifest.find("fairway.toml: |").expect("the config map") + "fairway.toml: |\n".len();
        let block: String = manifest[start..]
            .lines()
            .take_while(|line| line.is_empty() || line.starts_with("    "))
            .map(|line| format!("{}\n", line.get(4..).unwrap_or("")))
            .collect();
        // Each pod names itself (the StatefulSet sets the variable from its name).
        let advertise = ("FAIRWAY_CLUSTER__ADVERTISE", "$(POD_NAME).fairway-nodes:7070");
        assert!(manifest.contains(&format!("- name: {}\n              value: \"{}\"", advertise.0, advertise.1)));
        let k8s = load_text(&block, &[(advertise.0, "fairway-0.fairway-nodes:7070")]).unwrap();
        assert_eq!(k8s.matcher.partitions_per_queue, 8);
        assert!(systemd.scheduler.rounds, "every node may run rounds: a lease elects one");
        for shipped in [&k8s, &systemd] {
            assert!(!shipped.listen.ip().is_loopback());
            assert!(shipped.security.tls_files().is_some(), "listening beyond loopback needs TLS");
            assert!(shipped.security.authenticates(), "and principals");
            assert!(!shipped.security.allow_insecure);
        }
        assert_eq!(manifest.matches("FAIRWAY_SCHEDULER__ROUNDS").count(), 1, "one StatefulSet runs rounds");
        assert_eq!(
            manifest.matches("kind: StatefulSet").count(),
            manifest.matches("enableServiceLinks: false").count()
        );
    }

    #[test]
    fn telemetry_keys_load_and_are_validated() {
        let config = Config::load(
            None,
            env(&[
                ("FAIRWAY_TELEMETRY__METRICS_LISTEN", "127.0.0.1:9464"),
                ("FAIRWAY_TELEMETRY__OTLP_ENDPOINT", "http://127.0.0.1:4317"),
                ("FAIRWAY_TELEMETRY__OTLP_EXPORT_INTERVAL", "30s"),
            ]),
            &[],
        )
        .unwrap();
        assert_eq!(config.telemetry.metrics_listen(), Ok(Some("127.0.0.1:9464".parse().unwrap())));
        assert_eq!(config.telemetry.otlp_export_interval, std::time::Duration::from_secs(30));

        let err = Config::load(None, env(&[]), &[("telemetry.metrics_listen", "9464".into())]).unwrap_err();
        assert_eq!(err.key, "telemetry.metrics_listen");
        assert!(err.to_string().contains("IP:PORT"), "{err}");
        let err = load_text("[telemetry]\notlp_endpoint = \"grpc://collector:4317\"\n", &[]).unwrap_err();
        assert_eq!(err.key, "telemetry.otlp_endpoint");
        let err = load_text("[telemetry]\notlp_export_interval = \"0s\"\n", &[]).unwrap_err();
        assert_eq!(err.key, "telemetry.otlp_export_interval");
        assert!(err.to_string().contains("[1s, 1h]"), "{err}");
    }

    #[test]
    fn weights_are_validated() {
        let err = Config::load(None, env(&[("FAIRWAY_ENGINE__WEIGHTS__KEYS__noisy", "5000")]), &[]).unwrap_err();
        assert!(err.key.contains("noisy"), "{err}");
        let ok = Config::load(None, env(&[("FAIRWAY_ENGINE__WEIGHTS__KEYS__quiet", "5")]), &[]).unwrap();
        assert_eq!(ok.engine.weights.keys["quiet"], 5.0);
    }
}
