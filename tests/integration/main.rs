//! Integration tests: one binary, a module per concern. Servers run on port 0
//! over real gRPC; process tests run the real `fairway` binary.

mod auth;
mod cassandra;
mod cli;
mod conformance_embedded;
mod connections;
mod console;
mod dead_letters;
mod deadline;
mod durability;
mod failover;
mod failover_history;
mod forwarding;
mod grpc_fairness;
mod keeper;
mod leases;
mod max_wait;
mod pki;
mod polling;
mod queue_list;
mod queue_settings;
mod quiet_keys;
mod ranker_scenarios;
mod regions;
mod rotation;
mod scheduler;
mod schedules;
mod security;
mod services;
mod support;
mod task_cancel;
mod task_lookup;
mod telemetry;
mod tls;
mod validation;
mod worker;
