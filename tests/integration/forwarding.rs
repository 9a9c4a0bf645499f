//! A request forwarded to the owner of a partition that fails in transport
//! is reported by what is known of it: not sent (the owner could not be
//! reached) is `UNAVAILABLE`; sent and then cut off is `UNKNOWN` with
//! `fairway-maybe-applied: true`, as the owner may have written it.

use std::error::Error;

use fairway::api::status::{MAYBE_APPLIED, from_forwarded};
use fairway::cluster::Peers;
use fairway::proto::v1 as pb;
use tokio::io::AsyncReadExt;
use tonic::Code;

fn chain(status: &tonic::Status) -> String {
    let mut text = format!("{:?} {:?}", status.code(), status.message());
    let mut source = status.source();
    while let Some(error) = source {
        text.push_str(&format!(" <- {error}"));
        source = error.source();
    }
    text
}

fn request() -> tonic::Request<pb::AddTaskRequest> {
    tonic::Request::new(pb::AddTaskRequest { queue: "q".into(), task: Some(pb::TaskSpec::default()) })
}

#[tokio::test]
async fn an_owner_that_cannot_be_reached_is_unavailable() {
    let address = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().to_string()
    };
    let peers = Peers::default();
    let raw = peers.client(&address).unwrap().add_task(request()).await.unwrap_err();
    println!("refused: {}", chain(&raw));
    let status = from_forwarded(raw, &address);
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.metadata().get(MAYBE_APPLIED).is_none(), "nothing was sent");
}

#[tokio::test]
async fn an_owner_that_drops_the_connection_after_the_request_may_have_applied_it() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    // The owner reads the request, then dies before it answers.
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut buffer = vec![0u8; 4096];
        let _ = socket.read(&mut buffer).await;
        drop(socket);
    });
    let peers = Peers::default();
    let raw = peers.client(&address).unwrap().add_task(request()).await.unwrap_err();
    println!("cut off: {}", chain(&raw));
    assert!(raw.metadata().get(MAYBE_APPLIED).is_none(), "the transport's own status says nothing of it");
    let status = from_forwarded(raw, &address);
    assert_eq!(status.code(), Code::Unknown, "{status:?}");
    assert_eq!(status.metadata().get(MAYBE_APPLIED).map(|v| v.to_str().unwrap()), Some("true"));
}
