//! The console's pages of the cluster: its nodes and regions, and the
//! workers polling them, as every live node reports.

use maud::{Markup, html};

use crate::clock::human::{relative, when};
use crate::proto::v1 as pb;

/// How a node stands, in a word, and the class that colours it.
fn standing(node: &pb::NodeState) -> (&'static str, &'static str) {
    match (node.live, node.answered) {
        (true, true) => ("live", "ok"),
        (true, false) => ("live, not answering", "warning"),
        (false, _) => ("dead", "error"),
    }
}

/// The nodes, by region: liveness, heartbeat, and the counts each node
/// gave of itself.
pub(super) fn nodes(listed: &pb::ListNodesResponse, now: i64) -> Markup {
    let mut regions: Vec<&str> = listed.nodes.iter().map(|n| n.region.as_str()).collect();
    regions.dedup();
    html! {
        p.hint { "Every member the store holds, live or dead within the last hour. The counts are each node's own; a node that did not answer has none." }
        table #nodes {
            thead { tr { th { "Node" } th { "Region" } th { "Address" } th { "State" } th { "Last heartbeat" } th { "Started" } th.n { "Partitions" } th.n { "Running" } th.n { "Workers" } } }
            tbody {
                @for node in &listed.nodes {
                    @let (state, class) = standing(node);
                    tr data-node=(node.node) {
                        td { code { (node.node) } @if node.node == listed.answering_node { " " em { "(this console's)" } } }
                        td { @if node.region.is_empty() { "-" } @else { (node.region) } }
                        td { (node.address) }
                        td { span class={ "health " (class) } { (state) } }
                        td { (node.last_heartbeat.as_ref().map_or("-".to_owned(), |t| relative(crate::clock::human::ms(t), now))) }
                        td { (when(node.started.as_ref(), now)) }
                        @if node.answered {
                            td.n { (node.partitions_held) } td.n { (node.leased) }
                            td.n { a href="/workers" { (node.workers) } }
                        } @else {
                            td.n { "-" } td.n { "-" } td.n { "-" }
                        }
                    }
                }
            }
        }
        p #regions { (regions.len()) " region(s): " @for (i, region) in regions.iter().enumerate() { @if i > 0 { ", " } @if region.is_empty() { em { "none named" } } @else { (region) } } }
    }
}

/// The workers seen polling in the last five minutes, `queue`'s alone when
/// it names one.
pub(super) fn workers(listed: &pb::ListWorkersResponse, queue: &str, now: i64) -> Markup {
    html! {
        form #find-workers method="get" action="/workers" {
            label for="queue" { "Queue" }
            input #queue type="text" name="queue" value=(queue) placeholder="every queue you may read";
            button type="submit" { "Show" }
        }
        @if !listed.unanswered_nodes.is_empty() {
            p.error #unanswered { "Not answering, their workers missing: " (listed.unanswered_nodes.join(", ")) }
        }
        @if listed.workers.is_empty() {
            p #no-workers { "No worker polled in the last 5 minutes. Start one: " code { "fairway worker --queue QUEUE -- COMMAND" } }
        } @else {
            p.hint { "Workers whose polls a node saw in the last 5 minutes, as each node they poll reports them." }
            @if listed.left_out > 0 { p #left-out { "And " (listed.left_out) " more, not listed (the first 1,000 are): choose a queue." } }
            table #workers {
                thead { tr { th { "Queue" } th { "Worker" } th { "Node" } th { "Address" } th.n { "Polls waiting" } th.n { "Tasks handed" } th { "Last poll" } th { "First poll" } } }
                tbody {
                    @for w in &listed.workers {
                        tr data-worker=(w.worker_id) {
                            td { a href={ "/queues/" (w.queue) } { (w.queue) } }
                            td { @if w.worker_id.is_empty() { em { "(no id)" } } @else { code { (w.worker_id) } } }
                            td { (w.node) }
                            td { (w.address) }
                            td.n { (w.polls_waiting) }
                            td.n { (w.tasks_received) }
                            td { (w.last_poll.as_ref().map_or("-".to_owned(), |t| relative(crate::clock::human::ms(t), now))) }
                            td { (when(w.first_poll.as_ref(), now)) }
                        }
                    }
                }
            }
        }
    }
}
