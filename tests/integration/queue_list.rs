//! `ListQueues` on a real server: every queue once, in name order, over
//! pages; each with its backlog, running tasks, oldest wait and pauses;
//! bad pages refused with the field named.

use std::collections::BTreeSet;
use std::time::Duration;

use fairway::proto::v1 as pb;
use tonic::Code;

use crate::support::{Client, TestServer, add_all, create, poll, spec};

async fn page(client: &mut Client, size: u32, token: &str, prefix: &str) -> pb::ListQueuesResponse {
    let request = pb::ListQueuesRequest { page_size: size, page_token: token.into(), prefix: prefix.into() };
    client.list_queues(request).await.expect("ListQueues").into_inner()
}

#[tokio::test]
async fn every_queue_is_listed_once_in_name_order_with_its_backlog_and_pauses() {
    let server = TestServer::start().await;
    let mut client = server.client.clone();
    let names: Vec<String> = (0..120).map(|i| format!("list.{i:03}")).collect();
    for name in &names {
        create(&mut client, name, 2).await;
    }
    create(&mut client, "other", 1).await;
    add_all(&mut client, "list.005", (0..3).map(|i| spec("k", 0.0, 3, format!("{i}").as_bytes())).collect()).await;
    let running = poll(&mut client, "list.005", Duration::from_secs(5)).await.expect("a task");
    let pause = pb::PauseQueueRequest { queue: "list.007".into(), fairness_key: None };
    client.pause_queue(pause).await.expect("pause");

    let (mut listed, mut token, mut pages) = (Vec::new(), String::new(), 0);
    loop {
        let response = page(&mut client, 50, &token, "list.").await;
        assert!(response.queues.len() <= 50);
        listed.extend(response.queues);
        pages += 1;
        token = response.next_page_token;
        if token.is_empty() {
            break;
        }
        assert!(pages < 10, "the pages never end");
    }
    let order: Vec<&str> = listed.iter().map(|q| q.queue.as_str()).collect();
    assert_eq!(order, names.iter().map(String::as_str).collect::<Vec<_>>(), "each once, in order, in {pages} pages");
    assert_eq!(listed.iter().map(|q| &q.queue).collect::<BTreeSet<_>>().len(), 120);
    let busy = &listed[5];
    assert_eq!((busy.backlog, busy.leased, busy.held_here, busy.partitions), (2, 1, 2, 2), "{busy:?}");
    assert!(busy.oldest_added_at.is_some(), "two tasks wait");
    assert!(listed[7].settings.as_ref().unwrap().paused, "list.007 is paused");
    assert!(listed.iter().filter(|q| q.queue != "list.007").all(|q| !q.settings.as_ref().unwrap().paused));
    let all = page(&mut client, 0, "", "").await;
    assert_eq!(all.queues.len(), 50, "50 by default");

    let refused = client.list_queues(pb::ListQueuesRequest { page_size: 101, ..Default::default() }).await.unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(refused.message().starts_with("page_size: is 101; the limit is 100"), "{}", refused.message());
    let refused = client
        .list_queues(pb::ListQueuesRequest { page_token: "not a queue!".into(), ..Default::default() })
        .await
        .unwrap_err();
    assert!(refused.message().starts_with("page_token: "), "{}", refused.message());
    let complete = pb::CompleteTaskRequest { lease_token: running.lease_token, result: Vec::new() };
    client.complete_task(complete).await.expect("complete");
    server.stop().await;
}
