//! The Fairway nodes of a chaos run: `fairway serve` processes on fixed
//! addresses (their names in the cluster), which the nemesis kills,
//! restarts, pauses and resumes. A node dies with the run that started it.
//! Nodes of the region scenarios run in their region's network namespace
//! (see [`Placement`]); the others on loopback.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command};

use anyhow::Context;

use fairway::test_util::spawn_server;

/// Cluster settings that make faults show within seconds.
pub(super) const NODE_ENV: &[(&str, &str)] = &[
    ("FAIRWAY_CLUSTER__HEARTBEAT_INTERVAL", "500ms"),
    ("FAIRWAY_CLUSTER__MEMBER_TIMEOUT", "3s"),
    ("FAIRWAY_CLUSTER__REBALANCE_INTERVAL", "500ms"),
    ("FAIRWAY_TASKS__BACKOFF_INITIAL", "100ms"),
    ("FAIRWAY_TASKS__BACKOFF_MAX", "1s"),
    ("FAIRWAY_TASKS__MAX_ATTEMPTS", "1000"),
    // Garbage collection always due: a deposed owner that wakes up deletes
    // at once, the moment fencing must make harmless.
    ("FAIRWAY_ENGINE__GC_INTERVAL", "1s"),
    ("FAIRWAY_ENGINE__GC_MIN_ACKS", "10"),
    // Ack levels persisted seldom (a setting users may choose): a deposed
    // owner's in-memory ack levels are far ahead of what the new owner reads.
    ("FAIRWAY_ENGINE__PIGGYBACK_INTERVAL", "5s"),
];

/// The member timeout of [`NODE_ENV`], in ms.
pub(super) const MEMBER_TIMEOUT_MS: u64 = 3_000;

/// How the nodes of a run are started.
#[derive(Clone, Debug)]
pub(super) struct Launch {
    /// The `fairway` binary the nodes run (this one, or a build under test).
    pub binary: PathBuf,
    pub store: String,
    pub lease_timeout: std::time::Duration,
    /// Run each node with a group id of its own (for network partitions).
    pub own_gids: bool,
}

/// Where a node of a region runs: in the network namespace of its region,
/// at an address of it, on the Cassandra node of its region, with the
/// region's settings.
#[derive(Clone, Debug)]
pub(super) struct Placement {
    /// The region (`cluster.region`, the Cassandra datacenter).
    pub region: String,
    /// The network namespace the node runs in (`fw-<region>`).
    pub netns: String,
    /// `IP:PORT`, an address of that namespace.
    pub listen: String,
    /// `cassandra://IP:9042/KEYSPACE`, the region's own Cassandra node.
    pub store: String,
    /// Settings beyond [`NODE_ENV`] (region, failover, consistency levels).
    pub env: Vec<(String, String)>,
}

pub(super) struct Node {
    pub addr: String,
    /// The group id the node runs with, when it has one of its own.
    pub gid: Option<u32>,
    /// Where a node of a region runs; `None` on loopback.
    pub placement: Option<Placement>,
    launch: Launch,
    log: PathBuf,
    child: Option<Child>,
    paused: bool,
}

impl Node {
    /// Starts node `index` at a free loopback port; its log goes to `log`.
    pub(super) fn start(launch: &Launch, index: u32, log: PathBuf) -> anyhow::Result<Node> {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").context("a free port")?;
        let addr = probe.local_addr()?.to_string();
        drop(probe);
        let gid = launch.own_gids.then_some(super::network::NODE_GID_BASE + index);
        let mut node = Node { addr, gid, placement: None, launch: launch.clone(), log, child: None, paused: false };
        node.restart()?;
        Ok(node)
    }

    /// Starts a node of a region where `placement` says; its log goes to `log`.
    pub(super) fn start_placed(launch: &Launch, placement: Placement, log: PathBuf) -> anyhow::Result<Node> {
        let addr = placement.listen.clone();
        let placement = Some(placement);
        let mut node = Node { addr, gid: None, placement, launch: launch.clone(), log, child: None, paused: false };
        node.restart()?;
        Ok(node)
    }

    /// The region the node runs in (`None` on loopback).
    pub(super) fn region(&self) -> Option<&str> {
        self.placement.as_ref().map(|p| p.region.as_str())
    }

    pub(super) fn port(&self) -> u16 {
        self.addr.rsplit(':').next().and_then(|p| p.parse().ok()).expect("an address of our own making")
    }

    pub(super) fn is_up(&self) -> bool {
        self.child.is_some()
    }

    pub(super) fn is_paused(&self) -> bool {
        self.paused
    }

    /// Starts the process again at the same address, and waits until it listens.
    pub(super) fn restart(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).context("the node's log")?;
        let mut command = Command::new(&self.launch.binary);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("FAIRWAY_") {
                command.env_remove(name);
            }
        }
        // The user stays the same (a user of its own could not read a binary
        // under a private directory); the group marks the node's packets.
        if let Some(gid) = self.gid {
            command.gid(gid);
        }
        // The region's network namespace, entered by the child before it
        // runs `fairway` (as `ip netns exec` would, with no process between).
        let netns = match &self.placement {
            Some(placement) => {
                let path = format!("/var/run/netns/{}", placement.netns);
                let file = std::fs::File::open(&path)
                    .with_context(|| format!("network namespace {path} (is the region bed up?)"))?;
                Some(file)
            }
            None => None,
        };
        let netns_fd = netns.as_ref().map(std::os::fd::AsRawFd::as_raw_fd);
        // SAFETY: prctl and setns are async-signal-safe system calls; the
        // closure touches no memory of the parent's but a copied integer.
        unsafe {
            // A node dies with the run that started it, also when the run is killed.
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(fd) = netns_fd
                    && libc::setns(fd, libc::CLONE_NEWNET) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let lease_timeout = fairway::clock::duration_serde::format(self.launch.lease_timeout);
        let store = self.placement.as_ref().map_or(&self.launch.store, |p| &p.store);
        command
            .args(["serve", "--listen", &self.addr, "--store", store])
            .envs(NODE_ENV.iter().copied())
            .env("FAIRWAY_TASKS__LEASE_TIMEOUT", &lease_timeout)
            .env("FAIRWAY_LOG", "info");
        if let Some(placement) = &self.placement {
            command.envs(placement.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        }
        let (child, _) = spawn_server(&mut command, log)
            .with_context(|| format!("node {}; see {}", self.addr, self.log.display()))?;
        drop(netns);
        self.child = Some(child);
        self.paused = false;
        Ok(())
    }

    /// `kill -9`.
    pub(super) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.paused = false;
    }

    /// `SIGSTOP` (`true`) or `SIGCONT` (`false`).
    pub(super) fn pause(&mut self, stop: bool) {
        if let Some(child) = &self.child {
            let signal = if stop { libc::SIGSTOP } else { libc::SIGCONT };
            // SAFETY: `kill` has no memory effects; the pid is our own child, not yet reaped.
            unsafe { libc::kill(child.id() as libc::pid_t, signal) };
            self.paused = stop;
        }
    }

    /// Resumes and starts whatever is down, so that the run can drain.
    pub(super) fn heal(&mut self) -> anyhow::Result<()> {
        if self.paused {
            self.pause(false);
        }
        if self.child.is_none() {
            self.restart()?;
        }
        Ok(())
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.pause(false);
        self.kill();
    }
}
