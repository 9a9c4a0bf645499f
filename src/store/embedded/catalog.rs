//! The queue catalog in redb: partition counts, homes, generations,
//! creators and settings, each in its table. A creation, a move and a
//! change of settings are one transaction each (redb's single writer makes
//! their compare-and-set plain).

use async_trait::async_trait;
use redb::{ReadableDatabase, ReadableTable};

use crate::model::{QueueName, validate};
use crate::store::{MAX_GENERATION, QueueCatalog, QueueConfig, QueueSettings, StoreError, StoreResult};

use super::{
    EmbeddedStore, QUEUE_CREATORS, QUEUE_GENERATIONS, QUEUE_HOMES, QUEUE_SETTINGS, QUEUES, unavailable, uncertain,
};

/// The home of `queue` (empty if it has none).
fn home_of(homes: &impl ReadableTable<&'static str, &'static str>, queue: &QueueName) -> StoreResult<String> {
    Ok(homes.get(queue.as_str()).map_err(unavailable)?.map(|home| home.value().to_owned()).unwrap_or_default())
}

/// The config of `queue`, which has `partitions`, from its other tables.
pub(super) fn config_of(
    homes: &impl ReadableTable<&'static str, &'static str>,
    generations: &impl ReadableTable<&'static str, (u32, &'static str)>,
    creators: &impl ReadableTable<&'static str, &'static str>,
    settings: &impl ReadableTable<&'static str, (u64, &'static str)>,
    queue: &QueueName,
    partitions: u32,
) -> StoreResult<QueueConfig> {
    let (generation, previous_home) = match generations.get(queue.as_str()).map_err(unavailable)? {
        Some(stored) => (stored.value().0, stored.value().1.to_owned()),
        None => (0, String::new()),
    };
    let created_by =
        creators.get(queue.as_str()).map_err(unavailable)?.map(|c| c.value().to_owned()).unwrap_or_default();
    let settings = match settings.get(queue.as_str()).map_err(unavailable)? {
        Some(stored) => {
            let (version, text) = stored.value();
            QueueSettings::decode(text, version).map_err(StoreError::Corrupt)?
        }
        None => QueueSettings::default(),
    };
    Ok(QueueConfig { partitions, home: home_of(homes, queue)?, generation, previous_home, created_by, settings })
}

/// Stores `home` as the home of `queue` (none, when empty).
pub(super) fn put_home(
    homes: &mut redb::Table<&'static str, &'static str>,
    queue: &QueueName,
    home: &str,
) -> StoreResult<()> {
    if home.is_empty() {
        homes.remove(queue.as_str()).map_err(unavailable)?;
    } else {
        homes.insert(queue.as_str(), home).map_err(unavailable)?;
    }
    Ok(())
}

#[async_trait]
impl QueueCatalog for EmbeddedStore {
    async fn create_queue(&self, queue: &QueueName, config: QueueConfig) -> StoreResult<QueueConfig> {
        let queue = queue.clone();
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            let stored = {
                let mut table = txn.open_table(QUEUES).map_err(unavailable)?;
                let mut homes = txn.open_table(QUEUE_HOMES).map_err(unavailable)?;
                let generations = txn.open_table(QUEUE_GENERATIONS).map_err(unavailable)?;
                let mut creators = txn.open_table(QUEUE_CREATORS).map_err(unavailable)?;
                let settings = txn.open_table(QUEUE_SETTINGS).map_err(unavailable)?;
                let existing = table.get(queue.as_str()).map_err(unavailable)?.map(|row| row.value());
                match existing {
                    Some(partitions) => config_of(&homes, &generations, &creators, &settings, &queue, partitions)?,
                    None => {
                        table.insert(queue.as_str(), config.partitions).map_err(unavailable)?;
                        put_home(&mut homes, &queue, &config.home)?;
                        if !config.created_by.is_empty() {
                            creators.insert(queue.as_str(), config.created_by.as_str()).map_err(unavailable)?;
                        }
                        let settings = QueueSettings::default();
                        QueueConfig { generation: 0, previous_home: String::new(), settings, ..config }
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
            let settings = txn.open_table(QUEUE_SETTINGS).map_err(unavailable)?;
            Ok(Some(config_of(&homes, &generations, &creators, &settings, &queue, partitions)?))
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

    async fn update_queue_settings(
        &self,
        queue: &QueueName,
        expected: u64,
        settings: &QueueSettings,
    ) -> StoreResult<Option<QueueConfig>> {
        let (queue, text) = (queue.clone(), settings.encode());
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            let stored = {
                let queues = txn.open_table(QUEUES).map_err(unavailable)?;
                let Some(partitions) = queues.get(queue.as_str()).map_err(unavailable)?.map(|row| row.value()) else {
                    return Ok(None);
                };
                let homes = txn.open_table(QUEUE_HOMES).map_err(unavailable)?;
                let generations = txn.open_table(QUEUE_GENERATIONS).map_err(unavailable)?;
                let creators = txn.open_table(QUEUE_CREATORS).map_err(unavailable)?;
                let mut settings = txn.open_table(QUEUE_SETTINGS).map_err(unavailable)?;
                let current = config_of(&homes, &generations, &creators, &settings, &queue, partitions)?;
                if current.settings.version != expected {
                    return Ok(Some(current));
                }
                settings.insert(queue.as_str(), (expected + 1, text.as_str())).map_err(unavailable)?;
                let settings = QueueSettings::decode(&text, expected + 1).map_err(StoreError::Corrupt)?;
                QueueConfig { settings, ..current }
            };
            txn.commit().map_err(uncertain)?;
            Ok(Some(stored))
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
            let settings = txn.open_table(QUEUE_SETTINGS).map_err(unavailable)?;
            let mut queues = Vec::new();
            for row in table.iter().map_err(unavailable)? {
                let (name, partitions) = row.map_err(unavailable)?;
                let name = validate::queue_name("queue", name.value())
                    .map_err(|e| StoreError::Corrupt(format!("stored queue name: {e}")))?;
                let config = config_of(&homes, &generations, &creators, &settings, &name, partitions.value())?;
                queues.push((name, config));
            }
            Ok(queues)
        })
        .await
    }
}
