//! The one source of time. Pure code takes the time as an argument; the async
//! shells read it from a [`Clock`], which tests replace with a [`ManualClock`].
//! Durations read and written as human strings (`"10s"`) are
//! [`duration_serde`]'s, here below every config section that has one.

pub mod duration_serde;
pub mod human;

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub type UnixMillis = i64;

/// A source of the current time, shared by the async shells.
pub trait Clock: Send + Sync + Debug + 'static {
    /// The current time, in ms since the Unix epoch.
    fn now_ms(&self) -> UnixMillis;
}

/// The clock a node's components share: the system's, or a test's [`ManualClock`].
pub type SharedClock = Arc<dyn Clock>;

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> UnixMillis {
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
    }
}

/// A clock that moves only when told to.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ms: AtomicI64,
}

impl ManualClock {
    /// A clock that reads `start_ms` (ms since the Unix epoch) until advanced.
    pub fn new(start_ms: UnixMillis) -> Self {
        ManualClock { now_ms: AtomicI64::new(start_ms) }
    }

    /// Moves the clock forward by `by`, counted in whole ms.
    pub fn advance(&self, by: Duration) {
        self.now_ms.fetch_add(by.as_millis() as i64, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> UnixMillis {
        self.now_ms.load(Ordering::SeqCst)
    }
}

/// Whole milliseconds of a duration, saturating.
pub fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
