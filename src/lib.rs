//! # Fairway
//!
//! A fair task-queue matching service. Producers add tasks to named queues;
//! workers long-poll for them. Every task carries a fairness key, and each
//! partition dispatches backlogged work in weighted fair order per key,
//! strictly by priority level first.
//!
//! ## Layout
//!
//! - [`model`]: levels, priorities, task specs, validation of outside input.
//! - [`core`]: the pure state machines, time passed in: the partition
//!   [`engine`](core::engine), [`fairness`](core::fairness) counters, and the
//!   origin-visit scheduler's rules ([`visits`](core::visits)).
//! - [`store`]: the storage contract, its conformance suite, and backends.
//! - [`partition`]: the async shell that drives an engine against a store.
//! - [`matcher`]: long polls, sync match, dispatch across partitions.
//! - [`cluster`]: membership (heartbeats in the store) and who owns which
//!   partition.
//! - [`visits`]: the origin-visit scheduler's shell around
//!   [`core::visits`](core::visits): listers' reports, visit outcomes, rounds.
//! - [`schedules`]: recurring schedules' shell around
//!   [`core::schedules`](core::schedules): records, firing, run outcomes.
//! - [`api`]: the gRPC service and the one mapping of errors to status codes.
//! - [`security`]: principals, grants, and the keys that sign lease tokens and
//!   prove node-to-node requests (rotatable).
//! - [`server`]: wiring, startup and the ordered shutdown.
//! - [`telemetry`]: metrics (Prometheus `/metrics`, OTLP) and request spans.
//! - [`config`], [`clock`], [`hash`] (stable hashing for decisions every node
//!   makes alike), [`histogram`] (the dispatch latency histogram: atomics
//!   only, read by [`telemetry`], recorded into by [`matcher`]).
//! - `test_util` (feature `test-util`): starting real `fairway serve`
//!   processes, for the tools in `tools/fairway-lab` and the tests.
//!
//! ## Guarantees
//!
//! - An acknowledged AddTask survives a crash of the server process.
//! - Delivery is at least once; within one partition and priority level, two
//!   continuously backlogged keys `i`, `j` satisfy
//!   `|D_i/w_i − D_j/w_j| ≤ 1/w_i + 1/w_j` (see `docs/fairness.md`).
//! - Strict priority between levels, fairness within a level, FIFO within a key.
//! - Memory is bounded by the buffer, the tracked keys and the pollers, not by
//!   the backlog.

pub mod api;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod console;
pub mod core;
pub mod hash;
pub mod histogram;
pub mod matcher;
pub mod model;
pub mod partition;
pub mod schedules;
pub mod security;
pub mod server;
pub mod store;
pub mod telemetry;
#[cfg(feature = "test-util")]
pub mod test_util;
pub mod visits;

/// Code generated from `proto/`.
pub mod proto {
    /// The public API, package `fairway.v1`.
    #[allow(missing_docs)]
    pub mod v1 {
        tonic::include_proto!("fairway.v1");
    }
    /// Row encodings inside stores, package `fairway.storage.v1`.
    #[allow(missing_docs)]
    pub mod storage {
        tonic::include_proto!("fairway.storage.v1");
    }
    /// The descriptor set, for gRPC reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("fairway_descriptor");
}
