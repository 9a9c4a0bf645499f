//! The storage contract: what a backend must do for Fairway to keep its
//! guarantees, apart from any backend. Backends live in submodules; every one
//! of them must pass the generic tests of `conformance` (behind the feature of that name).
//!
//! All operations address one partition (`PartitionId`). Levels order tasks
//! within one subqueue (a priority level of a partition).
//!
//! | operation | ordering and bounds | on error |
//! |---|---|---|
//! | [`Store::load_partition`] | - | retry |
//! | [`Store::take_ownership`] | compare-and-set of the range id: `expected` → `expected + 1` | `Fenced`: someone else owns it |
//! | [`Store::write`] | all tasks, record puts and deletes and the metadata, or nothing; conditional on the range id | see [`StoreError`] |
//! | [`Store::append`] | [`Store::write`] of tasks (and metadata) alone | see [`StoreError`] |
//! | [`Store::read`] | levels strictly above `after`, ascending, at most `limit` | retry |
//! | [`Store::read_row`] | one task row or record, linearizable with the conditional writes before it | retry |
//! | [`Store::read_records`] | keys of one section in `(after, through]` ([`RecordRange`]), ascending, at most `limit`; crosses only the rows (and tombstones) of that range | retry |
//! | [`Store::read_buckets`] | the records of each bucket given (keys `(bucket, _)` of one section), ascending, at most `per_bucket` of each, at most [`MAX_BUCKETS_PER_READ`] buckets; crosses only those buckets' rows | retry |
//! | [`Store::delete_records_through`] | every record of a section with a key at or below, in one range delete; idempotent | retry later |
//! | [`Store::delete_through`] | every task at or below the level, in one range delete; idempotent | retry later |
//! | [`Store::update_metadata`] | conditional on the range id | see [`StoreError`] |
//! | [`Store::create_queue`] | create-if-absent; the first creation's config (its creator too) wins | retry |
//! | [`Store::queue`] | one queue's config, `None` if it was never created | retry |
//! | [`Store::force_queue_home`] | compare (read) then write of the queue's generation: not linearizable | retry |
//! | [`Store::list_queues`] | every queue, in no particular order | retry |
//! | [`Store::heartbeat`] / [`Store::members`] / [`Store::leave`] | last write wins per node | retry |
//! | [`Store::cluster_secrets`] | create-if-absent: the first value written is every caller's current secret, on every node, until a rotation; returns the previous secret too while a rotation's overlap lasts | retry (`Corrupt`: a stored secret of the wrong size, do not retry) |
//! | [`Store::rotate_cluster_secret`] | compare-and-set on the current secret: of rotations racing from one secret, at most one is written (Cassandra: a lightweight transaction at `SERIAL`); `to` must differ from `from`, and `signs_until <= accepted_until` | `Invalid` (bad arguments, nothing written); `Uncertain` (may have been written: read again); else retry |

pub mod cassandra;
mod codec;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod embedded;
mod error;
mod records;
pub mod visits;

use std::sync::Arc;

use async_trait::async_trait;

pub use error::{StoreError, StoreResult};
pub use records::{Record, RecordKey, RecordRange, RecordTask, RecordValue, RowRef, Section, StoredRow};

use crate::model::{FairLevel, PRIORITY_LEVELS, PartitionId, Priority, QueueName, StoredTask};

/// What a store keeps per subqueue besides its tasks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubqueueMeta {
    /// Everything at or below it was dispatched.
    pub ack_level: FairLevel,
    /// The highest level written (best effort).
    pub max_level: FairLevel,
    /// Written minus dispatched (approximate).
    pub approx_backlog: i64,
    /// The keys furthest ahead and their next passes, for the next owner.
    pub top_keys: Vec<(String, i64)>,
    /// Levels above the ack level already dispatched (tasks dispatched out
    /// of level order); the next owner does not hand them out again.
    pub dispatched_above_ack: Vec<FairLevel>,
    /// Keys held at their limits whose waiting tasks are parked records.
    pub parked: Vec<ParkedKeyMeta>,
}

/// A parked key: its tasks wait in the records `(slot, seq)` of the parked
/// section; those at or below `floor` were handed out. A negative slot is
/// the shared slot of its priority level, for the held keys past the
/// directory (`crate::core::engine::parked`); its `fairness_key` is empty.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParkedKeyMeta {
    /// The key held at its limits.
    pub fairness_key: String,
    /// The key's slot: the first part of the keys of its records in
    /// [`Section::Parked`].
    pub slot: i64,
    /// Every record of the slot with a sequence number at or below this one was
    /// handed out.
    pub floor: i64,
}

/// The metadata row of a partition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartitionMeta {
    /// The fencing token: every write is conditional on it.
    pub range_id: i64,
    /// The node that took it last (informational: the range id decides).
    pub owner: String,
    /// The region whose nodes may take it (empty: any). Its owners fence it
    /// with that region's Paxos (`LOCAL_SERIAL`), so a node of another
    /// region never takes it: [`Store::take_ownership`] refuses.
    pub region: String,
    /// Set when the partition was handed over from another region (the
    /// region named here) to `region`: the next owner first makes every
    /// write of the old region visible in its own (see
    /// [`Store::take_ownership`]), then clears it.
    pub moved_from: String,
    /// What is kept per priority level, highest first (at [`Priority::index`]).
    pub subqueues: [SubqueueMeta; PRIORITY_LEVELS],
    /// Every delayed record at or below this key has been made ready: the
    /// next owner reads delayed records above it.
    pub delayed_through: (i64, i64),
    /// Every dead letter at or below this key was put back or removed:
    /// reads of dead letters start above it, past their deleted rows.
    pub dead_letters_through: (i64, i64),
    /// Set on a partition of an earlier generation (see
    /// [`Store::force_queue_home`]) once every task it held was added again
    /// to the next generation: nothing reads it any more.
    pub drained: bool,
}

impl PartitionMeta {
    /// This metadata as a hand-over to a node of `to_region` writes it: no
    /// owner, and homed in `to_region`, handed over from its region, when
    /// that is another one. A partition of no region (its fence spans every
    /// region) stays so.
    pub fn handed_over(self, to_region: &str) -> PartitionMeta {
        let moves = !self.region.is_empty() && self.region != to_region;
        let (region, moved_from) = if moves {
            (to_region.to_owned(), self.region.clone())
        } else {
            (self.region.clone(), self.moved_from.clone())
        };
        PartitionMeta { owner: String::new(), region, moved_from, ..self }
    }

    /// Its bytes as a backend stores them.
    pub fn stored_bytes(&self) -> usize {
        codec::encode_meta(self).len()
    }
}

/// The metadata `stored` becomes when `owner`, a node fencing in `region`,
/// takes it at range `expected + 1`: `HomedElsewhere` if it is homed in
/// another region. A taker of no region (its fence spans every region:
/// automatic failover) may take any. The caller has caught up a partition
/// written in another region.
pub(crate) fn taken_meta(
    stored: PartitionMeta,
    expected: i64,
    owner: &str,
    region: &str,
) -> StoreResult<PartitionMeta> {
    if !region.is_empty() && !stored.region.is_empty() && stored.region != region {
        return Err(StoreError::HomedElsewhere { region: stored.region });
    }
    Ok(PartitionMeta {
        range_id: expected + 1,
        owner: owner.to_owned(),
        region: region.to_owned(),
        moved_from: String::new(),
        ..stored
    })
}

/// Metadata written with an append must carry the range id it is written under.
pub(crate) fn check_metadata_range(range_id: i64, metadata: Option<&PartitionMeta>) -> StoreResult<()> {
    match metadata {
        Some(meta) if meta.range_id != range_id => {
            Err(StoreError::Invalid(format!("metadata of range {} written under range {range_id}", meta.range_id)))
        }
        _ => Ok(()),
    }
}

/// The bytes of the cluster's secret ([`Store::cluster_secrets`]).
pub const SECRET_BYTES: usize = 32;

/// The cluster's secrets as stored: the current one, and the one before the
/// last rotation while its overlap lasts (see [`Store::rotate_cluster_secret`]).
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSecrets {
    /// The secret nodes sign with (once `previous.signs_until_unix_ms` has passed).
    pub current: [u8; SECRET_BYTES],
    /// The secret before the last rotation, if there was one. Kept after
    /// its overlap has ended (a reader ignores it then): the next rotation
    /// replaces it.
    pub previous: Option<PreviousSecret>,
}

/// The secret a rotation replaced, and until when it counts.
#[derive(Clone, PartialEq, Eq)]
pub struct PreviousSecret {
    /// The replaced secret.
    pub secret: [u8; SECRET_BYTES],
    /// Until this time (ms since the Unix epoch, exclusive) nodes still sign
    /// with the previous secret: by then every node has read the new one, so
    /// no node signs with a secret another does not know yet.
    pub signs_until_unix_ms: i64,
    /// Until this time (ms since the Unix epoch, inclusive) tags and proofs
    /// made with the previous secret are accepted; never before `signs_until_unix_ms`.
    pub accepted_until_unix_ms: i64,
}

impl ClusterSecrets {
    /// A secret that was never rotated.
    pub fn first(current: [u8; SECRET_BYTES]) -> ClusterSecrets {
        ClusterSecrets { current, previous: None }
    }
}

// Secrets are never shown, whatever prints them.
impl std::fmt::Debug for ClusterSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let previous = self.previous.as_ref().map(|p| (p.signs_until_unix_ms, p.accepted_until_unix_ms));
        f.debug_struct("ClusterSecrets").field("previous_until", &previous).finish_non_exhaustive()
    }
}

impl std::fmt::Debug for PreviousSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreviousSecret")
            .field("signs_until_unix_ms", &self.signs_until_unix_ms)
            .field("accepted_until_unix_ms", &self.accepted_until_unix_ms)
            .finish_non_exhaustive()
    }
}

/// Checks the arguments of [`Store::rotate_cluster_secret`] (`Invalid`, naming what is wrong).
pub(crate) fn check_rotation(
    from: &[u8; SECRET_BYTES],
    to: &[u8; SECRET_BYTES],
    signs_until_unix_ms: i64,
    accepted_until_unix_ms: i64,
) -> StoreResult<()> {
    if from == to {
        return Err(StoreError::Invalid("a rotation to the secret it rotates from".into()));
    }
    if accepted_until_unix_ms < signs_until_unix_ms {
        return Err(StoreError::Invalid(format!(
            "a rotation whose previous secret is accepted until {accepted_until_unix_ms} ms, before it stops \
             signing ({signs_until_unix_ms} ms)"
        )));
    }
    Ok(())
}

/// The most buckets one [`Store::read_buckets`] names.
pub const MAX_BUCKETS_PER_READ: usize = 100;

/// One all-or-nothing write to a partition.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PartitionWrite {
    /// Tasks into the backlog, at their levels.
    pub tasks: Vec<StoredTask>,
    /// Records written (replacing a record at the same key).
    pub put: Vec<Record>,
    /// Records removed (removing an absent one is not an error). A key is
    /// never both put and deleted in one write.
    pub delete: Vec<RecordKey>,
    /// The partition's metadata, if the write carries it; its range id must be
    /// the one the write is conditional on.
    pub metadata: Option<PartitionMeta>,
}

impl PartitionWrite {
    /// Whether the write carries nothing: no task, record, delete or metadata.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty() && self.put.is_empty() && self.delete.is_empty() && self.metadata.is_none()
    }

    /// What the write carries, in bytes: every task row, record, delete and
    /// the metadata, each with [`ROW_BYTES`] for its key and framing. An
    /// estimate on the safe side of what a backend sends (see
    /// [`stored_task_bytes`]).
    pub fn bytes(&self) -> usize {
        let tasks: usize = self.tasks.iter().map(|t| stored_task_bytes(t) + ROW_BYTES).sum();
        let put: usize = self.put.iter().map(|r| r.value.bytes() + ROW_BYTES).sum();
        let meta = self.metadata.as_ref().map_or(0, |m| m.stored_bytes() + ROW_BYTES);
        tasks + put + self.delete.len() * ROW_BYTES + meta
    }
}

/// The bytes of one row besides its value: its key columns, timestamps and
/// the store's framing (generous: Cassandra's own is about 40).
pub const ROW_BYTES: usize = 96;

/// The bytes of a task's value, in a task row or a record that holds it: its
/// payload, fairness key and dedup id, and room for its fixed fields.
pub fn stored_task_bytes(task: &StoredTask) -> usize {
    task.payload.len() + task.fairness_key.len() + task.dedup_id.as_ref().map_or(0, String::len) + 96
}

/// A queue's settings: its partitions are fixed when it is created, its
/// home may move.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueConfig {
    /// How many partitions the queue has, 1 to
    /// [`MAX_PARTITIONS`](crate::model::validate::MAX_PARTITIONS).
    pub partitions: u32,
    /// The region whose nodes own its partitions (empty: the nodes that name
    /// no region, as in a deployment of one region).
    pub home: String,
    /// How many forced failovers the queue had: each starts a generation of
    /// new partitions, which share no row with the earlier ones (see
    /// [`Store::force_queue_home`]).
    pub generation: u32,
    /// The home of the previous generation (empty in the first).
    pub previous_home: String,
    /// The principal whose request created the queue (empty: a node, an
    /// anonymous caller, or a queue created before this was recorded).
    /// Written with the creation, never changed: the per-principal bound
    /// `matcher.max_queues_per_principal` counts queues by it.
    pub created_by: String,
}

/// Partition numbers of generation `g` are `g * GENERATION_STRIDE + index`
/// for the indexes `0..partitions`: no two generations share a partition.
pub const GENERATION_STRIDE: u32 = 1 << 16;

/// The last generation a queue can reach: its partition numbers still fit
/// a signed 32-bit column.
pub const MAX_GENERATION: u32 = (i32::MAX as u32) / GENERATION_STRIDE - 1;

const _: () = assert!(crate::model::validate::MAX_PARTITIONS <= GENERATION_STRIDE);

impl QueueConfig {
    /// A queue of `partitions` partitions homed in `home`, of the first generation.
    pub fn new(partitions: u32, home: &str) -> QueueConfig {
        QueueConfig {
            partitions,
            home: home.to_owned(),
            generation: 0,
            previous_home: String::new(),
            created_by: String::new(),
        }
    }

    /// This config, recording `principal` as the queue's creator.
    pub fn created_by(self, principal: &str) -> QueueConfig {
        QueueConfig { created_by: principal.to_owned(), ..self }
    }

    /// The number of the partition at `index` (`0..partitions`) in the current generation.
    pub fn partition_number(&self, index: u32) -> u32 {
        numbered(self.generation, index)
    }

    /// The numbers of the current generation's partitions, by index.
    pub fn partition_numbers(&self) -> std::ops::Range<u32> {
        numbered(self.generation, 0)..numbered(self.generation, self.partitions)
    }

    /// The number of the partition of the previous generation at the same
    /// index as partition `number`; `None` in the first generation.
    pub fn previous_of(&self, number: u32) -> Option<u32> {
        let previous = self.generation.checked_sub(1)?;
        Some(numbered(previous, partition_index(number)))
    }
}

fn numbered(generation: u32, index: u32) -> u32 {
    generation * GENERATION_STRIDE + index
}

/// The index (`0..partitions`) of partition `number` in its generation.
pub fn partition_index(number: u32) -> u32 {
    number % GENERATION_STRIDE
}

/// A node of the cluster as the store records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// The address other nodes and clients reach it at; also its identity.
    pub node: String,
    /// The region the node runs in (`cluster.region`; empty: none named).
    pub region: String,
    /// When the node started, in ms since the Unix epoch.
    pub started_unix_ms: i64,
    /// When the node last wrote its heartbeat, in ms since the Unix epoch: once
    /// older than the member timeout, the node counts as dead.
    pub heartbeat_unix_ms: i64,
}

/// One backend under the two contracts a node serves from: the tasks'
/// ([`Store`]) and the visit scheduler's ([`visits::VisitStore`]). Both are
/// the same instance (a data directory has one opener; a Cassandra
/// keyspace, one session per node).
#[derive(Clone, Debug)]
pub struct Stores {
    /// The backend as the tasks' store.
    pub tasks: Arc<dyn Store>,
    /// The same backend as the visit scheduler's store.
    pub visits: Arc<dyn visits::VisitStore>,
}

impl Stores {
    /// A backend that keeps both contracts.
    pub fn of<S: Store + visits::VisitStore>(store: Arc<S>) -> Stores {
        Stores { tasks: store.clone(), visits: store }
    }
}

/// The tasks' storage contract: what a backend must do for Fairway to keep its
/// guarantees (see [`crate::store`]).
#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug + 'static {
    /// The partition's metadata as stored, `None` if it was never created.
    /// Not linearizable with concurrent writes: use it to learn the range id
    /// to pass to [`Store::take_ownership`].
    async fn load_partition(&self, partition: &PartitionId) -> StoreResult<Option<PartitionMeta>>;

    /// Takes (or renews) ownership: if the stored range id is `expected`
    /// (0: the partition does not exist yet, and is created), it becomes
    /// `expected + 1` and the stored metadata is returned with it. Every
    /// write of a previous owner fails from then on; every write that
    /// succeeded before is visible to the new owner's reads.
    ///
    /// The partition is taken for `region` (the region whose Paxos fences the
    /// taker; empty: the fence spans every region): a partition whose
    /// metadata names another region is refused (`HomedElsewhere`) unless
    /// `region` is empty, and one written in another region (its metadata
    /// names another, or `moved_from` is set) is first caught up, so
    /// that every write acknowledged in the old region is visible to reads
    /// in this one (on Cassandra: the partition read at `EACH_QUORUM`, which
    /// repairs the replicas it reads). The returned metadata names `region`
    /// and no `moved_from`.
    ///
    /// Errors: `Fenced` if the range id is not `expected` (nothing changed);
    /// `HomedElsewhere` (nothing changed); `Uncertain` if the outcome is
    /// unknown (load and try again); `Unavailable` when the old region of a
    /// moved partition cannot be read. `owner` is recorded in the metadata,
    /// for operators.
    async fn take_ownership(
        &self,
        partition: &PartitionId,
        expected: i64,
        owner: &str,
        region: &str,
    ) -> StoreResult<PartitionMeta>;

    /// Applies the whole `write` at once, if the range id is still
    /// `range_id`. Tasks' levels are unique; writing a level twice replaces
    /// the task.
    ///
    /// Errors: `Fenced` (nothing written, the caller lost the partition),
    /// `Unavailable` (nothing written, may retry), `Uncertain` (may have
    /// been written: re-read before trusting the buffer), `Invalid` (too
    /// large for the backend, or metadata of another range; nothing written).
    async fn write(&self, partition: &PartitionId, range_id: i64, write: &PartitionWrite) -> StoreResult<()>;

    /// Writes `tasks` (and `metadata`, if given): a [`Store::write`] with no records.
    async fn append(
        &self,
        partition: &PartitionId,
        range_id: i64,
        tasks: &[StoredTask],
        metadata: Option<&PartitionMeta>,
    ) -> StoreResult<()> {
        let write = PartitionWrite { tasks: tasks.to_vec(), metadata: metadata.cloned(), ..PartitionWrite::default() };
        self.write(partition, range_id, &write).await
    }

    /// What one row holds, `None` if absent. Linearizable with every conditional write that
    /// completed or was fenced before it: after an append of unknown outcome
    /// and a [`Store::take_ownership`] by the same owner, it tells whether the
    /// append landed (serial consistency on Cassandra).
    async fn read_row(&self, partition: &PartitionId, row: RowRef) -> StoreResult<Option<StoredRow>>;

    /// Up to `limit` records of `range` (keys in `(after, through]` of one
    /// section), in ascending key order. Fewer than `limit` means there were
    /// no more. Only the range is read: on Cassandra, a clustering slice
    /// bounded on both sides.
    async fn read_records(&self, partition: &PartitionId, range: RecordRange, limit: usize)
    -> StoreResult<Vec<Record>>;

    /// The records of each of `buckets` (keys `(bucket, _)` of `section`),
    /// at most `per_bucket` of each, in ascending key order. At most
    /// [`MAX_BUCKETS_PER_READ`] buckets. Only those buckets are read: on
    /// Cassandra, one query with a clustering slice per bucket.
    async fn read_buckets(
        &self,
        partition: &PartitionId,
        section: Section,
        buckets: &[i64],
        per_bucket: usize,
    ) -> StoreResult<Vec<Record>>;

    /// Up to `limit` tasks of the subqueue with level strictly above `after`,
    /// in ascending level order. Fewer than `limit` means there were no more
    /// at the time of the read.
    async fn read(
        &self,
        partition: &PartitionId,
        priority: Priority,
        after: FairLevel,
        limit: usize,
    ) -> StoreResult<Vec<StoredTask>>;

    /// Deletes every task of the subqueue at or below `through`. Idempotent
    /// and unconditional: callers only delete at or below their ack level.
    async fn delete_through(&self, partition: &PartitionId, priority: Priority, through: FairLevel) -> StoreResult<()>;

    /// Deletes every record of `section` with a key at or below `through`.
    /// Idempotent and unconditional: callers only delete records that no
    /// owner reads any more (below a floor the metadata records).
    async fn delete_records_through(
        &self,
        partition: &PartitionId,
        section: Section,
        through: (i64, i64),
    ) -> StoreResult<()>;

    /// Writes the metadata if the range id is still `metadata.range_id`.
    /// Errors as for [`Store::append`].
    async fn update_metadata(&self, partition: &PartitionId, metadata: &PartitionMeta) -> StoreResult<()>;

    /// Creates the queue with `config` unless it exists; the queue's config
    /// as stored (the existing one, if it did).
    async fn create_queue(&self, queue: &QueueName, config: QueueConfig) -> StoreResult<QueueConfig>;

    /// The queue's config, `None` if it was never created.
    async fn queue(&self, queue: &QueueName) -> StoreResult<Option<QueueConfig>>;

    /// Moves the queue's home to `home` if it is `expected` (a move starts
    /// from the home its caller checked, and two concurrent moves cannot
    /// both start from it); its config as stored after (with another home
    /// than `home` when `expected` was not the home: nothing written), `None`
    /// (nothing written) if it was never created. On Cassandra a conditional
    /// write at `SERIAL`: it needs a majority of all the replicas of the
    /// keyspace, across regions.
    async fn set_queue_home(&self, queue: &QueueName, expected: &str, home: &str) -> StoreResult<Option<QueueConfig>>;

    /// Forced failover, for a home region that is lost: moves the queue's
    /// home to `home` (the home it leaves becomes its `previous_home`) and
    /// starts generation `generation + 1`, if the queue
    /// is in `generation`; its config as stored after (another generation
    /// than `generation + 1`: nothing written, someone else forced it), `None`
    /// (nothing written) if it was never created; `Invalid` past
    /// [`MAX_GENERATION`]. The new generation's partitions share no row with
    /// the old ones. A compare-and-set on the generation (and the home read):
    /// of forced failovers racing from one generation, at most one is
    /// written, and each caller gets the config as stored. On Cassandra at
    /// `SERIAL` (a majority of every region's replicas: with three regions,
    /// one lost) and, when that cannot be had, at `LOCAL_SERIAL` in the
    /// calling region (two regions, one lost); two regions that cannot reach
    /// each other and both fall back can then both force.
    async fn force_queue_home(
        &self,
        queue: &QueueName,
        generation: u32,
        home: &str,
    ) -> StoreResult<Option<QueueConfig>>;

    /// Every queue and its config.
    async fn list_queues(&self) -> StoreResult<Vec<(QueueName, QueueConfig)>>;

    /// Records that `member` is alive (replaces its previous record).
    async fn heartbeat(&self, member: &Member) -> StoreResult<()>;

    /// Every node's last record, live or not.
    async fn members(&self) -> StoreResult<Vec<Member>>;

    /// Forgets a node (on graceful shutdown).
    async fn leave(&self, node: &str) -> StoreResult<()>;

    /// The cluster's secrets: `candidate` is stored as the current secret if
    /// there is none yet, and the stored secrets are returned, the same to
    /// every caller on every node until a rotation. Nodes derive from them
    /// the keys that sign lease tokens and prove a request comes from a
    /// node. Idempotent: after an error, call again with any candidate. On
    /// Cassandra a read that finds the secrets reads at the configured
    /// consistency: after a rotation, a node may read the old ones until
    /// the new have reached its replicas (nodes read again every
    /// [`crate::security::SECRET_RELOAD_INTERVAL`]).
    async fn cluster_secrets(&self, candidate: &[u8; SECRET_BYTES]) -> StoreResult<ClusterSecrets>;

    /// Rotates the cluster's secret, if the current one is `from`: `to`
    /// becomes current, and `from` the previous secret, which nodes sign
    /// with until `signs_until_unix_ms` and accept until
    /// `accepted_until_unix_ms` (see [`PreviousSecret`]); the previous
    /// secret before (if any) is forgotten. Returns the secrets as stored
    /// after: the caller's rotation was written if their current one is
    /// `to` (another current one: nothing written, someone rotated first);
    /// `None` (nothing written) if there is no secret yet. A compare-and-set:
    /// of rotations racing from one secret, at most one is written (on
    /// Cassandra a lightweight transaction at `SERIAL`).
    ///
    /// Errors: `Invalid` if `to` is `from` or `accepted_until_unix_ms <
    /// signs_until_unix_ms` (nothing written); `Uncertain` (may have been
    /// written: read the secrets); `Unavailable`.
    async fn rotate_cluster_secret(
        &self,
        from: &[u8; SECRET_BYTES],
        to: &[u8; SECRET_BYTES],
        signs_until_unix_ms: i64,
        accepted_until_unix_ms: i64,
    ) -> StoreResult<Option<ClusterSecrets>>;

    /// Whether several nodes can use this store at once (and so need
    /// membership and fencing), or only one process can open it.
    fn is_shared(&self) -> bool;

    /// Orderly close: flush and release what the backend holds.
    async fn close(&self) -> StoreResult<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn homed(region: &str, moved_from: &str) -> PartitionMeta {
        PartitionMeta {
            range_id: 3,
            owner: "n".into(),
            region: region.into(),
            moved_from: moved_from.into(),
            ..PartitionMeta::default()
        }
    }

    #[test]
    fn a_hand_over_names_the_next_region_only_when_it_changes() {
        let to_b = homed("a", "").handed_over("b");
        assert_eq!((to_b.owner.as_str(), to_b.region.as_str(), to_b.moved_from.as_str()), ("", "b", "a"));
        assert_eq!(to_b.range_id, 3, "a hand-over keeps the range id (the next owner fences)");
        let within = homed("a", "").handed_over("a");
        assert_eq!((within.region.as_str(), within.moved_from.as_str()), ("a", ""));
        let global = homed("", "").handed_over("b");
        assert_eq!((global.region.as_str(), global.moved_from.as_str()), ("", ""), "no region: stays so");
    }

    #[test]
    fn a_taker_of_another_region_is_refused_and_one_of_none_takes_any() {
        let stored = homed("a", "");
        assert_eq!(
            taken_meta(stored.clone(), 3, "m", "b").unwrap_err(),
            StoreError::HomedElsewhere { region: "a".into() }
        );
        let taken = taken_meta(stored.clone(), 3, "m", "a").unwrap();
        assert_eq!((taken.range_id, taken.owner.as_str(), taken.region.as_str()), (4, "m", "a"));
        assert_eq!(taken_meta(stored, 3, "m", "").unwrap().region, "");
        let moved = taken_meta(homed("b", "a"), 3, "m", "b").unwrap();
        assert_eq!((moved.region.as_str(), moved.moved_from.as_str()), ("b", ""), "taking clears the move");
    }
}
