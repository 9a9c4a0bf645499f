//! The region scenarios' test bed: `deploy/regions/regions.sh` (one network
//! namespace per region with its own Cassandra node in a datacenter named
//! after it, WAN latency between regions), the layout of the Fairway nodes
//! over the regions, and the bed's faults: a region cut off (`cut`/`heal`)
//! a region's Cassandra node lost (`kill`/`revive`), and the delay between
//! regions raised for a while (`latency`).
//!
//! Region number `i` (1-based, in the order the bed was made with) has the
//! addresses `10.210.i.1` (its Cassandra node) and `10.210.i.2`-`.4` (free for
//! Fairway nodes), in the namespace `fw-<region>`.

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::{Context, bail};

use super::nodes::Placement;

/// The port every Fairway node of a region scenario listens on (each at an
/// address of its own).
const NODE_PORT: u16 = 7070;

/// How a region scenario spreads its Fairway nodes and fences its partitions.
#[derive(Clone, Copy, Debug)]
pub(super) struct Layout {
    /// The regions the scenario uses; the first is the queue's home.
    pub regions: &'static [&'static str],
    /// The Fairway nodes: region, and the last number of the node's address
    /// (`10.210.<region number>.<host>`).
    pub nodes: &'static [(&'static str, u8)],
    /// `cluster.failover`.
    pub failover: &'static str,
    /// `cassandra.consistency`.
    pub consistency: &'static str,
    /// `cassandra.serial_consistency`.
    pub serial_consistency: &'static str,
}

impl Layout {
    /// The queue's home when the run starts.
    pub(super) fn home(&self) -> &'static str {
        self.regions[0]
    }

    /// The keyspace's replication: one replica in each region.
    pub(super) fn replication(&self) -> String {
        let replicas: Vec<String> = self.regions.iter().map(|r| format!("'{r}': 1")).collect();
        format!("{{'class': 'NetworkTopologyStrategy', {}}}", replicas.join(", "))
    }

    /// Where each node runs, on `bed`, with the keyspace `keyspace`.
    pub(super) fn placements(&self, bed: &RegionBed, keyspace: &str) -> anyhow::Result<Vec<Placement>> {
        self.nodes
            .iter()
            .map(|&(region, host)| {
                let number = bed.number(region)?;
                let env = vec![
                    ("FAIRWAY_CLUSTER__REGION".to_owned(), region.to_owned()),
                    ("FAIRWAY_CLUSTER__FAILOVER".to_owned(), self.failover.to_owned()),
                    ("FAIRWAY_CASSANDRA__CONSISTENCY".to_owned(), self.consistency.to_owned()),
                    ("FAIRWAY_CASSANDRA__SERIAL_CONSISTENCY".to_owned(), self.serial_consistency.to_owned()),
                    // Not loopback: a server there wants TLS and principals, or this
                    // (the bed's addresses are private to this machine's namespaces).
                    ("FAIRWAY_SECURITY__ALLOW_INSECURE".to_owned(), "true".to_owned()),
                ];
                Ok(Placement {
                    region: region.to_owned(),
                    netns: format!("fw-{region}"),
                    listen: format!("10.210.{number}.{host}:{NODE_PORT}"),
                    store: format!("cassandra://{}/{keyspace}", bed.cassandra(region)?),
                    env,
                })
            })
            .collect()
    }
}

/// Two regions, manual failover, each region fenced by its own Paxos: two
/// nodes in `a` (the home), one in `b`.
pub(super) const TWO_REGIONS: Layout = Layout {
    regions: &["a", "b"],
    nodes: &[("a", 2), ("a", 3), ("b", 2)],
    failover: "manual",
    consistency: "LOCAL_QUORUM",
    serial_consistency: "LOCAL_SERIAL",
};

/// Three regions, manual failover, each region fenced by its own Paxos: two
/// nodes in `a` (the home), one in `b`, one in `c`. Forced failovers race:
/// each surviving region is asked to take the queue at once.
pub(super) const THREE_REGIONS_MANUAL: Layout = Layout {
    regions: &["a", "b", "c"],
    nodes: &[("a", 2), ("a", 3), ("b", 2), ("c", 2)],
    failover: "manual",
    consistency: "LOCAL_QUORUM",
    serial_consistency: "LOCAL_SERIAL",
};

/// Three regions, automatic failover, global levels: two nodes in `a` (the
/// home), one in `b`, one in `c`.
pub(super) const THREE_REGIONS: Layout = Layout {
    regions: &["a", "b", "c"],
    nodes: &[("a", 2), ("a", 3), ("b", 2), ("c", 2)],
    failover: "automatic",
    consistency: "QUORUM",
    serial_consistency: "SERIAL",
};

/// The bed as `regions.sh` built it, and the faults injected into it (undone
/// by [`RegionBed::heal_all`]; cuts also when the run is dropped).
pub(super) struct RegionBed {
    script: PathBuf,
    /// The bed's regions, in order: region `regions[i]` is number `i + 1`.
    regions: Vec<String>,
    cut: BTreeSet<String>,
    killed: BTreeSet<String>,
    /// The one-way delay between regions the bed was found with (ms), and
    /// the one a run set instead, if it did.
    base_latency_ms: f64,
    raised_latency_ms: Option<f64>,
}

impl RegionBed {
    /// The bed with (at least) `needed` regions: made with `regions.sh up`
    /// if it is down (a minute or more: Cassandra nodes start), checked and
    /// completed if it is up; an error, saying what to do, if it is up with
    /// other regions. Cuts a run may have left are healed.
    pub(super) async fn up(script: PathBuf, needed: &[&str]) -> anyhow::Result<RegionBed> {
        let mut bed = RegionBed {
            script,
            regions: Vec::new(),
            cut: BTreeSet::new(),
            killed: BTreeSet::new(),
            base_latency_ms: 0.0,
            raised_latency_ms: None,
        };
        let status = bed.script(&["status"]).await?;
        let first = status.lines().next().unwrap_or_default();
        let regions: Vec<String> = match first.strip_prefix("regions: ") {
            Some(rest) => rest.split(" (").next().unwrap_or_default().split_whitespace().map(str::to_owned).collect(),
            None => Vec::new(),
        };
        if regions.is_empty() {
            eprintln!("chaos: the region bed is down; starting it: {} up {}", bed.script.display(), needed.join(" "));
            bed.script(&[&["up"], needed].concat()).await?;
            bed.regions = needed.iter().map(|r| (*r).to_owned()).collect();
        } else {
            let missing: Vec<&str> = needed.iter().copied().filter(|r| !regions.iter().any(|have| have == r)).collect();
            if !missing.is_empty() {
                bail!(
                    "the region bed is up with regions {} and this scenario needs {}: take it down first \
                     (bash {} down), and the run starts the one it needs",
                    regions.join(" "),
                    needed.join(" "),
                    bed.script.display()
                );
            }
            // Completes an earlier `up` that did not finish; says so if all is there.
            let names: Vec<&str> = regions.iter().map(String::as_str).collect();
            bed.script(&[&["up"], names.as_slice()].concat()).await?;
            bed.regions = regions;
        }
        for region in needed {
            bed.script(&["heal", region]).await?;
        }
        bed.base_latency_ms = one_way_delay_ms(&bed.script(&["status"]).await?)?;
        Ok(bed)
    }

    async fn script(&self, args: &[&str]) -> anyhow::Result<String> {
        super::run_script(&self.script, args).await
    }

    /// The number of `region` in the bed (1-based): its addresses are `10.210.<number>.*`.
    pub(super) fn number(&self, region: &str) -> anyhow::Result<usize> {
        match self.regions.iter().position(|r| r == region) {
            Some(i) => Ok(i + 1),
            None => bail!("the region bed has no region {region} (it has {})", self.regions.join(" ")),
        }
    }

    /// `IP:9042` of `region`'s Cassandra node.
    pub(super) fn cassandra(&self, region: &str) -> anyhow::Result<String> {
        Ok(format!("10.210.{}.1:9042", self.number(region)?))
    }

    /// Drops everything in and out of `region` (`regions.sh cut`).
    pub(super) async fn cut(&mut self, region: &str) -> anyhow::Result<()> {
        self.cut.insert(region.to_owned());
        self.script(&["cut", region]).await?;
        Ok(())
    }

    /// Undoes [`Self::cut`] (`regions.sh heal`).
    pub(super) async fn heal(&mut self, region: &str) -> anyhow::Result<()> {
        self.script(&["heal", region]).await?;
        self.cut.remove(region);
        Ok(())
    }

    /// `SIGKILL` of `region`'s Cassandra node (`regions.sh kill`).
    pub(super) async fn kill(&mut self, region: &str) -> anyhow::Result<()> {
        self.killed.insert(region.to_owned());
        self.script(&["kill", region]).await?;
        Ok(())
    }

    /// Starts `region`'s Cassandra node again; returns once gossip has it up
    /// on the other nodes (`regions.sh revive`).
    pub(super) async fn revive(&mut self, region: &str) -> anyhow::Result<()> {
        self.script(&["revive", region]).await?;
        self.killed.remove(region);
        Ok(())
    }

    /// Sets the one-way delay between regions to `ms` (`regions.sh latency`).
    pub(super) async fn raise_latency(&mut self, ms: f64) -> anyhow::Result<()> {
        self.raised_latency_ms = Some(ms);
        self.script(&["latency", &format!("{ms:.0}")]).await?;
        Ok(())
    }

    /// Puts back the delay the bed was found with.
    pub(super) async fn restore_latency(&mut self) -> anyhow::Result<()> {
        if self.raised_latency_ms.is_some() {
            self.script(&["latency", &self.base_latency_ms.to_string()]).await?;
            self.raised_latency_ms = None;
        }
        Ok(())
    }

    /// The one-way delay between regions the bed was found with (ms).
    pub(super) fn base_latency_ms(&self) -> f64 {
        self.base_latency_ms
    }

    /// Heals every cut, revives every Cassandra node killed and puts back
    /// the delay between regions.
    pub(super) async fn heal_all(&mut self) -> anyhow::Result<()> {
        self.restore_latency().await?;
        for region in self.cut.clone() {
            self.heal(&region).await?;
        }
        for region in self.killed.clone() {
            self.revive(&region).await?;
        }
        Ok(())
    }
}

/// The one-way delay of the first region in `regions.sh status`'s output
/// (`… one-way delay 20ms (nfqueue …) …` or `… 20ms (netem) …`).
fn one_way_delay_ms(status: &str) -> anyhow::Result<f64> {
    let found = status.lines().find_map(|line| {
        let rest = line.split("one-way delay ").nth(1)?;
        rest.split("ms").next()?.trim().parse::<f64>().ok()
    });
    found.with_context(|| format!("no one-way delay in the bed's status: {status}"))
}

impl Drop for RegionBed {
    /// A run that ends early leaves no region cut off (a Cassandra node it
    /// killed stays down: `regions.sh revive` or `down`).
    fn drop(&mut self) {
        for region in &self.cut {
            let _ = std::process::Command::new("bash").arg(&self.script).args(["heal", region]).output();
        }
        if self.raised_latency_ms.is_some() {
            let base = self.base_latency_ms.to_string();
            let _ = std::process::Command::new("bash").arg(&self.script).args(["latency", &base]).output();
        }
        for region in &self.killed {
            eprintln!(
                "chaos: region {region}'s Cassandra node was left killed: bash {} revive {region}",
                self.script.display()
            );
        }
    }
}
