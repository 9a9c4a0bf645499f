//! The Cassandra nodes of a run, as `deploy/cassandra/cassandra.sh` started
//! them: the nemesis kills (`kill -9`), pauses (`SIGSTOP`) and restarts
//! them. The script's `CASSANDRA_DEV_HOME` says which cluster.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};

pub(super) struct CassandraNodes {
    script: PathBuf,
    /// Nodes 1..=count.
    pub count: u32,
    /// Paused nodes and their pids: resumed on drop, whatever happened.
    paused: Vec<(u32, libc::pid_t)>,
    killed: Vec<u32>,
}

impl CassandraNodes {
    /// The nodes of the cluster the script manages; fails unless all run.
    pub(super) async fn find(script: PathBuf, count: u32) -> anyhow::Result<CassandraNodes> {
        let nodes = CassandraNodes { script, count, paused: Vec::new(), killed: Vec::new() };
        for n in 1..=count {
            let pid = nodes.pid(n).await?;
            // SAFETY: signal 0 only checks that the process exists.
            if unsafe { libc::kill(pid, 0) } != 0 {
                bail!("Cassandra node {n} (pid {pid}) does not run: start {count} nodes with the script first");
            }
        }
        Ok(nodes)
    }

    async fn script(&self, args: &[&str]) -> anyhow::Result<String> {
        super::run_script(&self.script, args).await
    }

    async fn pid(&self, n: u32) -> anyhow::Result<libc::pid_t> {
        let text = self.script(&["pid", &n.to_string()]).await?;
        text.parse().with_context(|| format!("the pid of Cassandra node {n}: {text:?}"))
    }

    async fn signal(&self, n: u32, signal: libc::c_int) -> anyhow::Result<()> {
        let pid = self.pid(n).await?;
        // SAFETY: `kill` has no memory effects.
        if unsafe { libc::kill(pid, signal) } != 0 {
            bail!("signal {signal} to Cassandra node {n} (pid {pid}): {}", std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// `kill -9` of node `n`; waits until it is gone.
    pub(super) async fn kill(&mut self, n: u32) -> anyhow::Result<()> {
        let pid = self.pid(n).await?;
        self.signal(n, libc::SIGKILL).await?;
        // SAFETY: signal 0 only checks that the process exists.
        while unsafe { libc::kill(pid, 0) } == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.killed.push(n);
        Ok(())
    }

    /// `SIGSTOP` (`true`) or `SIGCONT` (`false`) of node `n`.
    pub(super) async fn pause(&mut self, n: u32, stop: bool) -> anyhow::Result<()> {
        let pid = self.pid(n).await?;
        self.signal(n, if stop { libc::SIGSTOP } else { libc::SIGCONT }).await?;
        if stop {
            self.paused.push((n, pid));
        } else {
            self.paused.retain(|&(p, _)| p != n);
        }
        Ok(())
    }

    /// Starts node `n` again on its data; returns once it accepts CQL and
    /// gossip has it up on the other running nodes (the script waits).
    pub(super) async fn restart(&mut self, n: u32) -> anyhow::Result<()> {
        self.script(&["restart-node", &n.to_string()]).await?;
        self.killed.retain(|&k| k != n);
        Ok(())
    }

    /// Resumes and restarts whatever the nemesis left down.
    pub(super) async fn heal(&mut self) -> anyhow::Result<()> {
        for (n, _) in self.paused.clone() {
            self.pause(n, false).await?;
        }
        for n in self.killed.clone() {
            self.restart(n).await?;
        }
        Ok(())
    }
}

impl Drop for CassandraNodes {
    fn drop(&mut self) {
        for &(_, pid) in &self.paused {
            // SAFETY: `kill` has no memory effects.
            unsafe { libc::kill(pid, libc::SIGCONT) };
        }
    }
}
