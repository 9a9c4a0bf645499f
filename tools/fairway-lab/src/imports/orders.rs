//! The orders compared: the chunk ranker's pick, and Fairway's partition
//! engine itself (the product's pure core, driven in virtual time over rows
//! kept in memory), with a chunk's tenant or its job as its fairness key
//! and, by arm, no cost, its records as its cost, or its job's records as
//! its size on the log curve, and with or without a `max_wait`.

use std::collections::BTreeMap;
use std::time::Duration;

use fairway::core::engine::rows::{PartitionMeta, PartitionWrite, RecordKey, RecordRange, RecordValue, Section};
use fairway::core::engine::{EngineConfig, PartitionEngine, PlanInput, TaskPolicy};
use fairway::core::fairness::{CostCurve, Weights};
use fairway::model::{FairLevel, Priority, StoredTask, TaskSpec};

use super::ranker::Ranker;
use super::workload::{Chunk, JOB_RECORDS};

/// A queue of chunks in some order.
pub(crate) trait Order {
    /// Chunks that arrive now.
    fn add(&mut self, chunks: &[Chunk], now_ms: i64);
    /// The next chunk to start, `running[t]` chunks of tenant `t` being in
    /// progress, `all_running` in all.
    fn pick(&mut self, now_ms: i64, running: &[usize], all_running: usize) -> Option<Chunk>;
}

/// The ranker: every waiting chunk scored at every pick.
pub(crate) struct RankerOrder {
    ranker: Ranker,
    waiting: Vec<Chunk>,
}

impl RankerOrder {
    pub(crate) fn new(extreme_after_minutes: f64) -> Self {
        RankerOrder { ranker: Ranker { extreme_after_minutes }, waiting: Vec::new() }
    }
}

impl Order for RankerOrder {
    fn add(&mut self, chunks: &[Chunk], _now_ms: i64) {
        self.waiting.extend_from_slice(chunks);
    }

    fn pick(&mut self, now_ms: i64, running: &[usize], all_running: usize) -> Option<Chunk> {
        let best = self.ranker.best(&self.waiting, now_ms, running, all_running)?;
        Some(self.waiting.swap_remove(best))
    }
}

/// What a Fairway arm charges a chunk's tenant for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Charge {
    /// Every chunk alike (cost 1).
    Tasks,
    /// Its records, on the linear curve that reaches the most at a full chunk.
    ChunkRecords,
    /// Its job's records, on the log curve up to the largest job.
    JobSizeLog,
}

/// What a Fairway arm takes as a chunk's fairness key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyBy {
    /// Its tenant: tenants share the workers, each one's chunks in order.
    Tenant,
    /// Its job: jobs share the workers, whoever's they are.
    Job,
    /// Its job, in a group of its tenant's jobs with this `group_lead`:
    /// tenants share the workers, and a tenant's job with nothing waiting
    /// goes ahead of its tenant's other jobs within the lead.
    JobInTenant {
        /// Tenants (the groups, one per tenant).
        tenants: usize,
        /// The queue's `group_lead`, in costs.
        lead: u64,
    },
}

/// Fairway's engine over rows in memory: a write lands whole and at once.
pub(crate) struct FairwayOrder {
    engine: PartitionEngine,
    rows: BTreeMap<(Priority, FairLevel), StoredTask>,
    records: BTreeMap<RecordKey, RecordValue>,
    chunks: BTreeMap<usize, Chunk>,
    key: KeyBy,
    charge: Charge,
}

impl FairwayOrder {
    /// `age`: the `max_wait` (a chunk that has waited this long goes to the
    /// front) and the `age_boost` under it (strides an old chunk competes
    /// ahead of its place).
    pub(crate) fn new(key: KeyBy, charge: Charge, chunk_records: u64, age: Option<(Duration, u32)>) -> Self {
        let (cost_curve, cost_reference_size) = match charge {
            Charge::Tasks | Charge::ChunkRecords => (CostCurve::Linear, chunk_records),
            Charge::JobSizeLog => (CostCurve::Log, JOB_RECORDS.1),
        };
        let mut tasks = TaskPolicy {
            lease_timeout: std::time::Duration::from_secs(24 * 3600),
            cost_curve,
            cost_reference_size,
            max_wait: age.map_or(Duration::ZERO, |(max_wait, _)| max_wait),
            age_boost: age.map_or(0, |(_, boost)| boost),
            ..TaskPolicy::default()
        };
        let mut weights = Weights::default();
        if let KeyBy::JobInTenant { tenants, lead } = key {
            weights.groups = (0..tenants).map(|tenant| format!("tenant-{tenant}/")).collect();
            tasks.group_lead = lead;
        }
        let meta = PartitionMeta { range_id: 1, ..PartitionMeta::default() };
        let engine = PartitionEngine::load(&meta, EngineConfig { tasks, weights, ..EngineConfig::default() }, 0);
        FairwayOrder { engine, rows: BTreeMap::new(), records: BTreeMap::new(), chunks: BTreeMap::new(), key, charge }
    }

    fn spec(&self, chunk: &Chunk) -> TaskSpec {
        let key = match self.key {
            KeyBy::Tenant => format!("tenant-{}", chunk.tenant),
            KeyBy::Job | KeyBy::JobInTenant { .. } => format!("tenant-{}/job-{}", chunk.tenant, chunk.job),
        };
        let mut spec = TaskSpec::new(key, Priority::DEFAULT, chunk.id.to_le_bytes().to_vec());
        spec.size = match self.charge {
            Charge::Tasks => None,
            Charge::ChunkRecords => Some(chunk.records),
            Charge::JobSizeLog => Some(chunk.job_records),
        };
        spec
    }

    fn land(&mut self, write: &PartitionWrite) {
        for row in &write.delete_tasks {
            self.rows.remove(row);
        }
        for task in &write.tasks {
            self.rows.insert((task.priority, task.level), task.clone());
        }
        for at in &write.delete {
            self.records.remove(at);
        }
        for record in &write.put {
            self.records.insert(record.at, record.value.clone());
        }
    }

    /// What the partition's writer reads before it plans: the waiting
    /// records, and the rows of chunks past `max_wait`.
    fn read_before_planning(&mut self, now_ms: i64) {
        if let Some((after, limit)) = self.engine.waiting_read() {
            let range = RecordRange::above(Section::Waiting, after);
            let start = RecordKey { section: range.section, key: range.after };
            let records = self
                .records
                .range(start..)
                .filter(|(at, _)| at.section == Section::Waiting && at.key > after)
                .take(limit)
                .map(|(at, value)| match value {
                    RecordValue::Waiting { priority, level } => (at.key, *priority, *level),
                    other => panic!("{other:?} in the waiting section"),
                })
                .collect();
            self.engine.apply_waiting_read(after, records, limit);
        }
        for (key, priority, level) in self.engine.aged_reads(now_ms, 16) {
            self.engine.apply_aged_read(key, self.rows.get(&(priority, level)).cloned());
        }
    }

    /// Writes what the engine has due (chunks past `max_wait` to move).
    fn write_due(&mut self, now_ms: i64) {
        while self.engine.write_due(now_ms) {
            self.read_before_planning(now_ms);
            let plan = self.engine.plan(PlanInput::default(), now_ms, &mut || 0.5).expect("ids for the workload");
            let moved = !plan.write.delete_tasks.is_empty();
            self.land(&plan.write);
            self.engine.write_succeeded(plan, now_ms);
            if !moved {
                break;
            }
        }
    }
}

impl Order for FairwayOrder {
    fn add(&mut self, chunks: &[Chunk], now_ms: i64) {
        // In batches, as a producer's AddTasks would send them.
        for batch in chunks.chunks(500) {
            let specs: Vec<TaskSpec> = batch.iter().map(|chunk| self.spec(chunk)).collect();
            self.read_before_planning(now_ms);
            let plan = self.engine.prepare_append(&specs, now_ms).expect("one id block holds the workload");
            self.land(&plan.write);
            self.engine.write_succeeded(plan, now_ms);
            self.chunks.extend(batch.iter().map(|chunk| (chunk.id, chunk.clone())));
        }
    }

    fn pick(&mut self, now_ms: i64, _running: &[usize], _all_running: usize) -> Option<Chunk> {
        self.write_due(now_ms);
        loop {
            if let Some(task) = self.engine.take_next(now_ms) {
                self.engine.settle();
                for gc in self.engine.gc_requests(now_ms) {
                    self.rows.retain(|(priority, level), _| *priority != gc.priority || *level > gc.through);
                }
                let id = usize::from_le_bytes(task.payload[..8].try_into().expect("a chunk id"));
                return Some(self.chunks.remove(&id).expect("each chunk is dispatched once"));
            }
            let requests = self.engine.read_requests(now_ms);
            if requests.is_empty() {
                return None;
            }
            for request in requests {
                let rows = self
                    .rows
                    .range((request.priority, request.after)..=(request.priority, FairLevel::MAX))
                    .filter(|((_, level), _)| *level > request.after)
                    .take(request.limit)
                    .map(|(_, task)| task.clone())
                    .collect();
                self.engine.apply_read(request, rows);
            }
        }
    }
}
