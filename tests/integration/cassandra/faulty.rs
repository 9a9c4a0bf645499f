//! A store that fails the operations a test names, and passes everything
//! else to a real one: the faults of a Cassandra cut off or timing out, at
//! the exact step a test needs.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use fairway::model::{FairLevel, PartitionId, Priority, QueueName, StoredTask};
use fairway::store::{
    ClusterSecrets, Member, MemberStore, PartitionMeta, PartitionStore, PartitionWrite, QueueCatalog, QueueConfig,
    Record, RecordRange, RowRef, SECRET_BYTES, SecretStore, Section, Store, StoreError, StoreResult, StoredRow,
};

#[derive(Debug)]
pub(super) struct FaultyStore {
    inner: Arc<dyn Store>,
    /// `members` fails while set (the members' partition lost its quorum).
    pub members_fail: AtomicBool,
    /// `members` never answers while set (a coordinator waiting on a dead
    /// replica, up to the client timeout).
    pub members_hang: AtomicBool,
    /// `list_queues` fails while set (a range read timed out).
    pub listing_fails: AtomicBool,
    /// The next this many `update_metadata` calls fail (certainly not applied).
    pub metadata_failures: AtomicU32,
    /// The next this many `take_ownership` calls fail (certainly not applied).
    pub fence_failures: AtomicU32,
    /// The next this many writes time out without landing, and land later:
    /// just before the next conditional operation on their partition that
    /// gets through (as Cassandra completes an accepted Paxos proposal at
    /// the next round).
    pub late_writes: AtomicU32,
    /// Every write waits this many ms before it goes to the store (a slow
    /// link), so that others queue behind it.
    pub write_delay_ms: AtomicU32,
    /// The next this many `update_metadata` calls land, then time out
    /// (outcome unknown to the caller).
    pub metadata_landing_timeouts: AtomicU32,
    /// Dedup buckets read so far.
    pub dedup_buckets_read: AtomicU32,
    /// Every write, metadata write and fence that reached the store, in
    /// order: the operation and the owner its metadata names ("-" for a
    /// write without metadata).
    pub log: Mutex<Vec<(&'static str, String)>>,
    held: Mutex<Vec<(PartitionId, i64, PartitionWrite)>>,
}

impl FaultyStore {
    pub(super) fn new(inner: Arc<dyn Store>) -> Self {
        FaultyStore {
            inner,
            members_fail: AtomicBool::new(false),
            members_hang: AtomicBool::new(false),
            listing_fails: AtomicBool::new(false),
            metadata_failures: AtomicU32::new(0),
            fence_failures: AtomicU32::new(0),
            late_writes: AtomicU32::new(0),
            write_delay_ms: AtomicU32::new(0),
            metadata_landing_timeouts: AtomicU32::new(0),
            dedup_buckets_read: AtomicU32::new(0),
            log: Mutex::new(Vec::new()),
            held: Mutex::new(Vec::new()),
        }
    }

    fn record(&self, operation: &'static str, owner: Option<&str>) {
        self.log.lock().unwrap().push((operation, owner.unwrap_or("-").to_owned()));
    }

    /// Lands the writes held back on `partition`, in order.
    async fn land_held(&self, partition: &PartitionId) {
        let held: Vec<_> = {
            let mut held = self.held.lock().unwrap();
            let (mine, others) = held.drain(..).partition(|(p, _, _)| p == partition);
            *held = others;
            mine
        };
        for (partition, range_id, write) in held {
            let _ = self.inner.write(&partition, range_id, &write).await;
        }
    }
}

/// Takes one of `counter`'s faults, if any is left.
fn take_fault(counter: &AtomicU32) -> bool {
    counter.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)).is_ok()
}

fn unavailable(what: &str) -> StoreError {
    StoreError::Unavailable(format!("{what}: injected fault"))
}

#[async_trait]
impl PartitionStore for FaultyStore {
    async fn load_partition(&self, partition: &PartitionId) -> StoreResult<Option<PartitionMeta>> {
        self.inner.load_partition(partition).await
    }

    async fn take_ownership(
        &self,
        partition: &PartitionId,
        expected: i64,
        owner: &str,
        region: &str,
    ) -> StoreResult<PartitionMeta> {
        if take_fault(&self.fence_failures) {
            return Err(unavailable("take_ownership"));
        }
        self.land_held(partition).await;
        self.record("take_ownership", Some(owner));
        self.inner.take_ownership(partition, expected, owner, region).await
    }

    async fn write(&self, partition: &PartitionId, range_id: i64, write: &PartitionWrite) -> StoreResult<()> {
        if take_fault(&self.late_writes) {
            self.held.lock().unwrap().push((partition.clone(), range_id, write.clone()));
            return Err(StoreError::Uncertain("write: injected timeout; it lands later".into()));
        }
        let delay = self.write_delay_ms.load(Ordering::Acquire);
        if delay > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(delay.into())).await;
        }
        self.land_held(partition).await;
        self.record("write", write.metadata.as_ref().map(|m| m.owner.as_str()));
        self.inner.write(partition, range_id, write).await
    }

    async fn read_row(&self, partition: &PartitionId, row: RowRef) -> StoreResult<Option<StoredRow>> {
        self.inner.read_row(partition, row).await
    }

    async fn read_records(
        &self,
        partition: &PartitionId,
        range: RecordRange,
        limit: usize,
    ) -> StoreResult<Vec<Record>> {
        self.inner.read_records(partition, range, limit).await
    }

    async fn read_buckets(
        &self,
        partition: &PartitionId,
        section: Section,
        buckets: &[i64],
        per_bucket: usize,
    ) -> StoreResult<Vec<Record>> {
        if section == Section::Dedup {
            self.dedup_buckets_read.fetch_add(buckets.len() as u32, Ordering::AcqRel);
        }
        self.inner.read_buckets(partition, section, buckets, per_bucket).await
    }

    async fn read(
        &self,
        partition: &PartitionId,
        priority: Priority,
        after: FairLevel,
        limit: usize,
    ) -> StoreResult<Vec<StoredTask>> {
        self.inner.read(partition, priority, after, limit).await
    }

    async fn delete_through(&self, partition: &PartitionId, priority: Priority, through: FairLevel) -> StoreResult<()> {
        self.inner.delete_through(partition, priority, through).await
    }

    async fn delete_records_through(
        &self,
        partition: &PartitionId,
        section: Section,
        through: (i64, i64),
    ) -> StoreResult<()> {
        self.inner.delete_records_through(partition, section, through).await
    }

    async fn update_metadata(&self, partition: &PartitionId, metadata: &PartitionMeta) -> StoreResult<()> {
        if take_fault(&self.metadata_failures) {
            return Err(unavailable("update_metadata"));
        }
        self.land_held(partition).await;
        self.record("update_metadata", Some(&metadata.owner));
        let written = self.inner.update_metadata(partition, metadata).await;
        if written.is_ok() && take_fault(&self.metadata_landing_timeouts) {
            return Err(StoreError::Uncertain("update_metadata: injected timeout after it landed".into()));
        }
        written
    }
}

#[async_trait]
impl QueueCatalog for FaultyStore {
    async fn create_queue(&self, queue: &QueueName, config: QueueConfig) -> StoreResult<QueueConfig> {
        self.inner.create_queue(queue, config).await
    }

    async fn set_queue_home(&self, queue: &QueueName, expected: &str, home: &str) -> StoreResult<Option<QueueConfig>> {
        self.inner.set_queue_home(queue, expected, home).await
    }

    async fn queue(&self, queue: &QueueName) -> StoreResult<Option<QueueConfig>> {
        self.inner.queue(queue).await
    }

    async fn force_queue_home(
        &self,
        queue: &QueueName,
        generation: u32,
        home: &str,
    ) -> StoreResult<Option<QueueConfig>> {
        self.inner.force_queue_home(queue, generation, home).await
    }

    async fn update_queue_settings(
        &self,
        queue: &QueueName,
        expected: u64,
        settings: &fairway::store::QueueSettings,
    ) -> StoreResult<Option<QueueConfig>> {
        self.inner.update_queue_settings(queue, expected, settings).await
    }

    async fn list_queues(&self) -> StoreResult<Vec<(QueueName, QueueConfig)>> {
        if self.listing_fails.load(Ordering::Acquire) {
            return Err(unavailable("list_queues"));
        }
        self.inner.list_queues().await
    }
}

#[async_trait]
impl MemberStore for FaultyStore {
    async fn heartbeat(&self, member: &Member) -> StoreResult<()> {
        self.inner.heartbeat(member).await
    }

    async fn members(&self) -> StoreResult<Vec<Member>> {
        if self.members_fail.load(Ordering::Acquire) {
            return Err(unavailable("members"));
        }
        if self.members_hang.load(Ordering::Acquire) {
            std::future::pending::<()>().await;
        }
        self.inner.members().await
    }

    async fn leave(&self, node: &str) -> StoreResult<()> {
        self.inner.leave(node).await
    }

    async fn forget(&self, node: &str, written_before: i64) -> StoreResult<()> {
        self.inner.forget(node, written_before).await
    }
}

#[async_trait]
impl SecretStore for FaultyStore {
    async fn cluster_secrets(&self, candidate: &[u8; SECRET_BYTES]) -> StoreResult<ClusterSecrets> {
        self.inner.cluster_secrets(candidate).await
    }

    async fn rotate_cluster_secret(
        &self,
        from: &[u8; SECRET_BYTES],
        to: &[u8; SECRET_BYTES],
        signs_until_unix_ms: i64,
        accepted_until_unix_ms: i64,
    ) -> StoreResult<Option<ClusterSecrets>> {
        self.inner.rotate_cluster_secret(from, to, signs_until_unix_ms, accepted_until_unix_ms).await
    }
}

#[async_trait]
impl Store for FaultyStore {
    fn is_shared(&self) -> bool {
        self.inner.is_shared()
    }

    async fn close(&self) -> StoreResult<()> {
        self.inner.close().await
    }
}
