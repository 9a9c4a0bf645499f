//! The Fairway nodes of a chaos run: `fairway serve` processes on fixed
//! loopback addresses (their names in the cluster), which the nemesis kills,
//! restarts, pauses and resumes.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use anyhow::{Context, bail};

/// Cluster settings that make faults show within seconds.
pub const NODE_ENV: &[(&str, &str)] = &[
    ("FAIRWAY_CLUSTER__HEARTBEAT_INTERVAL", "500ms"),
    ("FAIRWAY_CLUSTER__MEMBER_TIMEOUT", "3s"),
    ("FAIRWAY_CLUSTER__REBALANCE_INTERVAL", "500ms"),
    ("FAIRWAY_TASKS__BACKOFF_INITIAL", "100ms"),
    ("FAIRWAY_TASKS__BACKOFF_MAX", "1s"),
    ("FAIRWAY_TASKS__MAX_ATTEMPTS", "1000"),
    // Garbage collection always due: a deposed owner that wakes up deletes
    // at once, the moment fencing must make harmless.
    ("FAIRWAY_PARTITION__GC_INTERVAL", "1s"),
    ("FAIRWAY_PARTITION__GC_MIN_ACKS", "10"),
];

/// The member timeout of [`NODE_ENV`], in ms.
pub const MEMBER_TIMEOUT_MS: u64 = 3_000;

pub struct Node {
    pub addr: String,
    store: String,
    lease_timeout: String,
    log: PathBuf,
    child: Option<Child>,
    paused: bool,
}

impl Node {
    /// Starts a node at a free loopback port, with leases of `lease_timeout`;
    /// its log goes to `log`.
    pub fn start(store: &str, log: PathBuf, lease_timeout: std::time::Duration) -> anyhow::Result<Node> {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").context("a free port")?;
        let addr = probe.local_addr()?.to_string();
        drop(probe);
        let lease_timeout = fairway::config::duration_serde::format(lease_timeout);
        let mut node = Node { addr, store: store.to_owned(), lease_timeout, log, child: None, paused: false };
        node.restart()?;
        Ok(node)
    }

    pub fn is_up(&self) -> bool {
        self.child.is_some()
    }

    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Starts the process again at the same address, and waits until it listens.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).context("the node's log")?;
        let exe = std::env::current_exe().context("the path of this binary")?;
        let mut command = Command::new(exe);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("FAIRWAY_") {
                command.env_remove(name);
            }
        }
        let mut child = command
            .args(["serve", "--listen", &self.addr, "--store", &self.store])
            .envs(NODE_ENV.iter().copied())
            .env("FAIRWAY_TASKS__LEASE_TIMEOUT", &self.lease_timeout)
            .env("FAIRWAY_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .context("start fairway serve")?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line)?;
        if !line.starts_with("listening on ") {
            let _ = child.kill();
            let _ = child.wait();
            bail!("node {} did not start; see {}", self.addr, self.log.display());
        }
        self.child = Some(child);
        self.paused = false;
        Ok(())
    }

    /// `kill -9`.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.paused = false;
    }

    /// `SIGSTOP` (`true`) or `SIGCONT` (`false`).
    pub fn pause(&mut self, stop: bool) {
        if let Some(child) = &self.child {
            let signal = if stop { libc::SIGSTOP } else { libc::SIGCONT };
            // SAFETY: `kill` has no memory effects; the pid is our own child, not yet reaped.
            unsafe { libc::kill(child.id() as libc::pid_t, signal) };
            self.paused = stop;
        }
    }

    /// Resumes and starts whatever is down, so that the run can drain.
    pub fn heal(&mut self) -> anyhow::Result<()> {
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
