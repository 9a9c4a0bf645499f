//! The queue catalog on Cassandra: a row per queue. A creation is an
//! insert `IF NOT EXISTS` (the first config wins); a move of the home, a
//! forced failover and a change of settings are lightweight transactions on
//! the home, generation or settings version read, at `SERIAL`.

use async_trait::async_trait;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::CqlValue;

use super::error::{read_error, write_error};
use crate::model::{QueueName, validate};
use crate::store::{MAX_GENERATION, QueueCatalog, QueueConfig, QueueSettings, StoreError, StoreResult};

use super::{CassandraStore, column, conditional};

impl CassandraStore {
    /// Every queue, read with `statement`.
    async fn list_queues_with(&self, statement: &PreparedStatement) -> StoreResult<Vec<(QueueName, QueueConfig)>> {
        use futures::TryStreamExt;
        let pager = self.session.execute_iter(statement.clone(), ()).await.map_err(read_error)?;
        type NamedRow = (
            String,
            Option<i32>,
            Option<String>,
            Option<i32>,
            Option<String>,
            Option<String>,
            Option<String>,
            Option<i64>,
        );
        let mut rows = pager.rows_stream::<NamedRow>().map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let mut queues = Vec::new();
        while let Some((name, partitions, home, generation, previous, creator, settings, version)) =
            rows.try_next().await.map_err(read_error)?
        {
            let name = validate::queue_name("queue", &name)
                .map_err(|e| StoreError::Corrupt(format!("stored queue name: {e}")))?;
            queues.push((name, stored_queue((partitions, home, generation, previous, creator, settings, version))?));
        }
        Ok(queues)
    }

    /// One queue's config, read with `statement`.
    async fn queue_with(&self, statement: &PreparedStatement, queue: &QueueName) -> StoreResult<Option<QueueConfig>> {
        let result = self.session.execute_unpaged(statement, (queue.as_str(),)).await.map_err(read_error)?;
        let rows = result.into_rows_result().map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let row = rows.maybe_first_row::<QueueRow>().map_err(|e| StoreError::Corrupt(e.to_string()))?;
        row.map(stored_queue).transpose()
    }
}

/// A queue's row: partitions, home, generation, previous home, creator,
/// settings and their version.
type QueueRow = (Option<i32>, Option<String>, Option<i32>, Option<String>, Option<String>, Option<String>, Option<i64>);

/// A queue's config from its row.
fn stored_queue(
    (partitions, home, generation, previous_home, created_by, settings, version): QueueRow,
) -> StoreResult<QueueConfig> {
    let version = version.unwrap_or(0).max(0) as u64;
    Ok(QueueConfig {
        partitions: partitions.unwrap_or(1).max(1) as u32,
        home: home.unwrap_or_default(),
        generation: generation.unwrap_or(0).max(0) as u32,
        previous_home: previous_home.unwrap_or_default(),
        created_by: created_by.unwrap_or_default(),
        settings: QueueSettings::decode(settings.as_deref().unwrap_or(""), version).map_err(StoreError::Corrupt)?,
    })
}

/// A queue's config from the columns a conditional write found.
fn found_queue(found: &[(String, CqlValue)]) -> StoreResult<QueueConfig> {
    let text = |name: &str| column(found, name).and_then(CqlValue::as_text).cloned();
    let int = |name: &str| column(found, name).and_then(CqlValue::as_int);
    let version = column(found, "settings_version").and_then(CqlValue::as_bigint);
    stored_queue((
        int("partitions"),
        text("home"),
        int("generation"),
        text("previous_home"),
        text("created_by"),
        text("settings"),
        version,
    ))
}

#[async_trait]
impl QueueCatalog for CassandraStore {
    async fn create_queue(&self, queue: &QueueName, config: QueueConfig) -> StoreResult<QueueConfig> {
        let home = (!config.home.is_empty()).then_some(config.home.as_str());
        let creator = (!config.created_by.is_empty()).then_some(config.created_by.as_str());
        let values = (queue.as_str(), config.partitions as i32, home, creator);
        let result = self.session.execute_unpaged(&self.statements.create_queue, values).await.map_err(write_error)?;
        match conditional(result)? {
            None => Ok(config),
            Some(found) => match column(&found, "partitions").and_then(CqlValue::as_int) {
                Some(_) => found_queue(&found),
                None => Err(StoreError::Corrupt(format!("queue {queue} has no partition count"))),
            },
        }
    }

    async fn queue(&self, queue: &QueueName) -> StoreResult<Option<QueueConfig>> {
        if let Some((everywhere, _)) = &self.statements.queue_everywhere {
            match self.queue_with(everywhere, queue).await {
                Ok(config) => return Ok(config),
                Err(error) => tracing::debug!(%error, "reading a queue in every region; reading it in this one"),
            }
        }
        self.queue_with(&self.statements.queue, queue).await
    }

    async fn set_queue_home(&self, queue: &QueueName, expected: &str, home: &str) -> StoreResult<Option<QueueConfig>> {
        // A queue with no home stores null: the condition compares with null.
        let stored = |home: &str| (!home.is_empty()).then(|| home.to_owned());
        let values = (stored(home), queue.as_str(), stored(expected));
        let result = self.session.execute_unpaged(&self.statements.set_home, values).await.map_err(write_error)?;
        let found = conditional(result)?;
        let Some(config) = self.queue(queue).await? else { return Ok(None) };
        Ok(Some(match found {
            None => QueueConfig { home: home.to_owned(), ..config },
            // Not applied: the queue does not exist (no columns came back),
            // or its home was not `expected` (the current one came back).
            Some(found) => QueueConfig {
                home: column(&found, "home").and_then(CqlValue::as_text).cloned().unwrap_or_default(),
                ..config
            },
        }))
    }

    async fn force_queue_home(
        &self,
        queue: &QueueName,
        generation: u32,
        home: &str,
    ) -> StoreResult<Option<QueueConfig>> {
        let Some(config) = self.queue(queue).await? else { return Ok(None) };
        if config.generation != generation {
            return Ok(Some(config));
        }
        if generation >= MAX_GENERATION {
            return Err(StoreError::Invalid(format!("queue {queue} had {MAX_GENERATION} forced failovers, the most")));
        }
        let next = generation + 1;
        let stored = |home: &str| (!home.is_empty()).then(|| home.to_owned());
        // Generation 0 and no home are stored as null: the condition compares with null.
        let expected = ((generation > 0).then_some(generation as i32), stored(&config.home));
        let values = (stored(home), next as i32, stored(&config.home), queue.as_str(), expected.0, expected.1);
        let (everywhere, here) = &self.statements.force_home;
        // A compare-and-set on the generation, so that of two forced
        // failovers from the same generation one wins. At SERIAL when a
        // majority of every region's replicas answers (with three regions,
        // one lost); else in this region's Paxos (two regions, one lost:
        // none other is left to race with).
        let result = match self.session.execute_unpaged(everywhere, &values).await.map_err(write_error) {
            Err(StoreError::Unavailable(why)) => {
                tracing::warn!(%queue, home, %why, "a forced failover cannot reach SERIAL; deciding it at LOCAL_SERIAL");
                self.session.execute_unpaged(here, &values).await.map_err(write_error)?
            }
            other => other?,
        };
        match conditional(result)? {
            None => {
                Ok(Some(QueueConfig { home: home.to_owned(), generation: next, previous_home: config.home, ..config }))
            }
            // Another change came first: what is stored now.
            Some(_) => self.queue(queue).await,
        }
    }

    async fn update_queue_settings(
        &self,
        queue: &QueueName,
        expected: u64,
        settings: &QueueSettings,
    ) -> StoreResult<Option<QueueConfig>> {
        let next = expected + 1;
        // Version 0 is stored as null: the condition compares with null.
        let stored_expected = (expected > 0).then_some(expected as i64);
        let values = (settings.encode(), next as i64, queue.as_str(), stored_expected);
        let result = self.session.execute_unpaged(&self.statements.set_settings, values).await.map_err(write_error)?;
        match conditional(result)? {
            None => match self.queue(queue).await? {
                // A read at this region's level may not see the write yet:
                // the settings written are what this caller stored.
                Some(config) => {
                    Ok(Some(QueueConfig { settings: QueueSettings { version: next, ..settings.clone() }, ..config }))
                }
                None => Err(StoreError::Uncertain(format!(
                    "queue {queue}'s settings were written but the queue is not found"
                ))),
            },
            // Not applied: the queue does not exist (no columns came back),
            // or its settings were at another version (only the columns of
            // the condition came back): what is stored now.
            Some(found) if column(&found, "partitions").is_none() => Ok(None),
            Some(_) => self.queue(queue).await,
        }
    }

    async fn list_queues(&self) -> StoreResult<Vec<(QueueName, QueueConfig)>> {
        if let Some((_, everywhere)) = &self.statements.queue_everywhere {
            match self.list_queues_with(everywhere).await {
                Ok(queues) => return Ok(queues),
                Err(error) => tracing::debug!(%error, "listing the queues in every region; listing them in this one"),
            }
        }
        self.list_queues_with(&self.statements.list_queues).await
    }
}
