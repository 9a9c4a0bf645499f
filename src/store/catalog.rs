//! The queue catalog: each queue's partition count (fixed at creation),
//! home region, generation and stored settings. A queue is created once
//! (the first config wins); its home moves only by compare-and-set from the
//! home (or generation) its caller read, its settings from the version its
//! caller read.

use async_trait::async_trait;

use super::StoreResult;
use super::queue_settings::QueueSettings;
use crate::model::QueueName;

/// A queue's settings: its partitions are fixed when it is created, its
/// home may move.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueConfig {
    /// How many partitions the queue has, 1 to
    /// [`MAX_PARTITIONS`](crate::model::validate::MAX_PARTITIONS).
    pub partitions: u32,
    /// The region whose nodes own its partitions (empty: the nodes that name
    /// no region, as in a deployment of one region).
    pub home: String,
    /// How many forced failovers the queue had: each starts a generation of
    /// new partitions, which share no row with the earlier ones (see
    /// [`QueueCatalog::force_queue_home`]).
    pub generation: u32,
    /// The home of the previous generation (empty in the first).
    pub previous_home: String,
    /// The principal whose request created the queue (empty: a node, an
    /// anonymous caller, or a queue created before this was recorded).
    /// Written with the creation, never changed: the per-principal bound
    /// `matcher.max_queues_per_principal` counts queues by it.
    pub created_by: String,
    /// The settings stored with the queue (`UpdateQueue`, `PauseQueue`),
    /// over each node's config file; none at creation.
    pub settings: QueueSettings,
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
            settings: QueueSettings::default(),
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

/// The queues and their configs.
#[async_trait]
pub trait QueueCatalog: Send + Sync + std::fmt::Debug + 'static {
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

    /// Stores `settings` as the queue's, at version `expected + 1`, if its
    /// settings are at version `expected`; its config as stored after
    /// (settings of another version than `expected + 1`: nothing written,
    /// someone else changed them first), `None` (nothing written) if it was
    /// never created. The caller validated `settings`. On Cassandra a
    /// conditional write at `SERIAL`, like a move of the home.
    async fn update_queue_settings(
        &self,
        queue: &QueueName,
        expected: u64,
        settings: &QueueSettings,
    ) -> StoreResult<Option<QueueConfig>>;

    /// Every queue and its config.
    async fn list_queues(&self) -> StoreResult<Vec<(QueueName, QueueConfig)>>;
}
