//! Chaos testing: a history of what clients did under injected faults
//! ([`history`]), and the checker that reads it ([`checker`]). The workload
//! and the nemesis that write the history are the `fairway chaos` command.

pub mod checker;
pub mod history;
