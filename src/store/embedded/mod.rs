//! The embedded store: one redb file in a data directory, for a single node.
//!
//! Every write is one ACID transaction, durable when it commits; redb's single
//! writer makes the range-id compare-and-set a plain read-then-write. Deletes
//! are physical, so reads from the ack level never skip dead rows. The file is
//! locked: a second process opening the same directory is refused.

mod visits;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::codec::{decode_meta, decode_record_at, decode_row, decode_task, encode_meta, encode_record, encode_task};
use super::{
    ClusterSecrets, MAX_GENERATION, Member, PartitionMeta, PartitionWrite, PreviousSecret, QueueConfig, Record,
    RecordKey, RecordRange, RowRef, SECRET_BYTES, Section, Store, StoreError, StoreResult, StoredRow,
    check_metadata_range, check_rotation, taken_meta,
};
use crate::model::{FairLevel, PartitionId, Priority, QueueName, StoredTask, ValidationError, validate};

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
/// The home of each queue that has one.
const QUEUE_HOMES: TableDefinition<&str, &str> = TableDefinition::new("queue_homes");
/// The generation and previous home of each queue that had a forced failover.
const QUEUE_GENERATIONS: TableDefinition<&str, (u32, &str)> = TableDefinition::new("queue_generations");
/// The principal that created each queue that names one.
const QUEUE_CREATORS: TableDefinition<&str, &str> = TableDefinition::new("queue_creators");
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
        txn.open_table(QUEUE_HOMES).map_err(|e| io(e.to_string()))?;
        txn.open_table(QUEUE_GENERATIONS).map_err(|e| io(e.to_string()))?;
        txn.open_table(QUEUE_CREATORS).map_err(|e| io(e.to_string()))?;
        visits::create_tables(&txn).map_err(|e| io(e.to_string()))?;
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
                let current = config_of(&homes, &generations, &creators, &queue, partitions)?;
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

fn stored_range_id(
    meta: &redb::Table<(&str, u32), &[u8]>,
    partition: &PartitionId,
) -> StoreResult<Option<PartitionMeta>> {
    meta.get((partition.queue.as_str(), partition.partition))
        .map_err(unavailable)?
        .map(|row| decode_meta(row.value()))
        .transpose()
}

/// The home of `queue` (empty if it has none).
fn home_of(homes: &impl ReadableTable<&'static str, &'static str>, queue: &QueueName) -> StoreResult<String> {
    Ok(homes.get(queue.as_str()).map_err(unavailable)?.map(|home| home.value().to_owned()).unwrap_or_default())
}

/// The config of `queue`, which has `partitions`, from its other tables.
fn config_of(
    homes: &impl ReadableTable<&'static str, &'static str>,
    generations: &impl ReadableTable<&'static str, (u32, &'static str)>,
    creators: &impl ReadableTable<&'static str, &'static str>,
    queue: &QueueName,
    partitions: u32,
) -> StoreResult<QueueConfig> {
    let (generation, previous_home) = match generations.get(queue.as_str()).map_err(unavailable)? {
        Some(stored) => (stored.value().0, stored.value().1.to_owned()),
        None => (0, String::new()),
    };
    let created_by =
        creators.get(queue.as_str()).map_err(unavailable)?.map(|c| c.value().to_owned()).unwrap_or_default();
    Ok(QueueConfig { partitions, home: home_of(homes, queue)?, generation, previous_home, created_by })
}

/// Stores `home` as the home of `queue` (none, when empty).
fn put_home(homes: &mut redb::Table<&'static str, &'static str>, queue: &QueueName, home: &str) -> StoreResult<()> {
    if home.is_empty() {
        homes.remove(queue.as_str()).map_err(unavailable)?;
    } else {
        homes.insert(queue.as_str(), home).map_err(unavailable)?;
    }
    Ok(())
}

fn check_range(current: Option<&PartitionMeta>, range_id: i64) -> StoreResult<()> {
    let current_range_id = current.map_or(0, |m| m.range_id);
    if current_range_id != range_id {
        return Err(StoreError::Fenced { current_range_id });
    }
    Ok(())
}

fn priority_byte(priority: Priority) -> u8 {
    priority.get() as u8
}

/// The kind and `(pass, id)` key of a row.
fn row_key(row: RowRef) -> (u8, (i64, i64)) {
    match row {
        RowRef::Task(priority, level) => (priority_byte(priority), (level.pass, level.id)),
        RowRef::Record(at) => (at.section.code(), at.key),
    }
}

#[async_trait]
impl Store for EmbeddedStore {
    async fn load_partition(&self, partition: &PartitionId) -> StoreResult<Option<PartitionMeta>> {
        let partition = partition.clone();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(META).map_err(unavailable)?;
            table
                .get((partition.queue.as_str(), partition.partition))
                .map_err(unavailable)?
                .map(|row| decode_meta(row.value()))
                .transpose()
        })
        .await
    }

    async fn take_ownership(
        &self,
        partition: &PartitionId,
        expected: i64,
        owner: &str,
        region: &str,
    ) -> StoreResult<PartitionMeta> {
        let partition = partition.clone();
        let (owner, region) = (owner.to_owned(), region.to_owned());
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            let taken = {
                let mut table = txn.open_table(META).map_err(unavailable)?;
                let current = stored_range_id(&table, &partition)?;
                check_range(current.as_ref(), expected)?;
                // One process: every write it acknowledged is already visible.
                let taken = taken_meta(current.unwrap_or_default(), expected, &owner, &region)?;
                table
                    .insert((partition.queue.as_str(), partition.partition), encode_meta(&taken).as_slice())
                    .map_err(unavailable)?;
                taken
            };
            txn.commit().map_err(uncertain)?;
            Ok(taken)
        })
        .await
    }

    async fn write(&self, partition: &PartitionId, range_id: i64, write: &PartitionWrite) -> StoreResult<()> {
        check_metadata_range(range_id, write.metadata.as_ref())?;
        let partition = partition.clone();
        let mut rows: Vec<(u8, (i64, i64), Vec<u8>)> = write
            .tasks
            .iter()
            .map(|t| (priority_byte(t.priority), (t.level.pass, t.level.id), encode_task(t)))
            .collect();
        rows.extend(write.put.iter().map(|r| (r.at.section.code(), r.at.key, encode_record(&r.value))));
        let deletes: Vec<(u8, (i64, i64))> = write.delete.iter().map(|at| (at.section.code(), at.key)).collect();
        let meta_row = write.metadata.as_ref().map(encode_meta);
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            {
                let mut meta_table = txn.open_table(META).map_err(unavailable)?;
                check_range(stored_range_id(&meta_table, &partition)?.as_ref(), range_id)?;
                let (queue, number) = (partition.queue.as_str(), partition.partition);
                let mut task_table = txn.open_table(TASKS).map_err(unavailable)?;
                for (kind, (pass, id), bytes) in &rows {
                    task_table.insert((queue, number, *kind, *pass, *id), bytes.as_slice()).map_err(unavailable)?;
                }
                for (kind, (pass, id)) in &deletes {
                    task_table.remove((queue, number, *kind, *pass, *id)).map_err(unavailable)?;
                }
                if let Some(meta_row) = &meta_row {
                    meta_table.insert((queue, number), meta_row.as_slice()).map_err(unavailable)?;
                }
            }
            txn.commit().map_err(uncertain)
        })
        .await
    }

    async fn read_row(&self, partition: &PartitionId, row: RowRef) -> StoreResult<Option<StoredRow>> {
        let (kind, key) = row_key(row);
        let partition = partition.clone();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(TASKS).map_err(unavailable)?;
            let found =
                table.get((partition.queue.as_str(), partition.partition, kind, key.0, key.1)).map_err(unavailable)?;
            found.map(|value| decode_row(row, value.value())).transpose()
        })
        .await
    }

    async fn read_records(
        &self,
        partition: &PartitionId,
        range: RecordRange,
        limit: usize,
    ) -> StoreResult<Vec<Record>> {
        let section = range.section;
        let rows = self.read_rows(partition, section.code(), range.after, range.through, limit).await?;
        rows.into_iter().map(|(key, bytes)| decode_record_at(RecordKey { section, key }, &bytes)).collect()
    }

    async fn read_buckets(
        &self,
        partition: &PartitionId,
        section: Section,
        buckets: &[i64],
        per_bucket: usize,
    ) -> StoreResult<Vec<Record>> {
        let (partition, mut buckets) = (partition.clone(), buckets.to_vec());
        buckets.sort_unstable();
        buckets.dedup();
        let kind = section.code();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(TASKS).map_err(unavailable)?;
            let (queue, number) = (partition.queue.as_str(), partition.partition);
            let mut records = Vec::new();
            for bucket in buckets {
                let rows = table
                    .range::<(&str, u32, u8, i64, i64)>(
                        (queue, number, kind, bucket, i64::MIN)..=(queue, number, kind, bucket, i64::MAX),
                    )
                    .map_err(unavailable)?;
                for row in rows.take(per_bucket) {
                    let (key, value) = row.map_err(unavailable)?;
                    let (_, _, _, bucket, slot) = key.value();
                    records.push(decode_record_at(RecordKey { section, key: (bucket, slot) }, value.value())?);
                }
            }
            Ok(records)
        })
        .await
    }

    async fn read(
        &self,
        partition: &PartitionId,
        priority: Priority,
        after: FairLevel,
        limit: usize,
    ) -> StoreResult<Vec<StoredTask>> {
        let rows = self
            .read_rows(partition, priority_byte(priority), (after.pass, after.id), (i64::MAX, i64::MAX), limit)
            .await?;
        rows.into_iter().map(|((pass, id), bytes)| decode_task(FairLevel::new(pass, id), priority, &bytes)).collect()
    }

    async fn delete_through(&self, partition: &PartitionId, priority: Priority, through: FairLevel) -> StoreResult<()> {
        self.delete_rows_through(partition, priority_byte(priority), (through.pass, through.id)).await
    }

    async fn delete_records_through(
        &self,
        partition: &PartitionId,
        section: Section,
        through: (i64, i64),
    ) -> StoreResult<()> {
        self.delete_rows_through(partition, section.code(), through).await
    }

    fn is_shared(&self) -> bool {
        false
    }

    async fn update_metadata(&self, partition: &PartitionId, metadata: &PartitionMeta) -> StoreResult<()> {
        let write = PartitionWrite { metadata: Some(metadata.clone()), ..PartitionWrite::default() };
        self.write(partition, metadata.range_id, &write).await
    }

    async fn create_queue(&self, queue: &QueueName, config: QueueConfig) -> StoreResult<QueueConfig> {
        let queue = queue.clone();
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            let stored = {
                let mut table = txn.open_table(QUEUES).map_err(unavailable)?;
                let mut homes = txn.open_table(QUEUE_HOMES).map_err(unavailable)?;
                let generations = txn.open_table(QUEUE_GENERATIONS).map_err(unavailable)?;
                let mut creators = txn.open_table(QUEUE_CREATORS).map_err(unavailable)?;
                let existing = table.get(queue.as_str()).map_err(unavailable)?.map(|row| row.value());
                match existing {
                    Some(partitions) => config_of(&homes, &generations, &creators, &queue, partitions)?,
                    None => {
                        table.insert(queue.as_str(), config.partitions).map_err(unavailable)?;
                        put_home(&mut homes, &queue, &config.home)?;
                        if !config.created_by.is_empty() {
                            creators.insert(queue.as_str(), config.created_by.as_str()).map_err(unavailable)?;
                        }
                        QueueConfig { generation: 0, previous_home: String::new(), ..config }
                    }
                }
            };
            txn.commit().map_err(uncertain)?;
            Ok(stored)
        })
        .await
    }

    async fn queue(&self, queue: &QueueName) -> StoreResult<Option<QueueConfig>> {
        let queue = queue.clone();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(QUEUES).map_err(unavailable)?;
            let partitions = table.get(queue.as_str()).map_err(unavailable)?.map(|row| row.value());
            let Some(partitions) = partitions else { return Ok(None) };
            let homes = txn.open_table(QUEUE_HOMES).map_err(unavailable)?;
            let generations = txn.open_table(QUEUE_GENERATIONS).map_err(unavailable)?;
            let creators = txn.open_table(QUEUE_CREATORS).map_err(unavailable)?;
            Ok(Some(config_of(&homes, &generations, &creators, &queue, partitions)?))
        })
        .await
    }

    async fn set_queue_home(&self, queue: &QueueName, expected: &str, home: &str) -> StoreResult<Option<QueueConfig>> {
        let (queue, expected, home) = (queue.clone(), expected.to_owned(), home.to_owned());
        self.change_queue(queue, move |current| (current.home == expected).then_some(QueueConfig { home, ..current }))
            .await
    }

    async fn force_queue_home(
        &self,
        queue: &QueueName,
        generation: u32,
        home: &str,
    ) -> StoreResult<Option<QueueConfig>> {
        if generation >= MAX_GENERATION {
            return Err(StoreError::Invalid(format!("queue {queue} had {MAX_GENERATION} forced failovers, the most")));
        }
        let (queue, home) = (queue.clone(), home.to_owned());
        self.change_queue(queue, move |mut current| {
            (current.generation == generation).then(|| QueueConfig {
                previous_home: std::mem::replace(&mut current.home, home),
                generation: generation + 1,
                ..current
            })
        })
        .await
    }

    async fn list_queues(&self) -> StoreResult<Vec<(QueueName, QueueConfig)>> {
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(QUEUES).map_err(unavailable)?;
            let homes = txn.open_table(QUEUE_HOMES).map_err(unavailable)?;
            let generations = txn.open_table(QUEUE_GENERATIONS).map_err(unavailable)?;
            let creators = txn.open_table(QUEUE_CREATORS).map_err(unavailable)?;
            let mut queues = Vec::new();
            for row in table.iter().map_err(unavailable)? {
                let (name, partitions) = row.map_err(unavailable)?;
                let name = validate::queue_name("queue", name.value())
                    .map_err(|e| StoreError::Corrupt(format!("stored queue name: {e}")))?;
                let config = config_of(&homes, &generations, &creators, &name, partitions.value())?;
                queues.push((name, config));
            }
            Ok(queues)
        })
        .await
    }

    async fn heartbeat(&self, member: &Member) -> StoreResult<()> {
        let member = member.clone();
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            txn.open_table(MEMBERS)
                .map_err(unavailable)?
                .insert(member.node.as_str(), (member.started_unix_ms, member.heartbeat_unix_ms))
                .map_err(unavailable)?;
            let mut regions = txn.open_table(MEMBER_REGIONS).map_err(unavailable)?;
            if member.region.is_empty() {
                regions.remove(member.node.as_str()).map_err(unavailable)?;
            } else {
                regions.insert(member.node.as_str(), member.region.as_str()).map_err(unavailable)?;
            }
            drop(regions);
            txn.commit().map_err(uncertain)
        })
        .await
    }

    async fn members(&self) -> StoreResult<Vec<Member>> {
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(MEMBERS).map_err(unavailable)?;
            let regions = txn.open_table(MEMBER_REGIONS).map_err(unavailable)?;
            let mut members = Vec::new();
            for row in table.iter().map_err(unavailable)? {
                let (node, times) = row.map_err(unavailable)?;
                let (started_unix_ms, heartbeat_unix_ms) = times.value();
                let region = regions.get(node.value()).map_err(unavailable)?.map(|r| r.value().to_owned());
                members.push(Member {
                    node: node.value().to_owned(),
                    region: region.unwrap_or_default(),
                    started_unix_ms,
                    heartbeat_unix_ms,
                });
            }
            Ok(members)
        })
        .await
    }

    async fn leave(&self, node: &str) -> StoreResult<()> {
        let node = node.to_owned();
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            txn.open_table(MEMBERS).map_err(unavailable)?.remove(node.as_str()).map_err(unavailable)?;
            txn.open_table(MEMBER_REGIONS).map_err(unavailable)?.remove(node.as_str()).map_err(unavailable)?;
            txn.commit().map_err(uncertain)
        })
        .await
    }

    async fn cluster_secrets(&self, candidate: &[u8; SECRET_BYTES]) -> StoreResult<ClusterSecrets> {
        let candidate = *candidate;
        self.blocking(move |db| {
            // Nodes read the secrets every few seconds: a read transaction
            // when they exist, a write (and its sync) only to store the first.
            let read = db.begin_read().map_err(unavailable)?;
            if let Some(secrets) = stored_secrets(&read.open_table(SECRETS).map_err(unavailable)?)? {
                return Ok(secrets);
            }
            drop(read);
            let txn = db.begin_write().map_err(unavailable)?;
            let secrets = {
                let mut table = txn.open_table(SECRETS).map_err(unavailable)?;
                match stored_secrets(&table)? {
                    Some(secrets) => secrets,
                    None => {
                        table.insert("", candidate.as_slice()).map_err(unavailable)?;
                        ClusterSecrets::first(candidate)
                    }
                }
            };
            txn.commit().map_err(uncertain)?;
            Ok(secrets)
        })
        .await
    }

    async fn rotate_cluster_secret(
        &self,
        from: &[u8; SECRET_BYTES],
        to: &[u8; SECRET_BYTES],
        signs_until_unix_ms: i64,
        accepted_until_unix_ms: i64,
    ) -> StoreResult<Option<ClusterSecrets>> {
        check_rotation(from, to, signs_until_unix_ms, accepted_until_unix_ms)?;
        let (from, to) = (*from, *to);
        self.blocking(move |db| {
            // One write transaction: redb serializes them, so the compare and
            // the set cannot interleave with another rotation's.
            let txn = db.begin_write().map_err(unavailable)?;
            let after = {
                let mut table = txn.open_table(SECRETS).map_err(unavailable)?;
                match stored_secrets(&table)? {
                    Some(stored) if stored.current == from => {
                        let previous = PreviousSecret { secret: from, signs_until_unix_ms, accepted_until_unix_ms };
                        table.insert("", to.as_slice()).map_err(unavailable)?;
                        table.insert(PREVIOUS_SECRET, encode_previous(&previous).as_slice()).map_err(unavailable)?;
                        Some(ClusterSecrets { current: to, previous: Some(previous) })
                    }
                    other => other,
                }
            };
            txn.commit().map_err(uncertain)?;
            Ok(after)
        })
        .await
    }
}

/// The secrets `table` holds, `None` if no secret was stored yet.
fn stored_secrets(table: &impl ReadableTable<&'static str, &'static [u8]>) -> StoreResult<Option<ClusterSecrets>> {
    let Some(current) = table.get("").map_err(unavailable)?.map(|secret| secret.value().to_vec()) else {
        return Ok(None);
    };
    let current = current
        .try_into()
        .map_err(|s: Vec<u8>| StoreError::Corrupt(format!("a cluster secret of {} bytes", s.len())))?;
    let previous = table.get(PREVIOUS_SECRET).map_err(unavailable)?.map(|p| decode_previous(p.value())).transpose()?;
    Ok(Some(ClusterSecrets { current, previous }))
}

fn encode_previous(previous: &PreviousSecret) -> Vec<u8> {
    let mut bytes = previous.secret.to_vec();
    bytes.extend_from_slice(&previous.signs_until_unix_ms.to_be_bytes());
    bytes.extend_from_slice(&previous.accepted_until_unix_ms.to_be_bytes());
    bytes
}

fn decode_previous(bytes: &[u8]) -> StoreResult<PreviousSecret> {
    let corrupt = || StoreError::Corrupt(format!("a previous cluster secret of {} bytes", bytes.len()));
    if bytes.len() != SECRET_BYTES + 16 {
        return Err(corrupt());
    }
    let (secret, times) = bytes.split_at(SECRET_BYTES);
    let time = |at: usize| i64::from_be_bytes(times[at..at + 8].try_into().expect("8 bytes"));
    Ok(PreviousSecret {
        secret: secret.try_into().map_err(|_| corrupt())?,
        signs_until_unix_ms: time(0),
        accepted_until_unix_ms: time(8),
    })
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
