use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

use super::{MatchError, MatcherConfig, QueueMatcher};
use crate::clock::SharedClock;
use crate::model::QueueName;
use crate::partition::WriterConfig;
use crate::queue::EngineConfig;
use crate::store::Store;

/// What every queue of a node is opened with.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// How this node names itself to others (its listening address).
    pub node: String,
    pub engine: EngineConfig,
    pub writer: WriterConfig,
    pub matcher: MatcherConfig,
}

type Slot = Arc<OnceCell<Arc<QueueMatcher>>>;

/// The queues of a node, opened on first use. A queue whose opening failed
/// is tried again on the next request.
#[derive(Debug)]
pub struct Queues {
    store: Arc<dyn Store>,
    clock: SharedClock,
    settings: Arc<Settings>,
    queues: Mutex<HashMap<QueueName, Slot>>,
    closing: AtomicBool,
}

impl Queues {
    pub fn new(store: Arc<dyn Store>, clock: SharedClock, settings: Settings) -> Self {
        Queues {
            store,
            clock,
            settings: Arc::new(settings),
            queues: Mutex::new(HashMap::new()),
            closing: AtomicBool::new(false),
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub async fn get(&self, name: &QueueName) -> Result<Arc<QueueMatcher>, MatchError> {
        if self.closing.load(Ordering::Acquire) {
            return Err(MatchError::ShuttingDown);
        }
        let slot = self.queues.lock().unwrap_or_else(|p| p.into_inner()).entry(name.clone()).or_default().clone();
        let matcher = slot
            .get_or_try_init(|| {
                QueueMatcher::open(name.clone(), self.store.clone(), self.clock.clone(), self.settings.clone())
            })
            .await?;
        Ok(matcher.clone())
    }

    fn opened(&self) -> Vec<Arc<QueueMatcher>> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner()).values().filter_map(|slot| slot.get().cloned()).collect()
    }

    /// Answers every parked poll with an empty response and refuses new
    /// requests: the first step of shutdown.
    pub fn stop_polls(&self) {
        self.closing.store(true, Ordering::Release);
        for queue in self.opened() {
            queue.stop_polls();
        }
    }

    /// Finishes queued writes, writes the ack levels and closes every queue.
    pub async fn close(&self) {
        self.stop_polls();
        for queue in self.opened() {
            queue.close().await;
        }
    }
}
