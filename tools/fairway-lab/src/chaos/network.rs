//! Network partitions on one machine: each Fairway node of a run runs with a
//! group id of its own, and packets a node sends are dropped by `iptables`
//! rules matching that group id and the destination port, in a chain of the
//! run's own (`FAIRWAY_CHAOS`, jumped to from `OUTPUT`). Dropping (not
//! rejecting) is what a cut cable or a silent firewall does: the sender's
//! calls time out.
//!
//! Invariant: the chain holds rules only while a fault is injected; healing
//! flushes it, and dropping the [`Firewall`] removes it.

use std::process::Command;

use anyhow::{Context, bail};

const CHAIN: &str = "FAIRWAY_CHAOS";

/// The first group id given to a node; node `i` runs with `NODE_GID_BASE + i`.
pub(super) const NODE_GID_BASE: u32 = 47_000;

#[derive(Debug)]
pub(super) struct Firewall {
    _private: (),
}

fn iptables(args: &[&str]) -> anyhow::Result<bool> {
    let status = Command::new("iptables")
        .args(["-w"])
        .args(args)
        .stderr(std::process::Stdio::null())
        .status()
        .context("run iptables (Debian's package iptables)")?;
    Ok(status.success())
}

fn must(args: &[&str]) -> anyhow::Result<()> {
    if !iptables(args)? {
        bail!("iptables {} failed", args.join(" "));
    }
    Ok(())
}

impl Firewall {
    /// Creates the run's chain (emptied if a run left it) and jumps to it.
    /// Needs root and `iptables`.
    pub(super) fn install() -> anyhow::Result<Firewall> {
        // SAFETY: geteuid reads the process's credentials; it cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            bail!("network partitions need root (iptables rules, and nodes with group ids of their own)");
        }
        if !iptables(&["-N", CHAIN])? {
            must(&["-F", CHAIN])?;
        }
        if !iptables(&["-C", "OUTPUT", "-j", CHAIN])? {
            must(&["-I", "OUTPUT", "-j", CHAIN])?;
        }
        Ok(Firewall { _private: () })
    }

    /// Drops what the node of group `gid` sends to TCP port `port`.
    pub(super) fn cut(&self, gid: u32, port: u16) -> anyhow::Result<()> {
        let (gid, port) = (gid.to_string(), port.to_string());
        must(&["-A", CHAIN, "-p", "tcp", "-m", "owner", "--gid-owner", &gid, "--dport", &port, "-j", "DROP"])
    }

    /// Removes every cut.
    pub(super) fn heal(&self) -> anyhow::Result<()> {
        must(&["-F", CHAIN])
    }
}

impl Drop for Firewall {
    fn drop(&mut self) {
        let _ = iptables(&["-F", CHAIN]);
        let _ = iptables(&["-D", "OUTPUT", "-j", CHAIN]);
        let _ = iptables(&["-X", CHAIN]);
    }
}
