//! `fairway cluster nodes` and `fairway cluster workers`: the nodes with
//! their regions and liveness, and the workers polling them, as every live
//! node reports.

use clap::Subcommand;
use comfy_table::{Table, presets::NOTHING};
use fairway::proto::v1 as pb;

use super::client::{ServerArg, connect, status};
use super::times;

/// What of the cluster to show.
#[derive(Subcommand, Debug)]
pub(super) enum ClusterCommand {
    /// The nodes, live or recently dead: region, address, last heartbeat,
    /// partitions held, tasks out with workers, workers polling.
    Nodes {
        #[command(flatten)]
        server: ServerArg,
        /// Print the answer as JSON (proto3's mapping of the response).
        #[arg(long)]
        json: bool,
    },
    /// The workers whose polls a node saw in the last 5 minutes: polls
    /// waiting now, tasks handed to them, their last poll.
    Workers {
        #[command(flatten)]
        server: ServerArg,
        /// Only this queue's workers (default: every queue you may read).
        #[arg(long, default_value = "")]
        queue: String,
        /// Print the answer as JSON (proto3's mapping of the response).
        #[arg(long)]
        json: bool,
    },
}

pub(super) async fn run(command: ClusterCommand) -> anyhow::Result<()> {
    match command {
        ClusterCommand::Nodes { server, json } => nodes(&server, json).await,
        ClusterCommand::Workers { server, queue, json } => workers(&server, queue, json).await,
    }
}

async fn nodes(server: &ServerArg, json: bool) -> anyhow::Result<()> {
    let mut client = connect(server).await?;
    let listed = client.list_nodes(pb::ListNodesRequest {}).await.map_err(status)?.into_inner();
    if json {
        return super::json::print(&listed, "fairway.v1.ListNodesResponse");
    }
    let now = times::now_ms();
    let mut table = Table::new();
    table.load_style(NOTHING).set_header([
        "NODE",
        "REGION",
        "ADDRESS",
        "STATE",
        "LAST HEARTBEAT",
        "PARTITIONS",
        "RUNNING",
        "WORKERS",
    ]);
    for node in &listed.nodes {
        let counted = |n: String| if node.answered { n } else { "-".to_owned() };
        let heartbeat = node.last_heartbeat.as_ref().map_or("-".to_owned(), |t| times::relative(times::ms(t), now));
        table.add_row([
            format!("{}{}", node.node, if node.node == listed.answering_node { " (answering)" } else { "" }),
            if node.region.is_empty() { "-".to_owned() } else { node.region.clone() },
            node.address.clone(),
            state(node).to_owned(),
            heartbeat,
            counted(node.partitions_held.to_string()),
            counted(node.leased.to_string()),
            counted(node.workers.to_string()),
        ]);
    }
    println!("{table}");
    Ok(())
}

/// How a node stands, in a word.
pub(crate) fn state(node: &pb::NodeState) -> &'static str {
    match (node.live, node.answered) {
        (true, true) => "live",
        (true, false) => "live, not answering",
        (false, _) => "dead",
    }
}

async fn workers(server: &ServerArg, queue: String, json: bool) -> anyhow::Result<()> {
    let mut client = connect(server).await?;
    let listed =
        client.list_workers(pb::ListWorkersRequest { queue: queue.clone() }).await.map_err(status)?.into_inner();
    if json {
        return super::json::print(&listed, "fairway.v1.ListWorkersResponse");
    }
    if listed.workers.is_empty() {
        let of = if queue.is_empty() { String::new() } else { format!(" of queue {queue}") };
        println!("no worker{of} polled in the last 5 minutes");
    } else {
        let now = times::now_ms();
        let mut table = Table::new();
        table.load_style(NOTHING).set_header([
            "QUEUE",
            "WORKER",
            "NODE",
            "ADDRESS",
            "WAITING",
            "TASKS",
            "LAST POLL",
            "SINCE",
        ]);
        for w in &listed.workers {
            let at =
                |t: Option<&prost_types::Timestamp>| t.map_or("-".to_owned(), |t| times::relative(times::ms(t), now));
            table.add_row([
                w.queue.clone(),
                if w.worker_id.is_empty() { "(no id)".to_owned() } else { w.worker_id.clone() },
                w.node.clone(),
                w.address.clone(),
                w.polls_waiting.to_string(),
                w.tasks_received.to_string(),
                at(w.last_poll.as_ref()),
                at(w.first_poll.as_ref()),
            ]);
        }
        println!("{table}");
    }
    if listed.left_out > 0 {
        println!("and {} more not listed (the first 1,000 are); name a queue with --queue", listed.left_out);
    }
    if !listed.unanswered_nodes.is_empty() {
        println!("not answering, their workers missing: {}", listed.unanswered_nodes.join(", "));
    }
    Ok(())
}
