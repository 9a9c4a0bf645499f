//! The nemesis: the faults of each scenario, injected on a schedule, each
//! written to the history when it starts and when it ends.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use rand::Rng;
use rand::rngs::StdRng;

use fairway::proto::v1 as pb;

use super::cassandra::CassandraNodes;
use super::network::Firewall;
use super::nodes::{MEMBER_TIMEOUT_MS, Node};
use super::workload::{Client, QUEUE, Recorder, Traffic};

/// The faults of a scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(super) enum Scenario {
    /// Every 10 s, `kill -9` of a random Fairway node, started again 3 s later at its address.
    Kill,
    /// Every 10 s, `SIGSTOP` of a random Fairway node for 2 s (less than the member timeout).
    Pause,
    /// Every 17 s, `SIGSTOP` of the owner of partition 0 for 8 s (past the 3 s
    /// member timeout), then `SIGCONT`. Before the pause, clients drain it as
    /// a load balancer would, producers stop, and workers rush through the
    /// backlog for 3 s, failing nothing, and finish what they hold: its ack
    /// levels are far ahead of its persisted metadata (no retry comes due to
    /// carry the metadata in a write). Once it has been taken over,
    /// producers add under new keys (whose first tasks the new owner puts at
    /// the persisted ack level); workers wait until 2 s after it woke. The
    /// deposed owner wakes up with nothing to write and its keeper overdue:
    /// the race of a GC that deletes what the new owner wrote.
    PauseOwner,
    /// Every 16 s, a random Fairway node cut off from Cassandra for 8 s
    /// (its calls time out): its partitions move to the others, then it rejoins.
    CutStore,
    /// Every 16 s, a random Fairway node cut off from the other Fairway
    /// nodes, both ways, for 8 s; Cassandra still reachable by all.
    CutPeers,
    /// Every 10 s, `kill -9` of a random Cassandra node, started again 5 s later.
    CassandraKill,
    /// Every 10 s, `SIGSTOP` of a random Cassandra node for 8 s.
    CassandraPause,
    /// Every 20 s, `kill -9` of two of three Cassandra nodes (quorum lost),
    /// both started again 10 s later.
    CassandraQuorumLoss,
}

impl Scenario {
    /// The nodes' lease timeout. Pausing an owner hurts most with leases
    /// longer than the pause (visits run for minutes): it then wakes up with
    /// no expiry to write.
    pub(super) fn lease_timeout(self) -> Duration {
        match self {
            Scenario::PauseOwner => Duration::from_secs(20),
            _ => Duration::from_secs(3),
        }
    }

    /// How long a worker is busy with each task while faults run.
    pub(super) fn task_time(self) -> Duration {
        // Long tasks, as visits are: a backlog waits.
        Duration::from_millis(if self == Scenario::PauseOwner { 1_500 } else { 100 })
    }

    /// Network partitions: nodes under user ids of their own, and `iptables`.
    pub(super) fn cuts_the_network(self) -> bool {
        matches!(self, Scenario::CutStore | Scenario::CutPeers)
    }

    /// Faults of Cassandra nodes: a cluster of three, replication factor 3.
    pub(super) fn faults_cassandra(self) -> bool {
        matches!(self, Scenario::CassandraKill | Scenario::CassandraPause | Scenario::CassandraQuorumLoss)
    }
}

pub(super) struct Nemesis {
    pub scenario: Scenario,
    pub nodes: Vec<Node>,
    pub admin: Client,
    pub recorder: Recorder,
    pub traffic: Arc<Traffic>,
    pub rng: StdRng,
    pub firewall: Option<Firewall>,
    pub cassandra: Option<CassandraNodes>,
    /// The port Cassandra serves CQL on.
    pub store_port: u16,
    pub end: Instant,
}

impl Nemesis {
    async fn wait(&self, d: Duration) {
        tokio::time::sleep(d.min(self.end.saturating_duration_since(Instant::now()))).await;
    }

    fn say(&self, what: String) {
        self.recorder.nemesis(what);
    }

    fn cassandra(&mut self) -> &mut CassandraNodes {
        self.cassandra.as_mut().expect("found for the scenarios that fault Cassandra")
    }

    fn firewall(&self) -> &Firewall {
        self.firewall.as_ref().expect("installed for the scenarios that cut the network")
    }

    /// One fault of the scenario; returns once it is over (or the run's end has come).
    pub(super) async fn step(&mut self) -> anyhow::Result<()> {
        match self.scenario {
            Scenario::Kill => {
                self.wait(Duration::from_secs(7)).await;
                let victim = self.rng.random_range(0..self.nodes.len());
                self.say(format!("kill -9 {}", self.nodes[victim].addr));
                self.nodes[victim].kill();
                tokio::time::sleep(Duration::from_secs(3)).await;
                self.nodes[victim].restart()?;
                self.say(format!("restarted {}", self.nodes[victim].addr));
            }
            Scenario::Pause => {
                self.wait(Duration::from_secs(8)).await;
                let victim = self.rng.random_range(0..self.nodes.len());
                self.say(format!("SIGSTOP {}", self.nodes[victim].addr));
                self.nodes[victim].pause(true);
                tokio::time::sleep(Duration::from_secs(2)).await;
                self.nodes[victim].pause(false);
                self.say(format!("SIGCONT {}", self.nodes[victim].addr));
            }
            Scenario::PauseOwner => self.pause_owner().await?,
            Scenario::CutStore => {
                self.wait(Duration::from_secs(8)).await;
                let victim = &self.nodes[self.rng.random_range(0..self.nodes.len())];
                self.firewall().cut(victim.gid.expect("own gids"), self.store_port)?;
                self.say(format!("cut {} off from Cassandra", victim.addr));
                tokio::time::sleep(Duration::from_secs(8)).await;
                self.firewall().heal()?;
                self.say("healed the network".into());
            }
            Scenario::CutPeers => {
                self.wait(Duration::from_secs(8)).await;
                let victim = &self.nodes[self.rng.random_range(0..self.nodes.len())];
                for other in self.nodes.iter().filter(|n| n.addr != victim.addr) {
                    self.firewall().cut(victim.gid.expect("own gids"), other.port())?;
                    self.firewall().cut(other.gid.expect("own gids"), victim.port())?;
                }
                self.say(format!("cut {} off from the other Fairway nodes", victim.addr));
                tokio::time::sleep(Duration::from_secs(8)).await;
                self.firewall().heal()?;
                self.say("healed the network".into());
            }
            Scenario::CassandraKill => {
                self.wait(Duration::from_secs(5)).await;
                let count = self.cassandra().count;
                let victim = self.rng.random_range(1..=count);
                self.cassandra().kill(victim).await?;
                self.say(format!("kill -9 Cassandra node {victim}"));
                tokio::time::sleep(Duration::from_secs(5)).await;
                self.cassandra().restart(victim).await?;
                self.say(format!("Cassandra node {victim} is back (CQL up, gossip has it up)"));
            }
            Scenario::CassandraPause => {
                self.wait(Duration::from_secs(5)).await;
                let count = self.cassandra().count;
                let victim = self.rng.random_range(1..=count);
                self.cassandra().pause(victim, true).await?;
                self.say(format!("SIGSTOP Cassandra node {victim}"));
                tokio::time::sleep(Duration::from_secs(8)).await;
                self.cassandra().pause(victim, false).await?;
                self.say(format!("SIGCONT Cassandra node {victim}"));
            }
            Scenario::CassandraQuorumLoss => {
                self.wait(Duration::from_secs(10)).await;
                let count = self.cassandra().count;
                let spared = self.rng.random_range(1..=count);
                let victims: Vec<u32> = (1..=count).filter(|&n| n != spared).collect();
                for &victim in &victims {
                    self.cassandra().kill(victim).await?;
                }
                self.say(format!("kill -9 Cassandra nodes {victims:?}: no quorum"));
                tokio::time::sleep(Duration::from_secs(10)).await;
                for &victim in &victims {
                    self.cassandra().restart(victim).await?;
                }
                self.say(format!("Cassandra nodes {victims:?} are back (CQL up, gossip has them up)"));
            }
        }
        Ok(())
    }

    async fn pause_owner(&mut self) -> anyhow::Result<()> {
        self.wait(Duration::from_secs(5)).await;
        let owner = partition_owner(&mut self.admin, 0).await;
        let victim = self.nodes.iter().position(|n| Some(&n.addr) == owner.as_ref());
        let victim = victim.unwrap_or_else(|| self.rng.random_range(0..self.nodes.len()));
        let addr = self.nodes[victim].addr.clone();
        // Nothing of a client's may wait at the victim: a request it found on
        // waking would be written, fenced, and tell it that it was deposed.
        // Workers rush through the backlog for a while first: the ack levels
        // move far past what the metadata last persisted.
        self.traffic.avoid(Some(addr.clone()));
        self.traffic.hold_producers(true);
        self.traffic.rush_workers(true);
        tokio::time::sleep(Duration::from_secs(3)).await;
        self.traffic.hold_workers(true);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.traffic.workers_idle() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.nodes[victim].pause(true);
        self.say(format!("SIGSTOP {addr} (owner of partition 0)"));
        self.traffic.rush_workers(false);
        // Past the member timeout, the others take its partitions over; the
        // keys added from then on are new to the new owner.
        tokio::time::sleep(Duration::from_millis(MEMBER_TIMEOUT_MS + 1_000)).await;
        self.traffic.new_keys();
        self.traffic.hold_producers(false);
        tokio::time::sleep(Duration::from_millis(8_000 - MEMBER_TIMEOUT_MS - 1_000)).await;
        self.nodes[victim].pause(false);
        self.say(format!("SIGCONT {addr}"));
        // Workers poll again once the partition is back where it belongs:
        // what the new owner was given waits for them there, or is lost.
        tokio::time::sleep(Duration::from_secs(2)).await;
        self.traffic.hold_workers(false);
        self.traffic.avoid(None);
        Ok(())
    }

    /// Resumes, restarts and reconnects whatever is down, so that the run can drain.
    pub(super) async fn heal(&mut self) -> anyhow::Result<()> {
        if let Some(firewall) = &self.firewall {
            firewall.heal()?;
        }
        if let Some(cassandra) = &mut self.cassandra {
            cassandra.heal().await?;
        }
        for node in &mut self.nodes {
            node.heal()?;
        }
        self.traffic.avoid(None);
        self.traffic.hold_producers(false);
        self.traffic.hold_workers(false);
        self.traffic.rush_workers(false);
        self.say("healed every node".into());
        Ok(())
    }

    pub(super) fn nodes_up(&self) -> usize {
        self.nodes.iter().filter(|n| n.is_up() && !n.is_paused()).count()
    }
}

/// Who owns `partition`, as some node reports it.
async fn partition_owner(admin: &mut Client, partition: u32) -> Option<String> {
    for _ in 0..3 {
        let request = pb::DescribeQueueRequest { queue: QUEUE.into(), top_keys: 0 };
        if let Some(described) = admin.describe(request).await {
            return described.partitions.get(partition as usize).map(|p| p.owner.clone());
        }
    }
    None
}
