//! The Fairway nodes of a chaos run: `fairway serve` processes on fixed
//! loopback addresses (their names in the cluster), which the nemesis kills,
//! restarts, pauses and resumes. A node dies with the run that started it.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command};

use anyhow::Context;

use crate::cli::serve::spawn_server;

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

pub(super) struct Node {
    pub addr: String,
    /// The group id the node runs with, when it has one of its own.
    pub gid: Option<u32>,
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
        let mut node = Node { addr, gid, launch: launch.clone(), log, child: None, paused: false };
        node.restart()?;
        Ok(node)
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
        // SAFETY: prctl is async-signal-safe; the closure touches no memory of the parent's.
        unsafe {
            // A node dies with the run that started it, also when the run is killed.
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let lease_timeout = fairway::config::duration_serde::format(self.launch.lease_timeout);
        command
            .args(["serve", "--listen", &self.addr, "--store", &self.launch.store])
            .envs(NODE_ENV.iter().copied())
            .env("FAIRWAY_TASKS__LEASE_TIMEOUT", &lease_timeout)
            .env("FAIRWAY_LOG", "info");
        let (child, _) = spawn_server(&mut command, log)
            .with_context(|| format!("node {}; see {}", self.addr, self.log.display()))?;
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
