//! The pure cores: state machines with no I/O and no tokio. Time, and any
//! randomness, come in as arguments, so that every decision they make can
//! be replayed in a unit test from its inputs alone.
//!
//! - [`engine`]: one partition's engine: levels, buffer, merge, ack, GC.
//! - [`fairness`]: pass assignment per fairness key (exact, then bounded).
//! - [`schedules`]: recurring schedules: can/should start, health.
//! - [`visits`]: the origin-visit scheduler's rules: visit feedback,
//!   cooldowns, policies, slot sharing.

pub mod engine;
pub mod fairness;
pub mod schedules;
pub mod visits;
