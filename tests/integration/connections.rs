//! What one client connection may carry: any number of concurrent requests,
//! and responses no larger than a client accepts by default. Within the
//! documented limits a client never sees its connection dropped nor a
//! response it cannot decode. And what connections a server keeps: clients
//! that connect and send nothing hold up no one, connections are bounded
//! per client address and in all, and idle or silent ones are closed.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use futures::future::join_all;
use prost::Message;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpSocket, TcpStream};
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use fairway::config::Config;
use fairway::proto::v1 as pb;
use fairway::proto::v1::matching_client::MatchingClient;

use crate::support::{Client, TestServer, add, add_all, create, spec, wait};

/// Many small requests at once on one channel, as a worker pool that
/// completes its batches concurrently sends them. Each is a small DATA
/// frame that HTTP/2 (h2) buffers until the request is read; too many of
/// them buffered at once used to make the server close the connection
/// (GOAWAY `ENHANCE_YOUR_CALM`, "too_many_data_frames"), so that every
/// request on it failed with a transport error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_requests_on_one_connection_are_all_answered() {
    let server = TestServer::start().await;
    let requests = (0..20_000).map(|_| {
        let mut client = server.client.clone();
        async move {
            client.complete_task(pb::CompleteTaskRequest { lease_token: "not-a-token".into(), result: vec![] }).await
        }
    });
    for answered in join_all(requests).await {
        let status = answered.expect_err("a lease token that is not one");
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "answered by the service, not the transport: {status}");
    }
    server.stop().await;
}

/// The largest PollTasks a client may ask for, on the largest payloads,
/// stays within what a gRPC client decodes by default (4 MiB); the tasks
/// left out are there for the next poll.
#[tokio::test]
async fn poll_tasks_responses_stay_within_the_response_limit() {
    let server = TestServer::start().await;
    let mut client = server.client.clone();
    let payload = vec![0x5A; 1024 * 1024];
    add_all(&mut client, "big", (0..8).map(|_| spec("k", 0.0, 0, &payload)).collect()).await;
    let mut taken = 0;
    while taken < 8 {
        let response = client
            .poll_tasks(pb::PollTasksRequest {
                queue: "big".into(),
                worker_id: "test".into(),
                max_wait: wait(Duration::from_secs(5)),
                max_tasks: 256,
                completions: Vec::new(),
            })
            .await
            .expect("a response the client can decode")
            .into_inner();
        assert!(!response.tasks.is_empty(), "the tasks left out are ready for the next poll");
        assert!(response.encoded_len() <= 4 * 1024 * 1024, "{} bytes", response.encoded_len());
        taken += response.tasks.len();
    }
    assert_eq!(taken, 8);
    server.stop().await;
}

/// Returns once the server has closed `tcp` (what it sends is read and
/// dropped).
async fn until_closed(tcp: &mut TcpStream) {
    let mut buffer = [0u8; 1024];
    while let Ok(1..) = tcp.read(&mut buffer).await {}
}

/// Holds `tcp` without sending anything, connecting again to `addr`
/// whenever the server closes it, until `stop`.
async fn hold_idle(addr: SocketAddr, mut tcp: TcpStream, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = until_closed(&mut tcp) => {}
            () = stop.cancelled() => return,
        }
        tcp = tokio::select! {
            connected = TcpStream::connect(addr) => match connected {
                Ok(tcp) => tcp,
                Err(_) => return,
            },
            () = stop.cancelled() => return,
        };
    }
}

/// Clients that connect to the TLS port and send nothing hold up no one:
/// with more of them than TLS handshakes may run at once, a new client's
/// first call is answered at once, well within the handshake timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_do_not_hold_up_new_clients() {
    const IDLE: usize = 300;
    let server = TestServer::start_secure(Config::default()).await;
    let stop = CancellationToken::new();
    let mut holders = Vec::with_capacity(IDLE);
    for _ in 0..IDLE {
        let tcp = TcpStream::connect(server.addr).await.expect("connect");
        holders.push(tokio::spawn(hold_idle(server.addr, tcp, stop.clone())));
    }
    for attempt in 1..=5 {
        let started = Instant::now();
        let first_call = async {
            let mut client = server.connect().await;
            add(&mut client, "idle", spec("k", 1.0, 3, b"x")).await
        };
        let answered = tokio::time::timeout(Duration::from_secs(30), first_call).await;
        let took = started.elapsed();
        assert!(
            matches!(answered, Ok(Ok(_))) && took < Duration::from_secs(2),
            "attempt {attempt}: a new client's first call took {took:?} ({answered:?}) beside {IDLE} idle connections"
        );
    }
    stop.cancel();
    for holder in holders {
        holder.await.expect("a holder of an idle connection");
    }
    server.stop().await;
}

/// A gRPC client on a connection of its own from `from` (any 127.x.y.z on
/// Linux), once a call on it has been answered; `None` if the connection was
/// closed before.
async fn served_from(server: &TestServer, from: [u8; 4]) -> Option<Client> {
    let endpoint = Channel::from_shared(format!("http://{}", server.addr)).unwrap();
    let channel = endpoint.local_address(Some(IpAddr::from(from))).connect().await.ok()?;
    let mut client = MatchingClient::new(channel);
    add(&mut client, "capped", spec("k", 1.0, 3, b"x")).await.ok().map(|_| client)
}

/// Whether a connection from `from` is closed by the server at once (within
/// 5 s, where an idle connection it accepted stays open for
/// `limits.connection_idle_timeout`, 10 min).
async fn closed_at_once(server: &TestServer, from: [u8; 4]) -> bool {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    let mut tcp = socket.connect(server.addr).await.expect("connect");
    tokio::time::timeout(Duration::from_secs(5), until_closed(&mut tcp)).await.is_ok()
}

/// Past `limits.max_connections_per_address`, or past
/// `limits.max_connections` in all, a new connection is closed at once; the
/// connections open are served, and one that closes frees its place.
#[tokio::test]
async fn connections_are_bounded_per_address_and_in_total() {
    let mut config = Config::default();
    config.limits.max_connections_per_address = 3;
    config.limits.max_connections = 5;
    let server = TestServer::start_with(config).await;
    // The test server's own client is one connection from 127.0.0.1.
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(served_from(&server, [127, 0, 0, 1]).await.expect("within the bound of 127.0.0.1"));
    }
    assert!(closed_at_once(&server, [127, 0, 0, 1]).await, "a fourth connection from 127.0.0.1 was kept");
    for _ in 0..2 {
        held.push(served_from(&server, [127, 0, 0, 2]).await.expect("another address has its own bound"));
    }
    assert!(closed_at_once(&server, [127, 0, 0, 3]).await, "a sixth connection in all was kept");
    let mut client = server.client.clone();
    add(&mut client, "capped", spec("k", 1.0, 3, b"x")).await.expect("the connections open are served");

    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(30);
    while served_from(&server, [127, 0, 0, 3]).await.is_none() {
        assert!(Instant::now() < deadline, "a closed connection did not free its place within 30 s");
    }
    server.stop().await;
}

/// A connection with no request in progress for
/// `limits.connection_idle_timeout` is closed; one whose poll is parked
/// longer than that is not.
#[tokio::test]
async fn idle_connections_are_closed_and_busy_ones_are_not() {
    let mut config = Config::default();
    config.limits.connection_idle_timeout = Duration::from_secs(1);
    let server = TestServer::start_with(config).await;
    let mut idle = TcpStream::connect(server.addr).await.expect("connect");
    let closed = tokio::time::timeout(Duration::from_secs(30), until_closed(&mut idle)).await;
    assert!(closed.is_ok(), "an idle connection was not closed in 30 s");

    let mut polling = server.connect().await;
    create(&mut polling, "idle", 1).await;
    let parked = Duration::from_secs(3);
    let started = Instant::now();
    let polled = polling
        .poll_task(pb::PollTaskRequest { queue: "idle".into(), worker_id: "w".into(), max_wait: wait(parked) })
        .await;
    assert!(started.elapsed() >= parked, "the poll was not parked");
    assert_eq!(polled.expect("a parked poll is answered, its connection kept").into_inner().task, None);
    server.stop().await;
}

/// A client that stops answering the server's HTTP/2 pings loses its
/// connection after `limits.keepalive_interval` and
/// `limits.keepalive_timeout`, even with a request in progress on it: its
/// place is free again.
#[tokio::test]
async fn a_client_that_stops_answering_pings_loses_its_connection() {
    let mut config = Config::default();
    config.limits.max_connections_per_address = 1;
    config.limits.keepalive_interval = Duration::from_secs(1);
    config.limits.keepalive_timeout = Duration::from_secs(1);
    let server = TestServer::start_with(config).await;
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from(([127, 0, 0, 4], 0))).unwrap();
    let tcp = socket.connect(server.addr).await.expect("connect");
    let (mut client, mut connection) = h2::client::handshake(tcp).await.unwrap();
    let mut ping = connection.ping_pong().expect("a ping handle");
    let request = hyper::Request::post(format!("http://{}/fairway.v1.Matching/AddTask", server.addr))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (_response, _body_never_sent) = client.send_request(request, false).unwrap();
    // Frames arrive in order: once the ping is answered, the server has the
    // request's headers. Then the connection is no longer driven: the
    // server's pings go unanswered.
    tokio::select! {
        pong = ping.ping(h2::Ping::opaque()) => {
            pong.expect("a pong");
        }
        driven = &mut connection => panic!("the connection ended: {driven:?}"),
    }
    assert!(closed_at_once(&server, [127, 0, 0, 4]).await, "a second connection from 127.0.0.4 was kept");
    let deadline = Instant::now() + Duration::from_secs(30);
    while served_from(&server, [127, 0, 0, 4]).await.is_none() {
        assert!(Instant::now() < deadline, "the silent client kept its connection for 30 s");
    }
    drop(connection);
    server.stop().await;
}
