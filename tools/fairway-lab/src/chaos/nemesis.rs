//! The nemesis: the faults of each scenario, injected on a schedule, each
//! written to the history when it starts and when it ends.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use rand::Rng;
use rand::rngs::StdRng;

use fairway::proto::v1 as pb;

use super::analysis::{FaultWindow, WindowKind};
use super::cassandra::CassandraNodes;
use super::network::Firewall;
use super::nodes::{MEMBER_TIMEOUT_MS, Node};
use super::regions::{Layout, RegionBed, THREE_REGIONS, THREE_REGIONS_MANUAL, TWO_REGIONS};
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
    /// Region bed (`deploy/regions/regions.sh`), regions a and b; manual
    /// failover, `LOCAL_SERIAL` and `LOCAL_QUORUM`; the queue homed in a;
    /// Fairway nodes 10.210.1.2, 10.210.1.3 (a) and 10.210.2.2 (b). Every
    /// 10-14 s, region a cut off from everything (`regions.sh cut a`) for
    /// 10-15 s, then healed. Requests through b's node fail (`UNAVAILABLE`)
    /// while a is cut off: nothing of a's queue may be owned in b.
    RegionCut,
    /// Region bed, regions a and b, as `region-cut`. Every 17-23 s, the
    /// queue's home moves to the other region (`MoveQueue`, a graceful
    /// move: a→b→a…) under load, the link between regions slowed 3-8 times
    /// from 2-4 s before the move until it is over (the old home's writes
    /// queue behind slow Paxos rounds as it hands over); the run watches
    /// every partition reach the new home.
    RegionMove,
    /// Region bed, regions a, b and c; automatic failover, `SERIAL` and
    /// `QUORUM`, one replica per region; the queue homed in a; Fairway nodes
    /// 10.210.1.2, 10.210.1.3 (a), 10.210.2.2 (b), 10.210.3.2 (c). Every
    /// 10-15 s, region a dies for 15-20 s: either lost (its Fairway nodes
    /// `kill -9`, its Cassandra node `regions.sh kill a`; then `revive a` and
    /// the nodes started again) or cut off (`regions.sh cut a`, then
    /// `heal a`), at random. The others take its partitions over.
    RegionAuto,
    /// Region bed, regions a, b and c; manual failover, `LOCAL_SERIAL` and
    /// `LOCAL_QUORUM`, one replica per region; the queue homed in a; Fairway
    /// nodes 10.210.1.2, 10.210.1.3 (a), 10.210.2.2 (b), 10.210.3.2 (c).
    /// Every 10-14 s, the queue's home region is lost (its Fairway nodes
    /// `kill -9`, its Cassandra node `regions.sh kill`) and the queue forced
    /// to each other region at once (`MoveQueue` with `force` through each
    /// one's node, sent until one is accepted: racing forced failovers, of
    /// which one must win); 20-25 s later the lost region is revived and its
    /// nodes started again, and it hands the old generation over. The next
    /// fault loses the new home, once the old generation is drained.
    RegionFailover,
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

    /// The regions and nodes of a scenario on the region bed.
    pub(super) fn layout(self) -> Option<Layout> {
        match self {
            Scenario::RegionCut | Scenario::RegionMove => Some(TWO_REGIONS),
            Scenario::RegionFailover => Some(THREE_REGIONS_MANUAL),
            Scenario::RegionAuto => Some(THREE_REGIONS),
            _ => None,
        }
    }
}

/// The state of a region scenario: the bed, the queue's home, and the
/// faults injected, with what the nemesis saw of each.
pub(super) struct RegionRun {
    pub bed: RegionBed,
    pub layout: Layout,
    /// The queue's home as last moved.
    pub home: String,
    pub windows: Vec<FaultWindow>,
}

impl RegionRun {
    pub(super) fn new(bed: RegionBed, layout: Layout) -> RegionRun {
        RegionRun { bed, layout, home: layout.home().to_owned(), windows: Vec::new() }
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
    /// The region bed, for the region scenarios.
    pub regions: Option<RegionRun>,
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

    fn regions(&mut self) -> &mut RegionRun {
        self.regions.as_mut().expect("the region bed of the region scenarios")
    }

    /// The addresses of the Fairway nodes of `region`.
    fn nodes_of(&self, region: &str) -> Vec<String> {
        self.nodes.iter().filter(|n| n.region() == Some(region)).map(|n| n.addr.clone()).collect()
    }

    /// Describes the queue through the nodes `via` every 250 ms until every
    /// partition is owned (active, or remote) by one of `owners`, or until
    /// `until`; when that first held (ms since the run began), if it did.
    async fn watch_owners(&mut self, via: &[String], owners: &[String], until: Instant) -> Option<u64> {
        if via.is_empty() {
            return None;
        }
        let mut client = Client::new(via.to_vec(), 0, self.traffic.clone());
        while Instant::now() < until {
            let request = pb::DescribeQueueRequest { queue: QUEUE.into(), top_keys: 1 };
            if let Some(described) = client.describe(request).await {
                let owned =
                    |p: &pb::PartitionState| (p.state == "active" || p.state == "remote") && owners.contains(&p.owner);
                if !described.partitions.is_empty() && described.partitions.iter().all(owned) {
                    return Some(self.recorder.now_ms());
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        None
    }

    /// Opens a fault window now (ms since the run began).
    fn open_window(&mut self, kind: WindowKind, label: String, watched: bool) {
        let start_ms = self.recorder.now_ms();
        self.traffic.set_fault(true);
        self.say(label.clone());
        let window = FaultWindow { kind, label, start_ms, taken_over_ms: None, healed_ms: None, watched };
        self.regions().windows.push(window);
    }

    fn window(&mut self) -> &mut FaultWindow {
        self.regions().windows.last_mut().expect("a window was opened")
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
            Scenario::RegionCut => self.region_cut().await?,
            Scenario::RegionMove => self.region_move().await?,
            Scenario::RegionAuto => self.region_auto().await?,
            Scenario::RegionFailover => self.region_failover().await?,
        }
        Ok(())
    }

    /// Region a cut off for 10-15 s. Its nodes keep the queue (manual
    /// failover: nobody else may own it); b's node cannot reach them.
    async fn region_cut(&mut self) -> anyhow::Result<()> {
        let quiet = Duration::from_millis(self.rng.random_range(10_000..=14_000));
        self.wait(quiet).await;
        if Instant::now() >= self.end {
            return Ok(());
        }
        let outage = Duration::from_millis(self.rng.random_range(10_000..=15_000));
        // Answers count as the fault's from the moment it begins to be injected.
        self.traffic.set_fault(true);
        self.regions().bed.cut("a").await?;
        let label = format!("cut region a off for {:.1} s", outage.as_secs_f64());
        self.open_window(WindowKind::Cut, label, false);
        tokio::time::sleep(outage).await;
        self.regions().bed.heal("a").await?;
        let healed = self.recorder.now_ms();
        self.window().healed_ms = Some(healed);
        self.traffic.set_fault(false);
        self.say("healed region a".into());
        Ok(())
    }

    /// The queue's home moved to the other region with `MoveQueue`, then
    /// watched until every partition is owned there (at most 20 s). The
    /// link between regions is slowed from a few seconds before the move
    /// until it is over (3 to 8 times its delay), so that the old home's
    /// writes are queued behind slow Paxos rounds when it hands over.
    async fn region_move(&mut self) -> anyhow::Result<()> {
        let quiet = Duration::from_millis(self.rng.random_range(15_000..=19_000));
        self.wait(quiet).await;
        if Instant::now() >= self.end {
            return Ok(());
        }
        let from = self.regions().home.clone();
        let layout = self.regions().layout;
        let to = layout.regions.iter().find(|r| **r != from).copied().expect("two regions").to_owned();
        let base = self.regions().bed.base_latency_ms();
        let slow = (base * self.rng.random_range(3.0..=8.0)).round();
        self.regions().bed.raise_latency(slow).await?;
        self.say(format!("one-way delay between regions raised from {base} to {slow} ms"));
        tokio::time::sleep(Duration::from_millis(self.rng.random_range(2_000..=4_000))).await;
        self.open_window(WindowKind::Move, format!("MoveQueue home {from} -> {to}"), true);
        let asked = Instant::now();
        let deadline = asked + Duration::from_secs(15);
        let moved = loop {
            let request =
                pb::MoveQueueRequest { queue: QUEUE.into(), home: to.clone(), force: false, abandon_previous: false };
            match self.admin.move_queue(request).await {
                Ok(response) if response.home == to => break true,
                Ok(response) => {
                    self.say(format!("MoveQueue to {to} answered home {:?}; not moved", response.home));
                    break false;
                }
                Err(status) if Instant::now() < deadline => {
                    tracing::debug!(?status, "MoveQueue: retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(status) => {
                    self.say(format!("MoveQueue to {to} failed for 15 s: {:?} {}", status.code(), status.message()));
                    break false;
                }
            }
        };
        if moved {
            self.regions().home = to.clone();
            self.say(format!("MoveQueue: home is {to} (answered after {} ms)", asked.elapsed().as_millis()));
            let targets = self.nodes_of(&to);
            let settled = self.watch_owners(&targets, &targets, Instant::now() + Duration::from_secs(20)).await;
            match settled {
                Some(at) => {
                    let took = at.saturating_sub(self.window().start_ms);
                    self.say(format!("every partition owned in {to}, {took} ms after the move began"));
                }
                None => self.say(format!("not every partition was owned in {to} 20 s after the move")),
            }
            self.window().taken_over_ms = settled;
        }
        self.regions().bed.restore_latency().await?;
        self.say(format!("one-way delay between regions back to {base} ms"));
        self.traffic.set_fault(false);
        Ok(())
    }

    /// Region a dies for 15-20 s (lost, or cut off), then comes back; the
    /// run watches b's and c's nodes take every partition.
    async fn region_auto(&mut self) -> anyhow::Result<()> {
        let quiet = Duration::from_millis(self.rng.random_range(10_000..=15_000));
        self.wait(quiet).await;
        if Instant::now() >= self.end {
            return Ok(());
        }
        let outage = Duration::from_millis(self.rng.random_range(15_000..=20_000));
        let lost = self.rng.random_bool(0.5);
        let victims: Vec<usize> = (0..self.nodes.len()).filter(|&i| self.nodes[i].region() == Some("a")).collect();
        self.traffic.set_fault(true);
        if lost {
            for &i in &victims {
                self.nodes[i].kill();
            }
            self.regions().bed.kill("a").await?;
            let names: Vec<&str> = victims.iter().map(|&i| self.nodes[i].addr.as_str()).collect();
            let label = format!(
                "region a lost for {:.1} s: kill -9 of its Fairway nodes {} and of its Cassandra node",
                outage.as_secs_f64(),
                names.join(", ")
            );
            self.open_window(WindowKind::Kill, label, true);
        } else {
            self.regions().bed.cut("a").await?;
            let label = format!("cut region a off for {:.1} s", outage.as_secs_f64());
            self.open_window(WindowKind::Cut, label, true);
        }
        // Every partition taken by the nodes of b and c, as b's node sees it.
        let others: Vec<String> =
            self.nodes.iter().filter(|n| n.region() != Some("a")).map(|n| n.addr.clone()).collect();
        let until = Instant::now() + outage;
        let taken = self.watch_owners(&others, &others, until).await;
        self.window().taken_over_ms = taken;
        match taken {
            Some(at) => {
                let took = at.saturating_sub(self.window().start_ms);
                self.say(format!("every partition owned in b or c, {took} ms after region a died"));
            }
            None => self.say("not every partition was owned in b or c while region a was down".into()),
        }
        tokio::time::sleep(until.saturating_duration_since(Instant::now())).await;
        if lost {
            self.regions().bed.revive("a").await?;
            for &i in &victims {
                self.nodes[i].restart()?;
            }
            self.say(
                "region a is back: its Cassandra node revived (gossip has it up), its Fairway nodes restarted".into(),
            );
        } else {
            self.regions().bed.heal("a").await?;
            self.say("healed region a".into());
        }
        let healed = self.recorder.now_ms();
        self.window().healed_ms = Some(healed);
        self.traffic.set_fault(false);
        Ok(())
    }

    /// The home region lost, the queue forced to the other one, the lost
    /// region revived 20-25 s later; the run watches the other region's
    /// nodes own every partition.
    async fn region_failover(&mut self) -> anyhow::Result<()> {
        let quiet = Duration::from_millis(self.rng.random_range(10_000..=14_000));
        self.wait(quiet).await;
        if Instant::now() >= self.end {
            return Ok(());
        }
        let outage = Duration::from_millis(self.rng.random_range(20_000..=25_000));
        let from = self.regions().home.clone();
        let layout = self.regions().layout;
        let candidates: Vec<String> = layout.regions.iter().filter(|r| **r != from).map(|r| (*r).to_owned()).collect();
        let victims: Vec<usize> = (0..self.nodes.len()).filter(|&i| self.nodes[i].region() == Some(&from)).collect();
        self.traffic.set_fault(true);
        for &i in &victims {
            self.nodes[i].kill();
        }
        self.regions().bed.kill(&from).await?;
        let names: Vec<&str> = victims.iter().map(|&i| self.nodes[i].addr.as_str()).collect();
        let label = format!(
            "region {from} lost for {:.1} s (kill -9 of its Fairway nodes {} and its Cassandra node), forced to {} at once",
            outage.as_secs_f64(),
            names.join(", "),
            candidates.join(" and ")
        );
        self.open_window(WindowKind::Kill, label, true);
        let until = Instant::now() + outage;
        let forced = self.race_forced_failovers(&candidates, until).await;
        if let Some((to, generation)) = forced {
            let at = self.recorder.now_ms().saturating_sub(self.window().start_ms);
            self.say(format!("forced to {to} (generation {generation}), {at} ms after region {from} died"));
            self.regions().home = to.clone();
            let targets = self.nodes_of(&to);
            let taken = self.watch_owners(&targets, &targets, until).await;
            self.window().taken_over_ms = taken;
            match taken {
                Some(at) => {
                    let took = at.saturating_sub(self.window().start_ms);
                    self.say(format!("every partition owned in {to}, {took} ms after region {from} died"));
                }
                None => self.say(format!("not every partition was owned in {to} while region {from} was down")),
            }
        }
        tokio::time::sleep(until.saturating_duration_since(Instant::now())).await;
        self.regions().bed.revive(&from).await?;
        for &i in &victims {
            self.nodes[i].restart()?;
        }
        self.say(format!("region {from} is back: its Cassandra node revived, its Fairway nodes restarted"));
        let healed = self.recorder.now_ms();
        self.window().healed_ms = Some(healed);
        self.traffic.set_fault(false);
        Ok(())
    }

    /// `MoveQueue` with `force` to each of `regions` at once, each through
    /// its own region's nodes, every 250 ms until one is accepted or
    /// `until`: the region that won and its generation. Racing forced
    /// failovers must have one winner; two accepted is said, and the
    /// checker's "no two owners" judges what followed.
    async fn race_forced_failovers(&mut self, regions: &[String], until: Instant) -> Option<(String, u32)> {
        let mut clients: Vec<(String, Client)> = regions
            .iter()
            .map(|region| (region.clone(), Client::new(self.nodes_of(region), 0, self.traffic.clone())))
            .collect();
        let mut refusals: Vec<String> = Vec::new();
        while Instant::now() < until {
            let attempts = clients.iter_mut().map(|(region, client)| {
                let request = pb::MoveQueueRequest {
                    queue: QUEUE.into(),
                    home: region.clone(),
                    force: true,
                    abandon_previous: false,
                };
                async move { (region.clone(), client.move_queue(request).await) }
            });
            let answers = futures::future::join_all(attempts).await;
            let won: Vec<(String, u32)> = answers
                .iter()
                .filter_map(|(region, answer)| match answer {
                    Ok(moved) if moved.home == *region => Some((region.clone(), moved.generation)),
                    _ => None,
                })
                .collect();
            refusals = answers
                .iter()
                .filter_map(|(region, answer)| {
                    answer.as_ref().err().map(|s| format!("{region}: {:?} {}", s.code(), s.message()))
                })
                .collect();
            match won.as_slice() {
                [] => tokio::time::sleep(Duration::from_millis(250)).await,
                [one] => {
                    if !refusals.is_empty() {
                        self.say(format!("racing forced failovers: {} won; refused: {}", one.0, refusals.join("; ")));
                    }
                    return Some(one.clone());
                }
                [first, ..] => {
                    let all: Vec<String> = won.iter().map(|(r, g)| format!("{r} (generation {g})")).collect();
                    self.say(format!("racing forced failovers: MORE THAN ONE ACCEPTED: {}", all.join(", ")));
                    return Some(first.clone());
                }
            }
        }
        self.say(format!("forced failover refused until the region returned: {}", refusals.join("; ")));
        None
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
        if let Some(regions) = &mut self.regions {
            regions.bed.heal_all().await?;
        }
        self.traffic.set_fault(false);
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
            let index = fairway::store::partition_index(partition) as usize;
            return described.partitions.get(index).map(|p| p.owner.clone());
        }
    }
    None
}
