//! The gRPC face of Fairway: request validation, conversion between the
//! public messages and the domain, and the one mapping of errors to status
//! codes ([`status`]).
//!
//! Invariant: every field of a request is validated before any of it is
//! acted on, so a rejected request leaves nothing behind.

pub mod access;
mod cluster_lists;
pub mod codec;
mod connection;
mod connection_polls;
mod convert;
pub mod dispatch_shares;
#[cfg(test)]
mod fuzz;
mod matching;
mod queue_list;
mod queue_purge;
mod queue_settings;
mod routed_schedules;
mod routed_visits;
mod routing;
pub mod scheduler;
pub mod schedules;
pub mod status;
mod task_cancel;
mod task_lookup;
pub mod workers_seen;

pub use access::{Gate, Rpc};
pub use connection::ConnInfo;
pub(crate) use connection::Requests;
pub use matching::{MatchingService, TaskHook};
pub use routed_schedules::{RoutedRuns, ScheduleRuns};
pub use routed_visits::RoutedVisits;
pub use scheduler::{SchedulerService, VisitOutcomes};
pub use schedules::SchedulesService;
