//! Domain types shared by every layer: levels, priorities, task specs, and the
//! validation of everything that comes from outside.
//!
//! Invariant: a value of these types that came through [`validate`] respects the
//! limits of [`Limits`]; deeper layers rely on that and do not check again.

mod level;
pub mod pattern;
mod priority;
mod task;
pub mod validate;

pub use level::FairLevel;
pub use priority::{PRIORITY_LEVELS, Priority};
pub use task::{PartitionId, QueueName, StoredTask, TaskHistory, TaskSpec};
pub use validate::{Limits, ValidationError};
