//! `fairway queue purge`: asks first, purges when asked again with the
//! token the first answer printed.

use clap::Args;
use fairway::proto::v1 as pb;

use super::client::{ServerArg, connect, status};
use super::times;

/// Which queue, and the token that confirms it.
#[derive(Args, Debug)]
pub(super) struct PurgeArgs {
    #[command(flatten)]
    server: ServerArg,
    #[arg(long)]
    queue: String,
    /// The token a run without it printed (it holds 5 minutes). Without
    /// it, nothing is purged: the command says what would be, and prints
    /// one.
    #[arg(long, default_value = "")]
    confirm: String,
    /// Print the answer as JSON (proto3's mapping of the response).
    #[arg(long)]
    json: bool,
}

pub(super) async fn purge(args: PurgeArgs) -> anyhow::Result<()> {
    let PurgeArgs { server, queue, confirm, json } = args;
    let mut client = connect(&server).await?;
    let request = pb::PurgeQueueRequest { queue: queue.clone(), confirmation: confirm };
    let answer = client.purge_queue(request).await.map_err(status)?.into_inner();
    if json {
        return super::json::print(&answer, "fairway.v1.PurgeQueueResponse");
    }
    if answer.purged {
        println!(
            "purged queue {queue} ({} partitions): {} waiting, {} delayed and {} running tasks cancelled \
             (counts as each partition had them); tasks added from now on stay",
            answer.partitions, answer.waiting, answer.delayed, answer.running
        );
        return Ok(());
    }
    // What it holds, as ListQueues counts it, before asking.
    let listed = pb::ListQueuesRequest { page_size: 100, prefix: queue.clone(), ..Default::default() };
    let listed = client.list_queues(listed).await.map_err(status)?.into_inner();
    let backlog = listed.queues.iter().find(|q| q.queue == queue).map(|q| q.backlog);
    let until = times::when(answer.confirmation_expires.as_ref(), times::now_ms());
    println!(
        "This cancels every task of queue {queue} but its dead letters: waiting ({}), delayed and running \
         (their workers' heartbeats are refused). Nothing was purged yet.\n\
         To purge, run before {until}:\n  fairway queue purge --queue {queue} --confirm {}",
        backlog.map_or("none counted".to_owned(), |n| format!("about {n}")),
        answer.confirmation
    );
    Ok(())
}
