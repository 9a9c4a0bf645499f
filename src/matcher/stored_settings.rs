//! Changing the settings stored with a queue (`UpdateQueue`, `PauseQueue`,
//! `ResumeQueue`): read, change, validate, compare-and-set on the version
//! read, again from the top when another change came first; then applied
//! at once on this node, and on every other node that holds a partition of
//! the queue at its next listing of the queues (`cluster.rebalance_interval`).
//!
//! Invariant: only settings that passed [`QueueSettings::validate`] are
//! written, and a change that could not be written leaves the stored
//! settings as they were.

use super::{MatchError, Queues};
use crate::model::QueueName;
use crate::store::{QueueConfig, QueueSettings, StoreError};

/// How many times a change is made again from the settings another change
/// wrote first, before it gives up.
const MAX_ATTEMPTS: usize = 8;

impl Queues {
    /// Stores the settings `change` makes of the queue's current ones, and
    /// applies them here at once; the queue's config as stored after. A
    /// change that leaves the settings as they are writes nothing.
    ///
    /// Errors: what `change` returns (nothing written); `UnknownQueue`; `InvalidSettings` (nothing written) when the
    /// settings made pass a bound; `SettingsContended` (nothing written)
    /// when other changes came first [`MAX_ATTEMPTS`] times; a store error
    /// (an uncertain one: the change may have been written).
    pub async fn update_settings(
        &self,
        name: &QueueName,
        change: impl Fn(QueueSettings) -> Result<QueueSettings, MatchError>,
    ) -> Result<QueueConfig, MatchError> {
        let store_error = |e: StoreError| MatchError::Partition(e.into());
        for _ in 0..MAX_ATTEMPTS {
            let current = self.store().queue(name).await.map_err(store_error)?;
            let current = current.ok_or_else(|| MatchError::UnknownQueue(name.to_string()))?;
            let version = current.settings.version;
            let wanted = QueueSettings { version, ..change(current.settings.clone())? };
            wanted.validate("settings").map_err(MatchError::InvalidSettings)?;
            if wanted == current.settings {
                return Ok(current);
            }
            let stored = self.store().update_queue_settings(name, version, &wanted).await.map_err(store_error)?;
            let stored = stored.ok_or_else(|| MatchError::UnknownQueue(name.to_string()))?;
            if stored.settings == (QueueSettings { version: version + 1, ..wanted }) {
                if let Some(opened) = self.opened_queue(name) {
                    opened.update_config(&stored);
                }
                tracing::info!(queue = %name, version = version + 1, settings = %stored.settings.encode(), "stored the queue's settings");
                return Ok(stored);
            }
        }
        Err(MatchError::SettingsContended { queue: name.to_string(), attempts: MAX_ATTEMPTS })
    }
}
