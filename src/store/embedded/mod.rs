//! The embedded store: one redb file in a data directory, for a single node.
//!
//! Every write is one ACID transaction, durable when it commits; redb's single
//! writer makes the range-id compare-and-set a plain read-then-write. Deletes
//! are physical, so reads from the ack level never skip dead rows. The file is
//! locked: a second process opening the same directory is refused.

mod catalog;
mod leases;
mod members;
mod partitions;
mod schedules;
mod secrets;
mod visits;

use self::catalog::{config_of, put_home};

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::{QueueConfig, Store, StoreError, StoreResult};
use crate::model::{PartitionId, QueueName, ValidationError};

/// (queue, partition) → encoded `PartitionMeta`.
const META: TableDefinition<(&str, u32), &[u8]> = TableDefinition::new("partition_meta");
/// (queue, partition, priority, pass, id) → encoded task; (queue, partition,
/// section code, key) → a record.
const TASKS: TableDefinition<(&str, u32, u8, i64, i64), &[u8]> = TableDefinition::new("tasks");
/// queue → partition count.
const QUEUES: TableDefinition<&str, u32> = TableDefinition::new("queues");
/// node → (started, last heartbeat), in Unix ms.
const MEMBERS: TableDefinition<&str, (i64, i64)> = TableDefinition::new("members");
/// The region of each member that names one (tables of their own, so that
/// the stores of earlier versions open as they are).
const MEMBER_REGIONS: TableDefinition<&str, &str> = TableDefinition::new("member_regions");
/// The address of each member named apart from it (`cluster.node_id`).
const MEMBER_ADDRESSES: TableDefinition<&str, &str> = TableDefinition::new("member_addresses");
/// The home of each queue that has one.
const QUEUE_HOMES: TableDefinition<&str, &str> = TableDefinition::new("queue_homes");
/// The generation and previous home of each queue that had a forced failover.
const QUEUE_GENERATIONS: TableDefinition<&str, (u32, &str)> = TableDefinition::new("queue_generations");
/// The principal that created each queue that names one.
const QUEUE_CREATORS: TableDefinition<&str, &str> = TableDefinition::new("queue_creators");
/// The stored settings of each queue that has some: their version and their
/// stored form ([`QueueSettings::encode`](crate::store::QueueSettings::encode)).
const QUEUE_SETTINGS: TableDefinition<&str, (u64, &str)> = TableDefinition::new("queue_settings");
/// The cluster's current secret, under the key `""`; the previous one
/// under [`PREVIOUS_SECRET`] (its bytes, then the two times of
/// [`PreviousSecret`](super::PreviousSecret), big-endian).
const SECRETS: TableDefinition<&str, &[u8]> = TableDefinition::new("cluster_secret");

/// The key of the previous secret in [`SECRETS`].
const PREVIOUS_SECRET: &str = "previous";

/// The file inside the data directory.
pub const DATA_FILE: &str = "fairway.redb";

/// The embedded store: a redb file of one data directory, locked to this process.
#[derive(Clone)]
pub struct EmbeddedStore {
    db: Arc<Database>,
    path: PathBuf,
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStore").field("path", &self.path).finish()
    }
}

/// Settings of the embedded store (section `[embedded]`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmbeddedConfig {
    /// Memory for redb's page cache, in MiB. The queue reads sequentially
    /// from the ack level and appends at the end, so a small cache serves it;
    /// this is most of the server's memory with a large backlog.
    pub cache_mib: usize,
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        EmbeddedConfig { cache_mib: 64 }
    }
}

impl EmbeddedConfig {
    /// Checks section `[embedded]`; the error names the key.
    pub fn validate(&self) -> Result<(), ValidationError> {
        if !(1..=65_536).contains(&self.cache_mib) {
            return Err(ValidationError::new("embedded.cache_mib", "must be 1 to 65536 (MiB)"));
        }
        Ok(())
    }
}

/// Why a data directory could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Another process has the store's file open.
    #[error("data directory {dir}: another process has it open (is another `fairway serve` running on it?)")]
    InUse {
        /// The data directory.
        dir: PathBuf,
    },
    /// The directory or its file could not be created, opened or set up.
    #[error("data directory {dir}: {message}")]
    Io {
        /// The data directory.
        dir: PathBuf,
        /// What failed.
        message: String,
    },
}

/// Creates `dir` (and its missing parents) readable by this user only, and
/// `file` in it likewise, or narrows an existing `file` to this user: the
/// file holds the cluster's secret, from which lease tokens and node proofs
/// are made.
fn owner_only(dir: &Path, file: &Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| format!("cannot create it: {e}"))?;
    let opened = std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(file);
    let metadata = opened.and_then(|f| f.metadata()).map_err(|e| format!("cannot open {}: {e}", file.display()))?;
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600)).map_err(|e| {
            format!("{} is readable by others (mode {mode:o}) and cannot be narrowed: {e}", file.display())
        })?;
        tracing::warn!(file = %file.display(), "the data file was readable by others (mode {mode:o}); it is now 600");
    }
    Ok(())
}

impl EmbeddedStore {
    /// Opens (creating if needed) the store in `dir`, with the default settings.
    pub fn open(dir: &Path) -> Result<Self, OpenError> {
        EmbeddedStore::open_with(dir, &EmbeddedConfig::default())
    }

    /// Opens (creating if needed) the store in `dir`.
    pub fn open_with(dir: &Path, config: &EmbeddedConfig) -> Result<Self, OpenError> {
        let io = |message: String| OpenError::Io { dir: dir.to_owned(), message };
        let path = dir.join(DATA_FILE);
        owner_only(dir, &path).map_err(io)?;
        let db =
            Database::builder().set_cache_size(config.cache_mib * 1024 * 1024).create(&path).map_err(|e| match e {
                redb::DatabaseError::DatabaseAlreadyOpen => OpenError::InUse { dir: dir.to_owned() },
                other => io(format!("cannot open {}: {other}", path.display())),
            })?;
        let txn = db.begin_write().map_err(|e| io(e.to_string()))?;
        txn.open_table(META).map_err(|e| io(e.to_string()))?;
        txn.open_table(TASKS).map_err(|e| io(e.to_string()))?;
        txn.open_table(QUEUES).map_err(|e| io(e.to_string()))?;
        txn.open_table(MEMBERS).map_err(|e| io(e.to_string()))?;
        txn.open_table(SECRETS).map_err(|e| io(e.to_string()))?;
        txn.open_table(MEMBER_REGIONS).map_err(|e| io(e.to_string()))?;
        txn.open_table(MEMBER_ADDRESSES).map_err(|e| io(e.to_string()))?;
        txn.open_table(QUEUE_HOMES).map_err(|e| io(e.to_string()))?;
        txn.open_table(QUEUE_GENERATIONS).map_err(|e| io(e.to_string()))?;
        txn.open_table(QUEUE_CREATORS).map_err(|e| io(e.to_string()))?;
        txn.open_table(QUEUE_SETTINGS).map_err(|e| io(e.to_string()))?;
        visits::create_tables(&txn).map_err(|e| io(e.to_string()))?;
        schedules::create_tables(&txn).map_err(|e| io(e.to_string()))?;
        leases::create_tables(&txn).map_err(|e| io(e.to_string()))?;
        txn.commit().map_err(|e| io(e.to_string()))?;
        Ok(EmbeddedStore { db: Arc::new(db), path })
    }

    /// Up to `limit` rows of one kind with `(pass, id)` in `(after, through]`.
    async fn read_rows(
        &self,
        partition: &PartitionId,
        kind: u8,
        after: (i64, i64),
        through: (i64, i64),
        limit: usize,
    ) -> StoreResult<Vec<((i64, i64), Vec<u8>)>> {
        let partition = partition.clone();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(TASKS).map_err(unavailable)?;
            let (queue, number) = (partition.queue.as_str(), partition.partition);
            let lower = (queue, number, kind, after.0, after.1);
            let upper = (queue, number, kind, through.0, through.1);
            let range = table
                .range::<(&str, u32, u8, i64, i64)>((
                    std::ops::Bound::Excluded(lower),
                    std::ops::Bound::Included(upper),
                ))
                .map_err(unavailable)?;
            let mut rows = Vec::with_capacity(limit.min(1024));
            for row in range.take(limit) {
                let (key, value) = row.map_err(unavailable)?;
                let (_, _, _, pass, id) = key.value();
                rows.push(((pass, id), value.value().to_vec()));
            }
            Ok(rows)
        })
        .await
    }

    /// Deletes the rows of one kind with `(pass, id)` at or below `through`.
    async fn delete_rows_through(&self, partition: &PartitionId, kind: u8, through: (i64, i64)) -> StoreResult<()> {
        let partition = partition.clone();
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            {
                let mut table = txn.open_table(TASKS).map_err(unavailable)?;
                let (queue, number) = (partition.queue.as_str(), partition.partition);
                let lower = (queue, number, kind, i64::MIN, i64::MIN);
                let upper = (queue, number, kind, through.0, through.1);
                table.retain_in::<(&str, u32, u8, i64, i64), _>(lower..=upper, |_, _| false).map_err(unavailable)?;
            }
            txn.commit().map_err(uncertain)
        })
        .await
    }

    /// Applies `change` to the stored config of `queue` in one transaction:
    /// the config it returns is stored, `None` stores nothing. The config as
    /// stored after, `None` if the queue was never created.
    async fn change_queue(
        &self,
        queue: QueueName,
        change: impl FnOnce(QueueConfig) -> Option<QueueConfig> + Send + 'static,
    ) -> StoreResult<Option<QueueConfig>> {
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            let partitions = {
                let queues = txn.open_table(QUEUES).map_err(unavailable)?;
                let stored = queues.get(queue.as_str()).map_err(unavailable)?;
                stored.map(|row| row.value())
            };
            let Some(partitions) = partitions else { return Ok(None) };
            let changed = {
                let mut homes = txn.open_table(QUEUE_HOMES).map_err(unavailable)?;
                let mut generations = txn.open_table(QUEUE_GENERATIONS).map_err(unavailable)?;
                let creators = txn.open_table(QUEUE_CREATORS).map_err(unavailable)?;
                let settings = txn.open_table(QUEUE_SETTINGS).map_err(unavailable)?;
                let current = config_of(&homes, &generations, &creators, &settings, &queue, partitions)?;
                let Some(changed) = change(current.clone()) else { return Ok(Some(current)) };
                put_home(&mut homes, &queue, &changed.home)?;
                let generation = (changed.generation, changed.previous_home.as_str());
                generations.insert(queue.as_str(), generation).map_err(unavailable)?;
                changed
            };
            txn.commit().map_err(uncertain)?;
            Ok(Some(changed))
        })
        .await
    }

    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Database) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || work(&db))
            .await
            .map_err(|e| StoreError::Uncertain(format!("store task failed: {e}")))?
    }
}

/// Errors before the commit: nothing was written.
fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

/// Errors of the commit itself: it may or may not be on disk.
fn uncertain(e: impl std::fmt::Display) -> StoreError {
    StoreError::Uncertain(e.to_string())
}

#[async_trait]
impl Store for EmbeddedStore {
    fn is_shared(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).expect("stat").permissions().mode() & 0o777
    }

    #[test]
    fn the_data_directory_and_file_are_the_owners_alone() {
        let scratch = tempfile::tempdir().expect("a scratch directory");
        let dir = scratch.path().join("fresh/data");
        let store = EmbeddedStore::open(&dir).expect("open");
        let file = dir.join(DATA_FILE);
        assert_eq!((mode(&dir), mode(&file)), (0o700, 0o600));
        drop(store);
        // A file left readable by others (an older version, a copy) is narrowed.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        drop(EmbeddedStore::open(&dir).expect("open again"));
        assert_eq!(mode(&file), 0o600);
    }
}
