//! The connections the gRPC server serves: accepted with Nagle's algorithm
//! off (a small response must not wait for the client's delayed
//! acknowledgement), each counted against `limits.max_connections` and
//! `limits.max_connections_per_address` from its accept to its close (one
//! past either is closed as soon as it is accepted), and, with TLS on,
//! handshaken apart from the accept loop, each within [`HANDSHAKE_TIMEOUT`].
//!
//! Invariants: the accept loop never waits on a client, so that clients that
//! connect and send nothing hold up no one but themselves; the counts are
//! those of the connections open (each connection holds its place from its
//! accept to its close); a connection with no request in progress for
//! `limits.connection_idle_timeout` is closed; and every connection is
//! closed when the server says so, whatever its client does.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tonic::codegen::{Body, Bytes, Service, http};
use tonic::transport::server::Connected;

use crate::api::{ConnInfo, Requests};
use crate::model::Limits;
use crate::security::ServerTls;

/// The longest a TLS handshake may take before its connection is closed.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections ready to be served that the server has not taken yet, at
/// most.
const READY_CONNECTIONS: usize = 256;

/// How often, at most, refused connections are logged (with their count).
const REFUSALS_LOGGED_EVERY: Duration = Duration::from_secs(10);

/// One served connection, closed (its reads and writes fail) once the
/// server's `closing` token is cancelled, or once it has had no request in
/// progress for its idle timeout.
#[derive(Debug)]
pub struct Conn {
    stream: Stream,
    closing: Pin<Box<WaitForCancellationFutureOwned>>,
    requests: Arc<Requests>,
    idle_timeout: Duration,
    /// When to look again at whether the connection is idle.
    idle_check: Pin<Box<Sleep>>,
    _admitted: Admitted,
}

#[derive(Debug)]
enum Stream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP, handshake done.
    Tls(Box<TlsStream<TcpStream>>),
}

impl Conn {
    fn new(stream: Stream, admitted: Admitted, settings: &Settings) -> Conn {
        let idle_timeout = settings.idle_timeout;
        Conn {
            stream,
            closing: Box::pin(settings.closing.clone().cancelled_owned()),
            requests: Arc::new(Requests::new()),
            idle_timeout,
            idle_check: Box::pin(tokio::time::sleep(idle_timeout)),
            _admitted: admitted,
        }
    }

    /// `op` (a read or a write) on the stream; when it would wait, an error
    /// instead once the server closes the connection, and a wake-up when it
    /// does. Whether it does is looked at only then, off the path of a read
    /// or write that goes through at once.
    fn poll_io<T>(
        &mut self,
        cx: &mut Context<'_>,
        op: impl FnOnce(Pin<&mut dyn Io>, &mut Context<'_>) -> Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match op(self.stream(), cx) {
            Poll::Pending => match self.closed(cx) {
                Some(why) => Poll::Ready(Err(io::Error::new(io::ErrorKind::ConnectionAborted, why))),
                None => Poll::Pending,
            },
            polled => polled,
        }
    }

    /// Why the server closes this connection now, if it does: it shuts
    /// down, or the connection has been idle for its timeout. Otherwise,
    /// arranges a wake-up for when either could be so.
    fn closed(&mut self, cx: &mut Context<'_>) -> Option<&'static str> {
        if self.closing.as_mut().poll(cx).is_ready() {
            return Some("the server closed the connection at shutdown");
        }
        while self.idle_check.as_mut().poll(cx).is_ready() {
            let now = Instant::now();
            let next_check = match self.requests.idle_since() {
                Some(since) if now >= since + self.idle_timeout => {
                    return Some("the server closed the connection: no request for limits.connection_idle_timeout");
                }
                Some(since) => since + self.idle_timeout,
                None => now + self.idle_timeout,
            };
            self.idle_check.as_mut().reset(next_check);
        }
        None
    }

    fn stream(&mut self) -> Pin<&mut dyn Io> {
        match &mut self.stream {
            Stream::Plain(tcp) => Pin::new(tcp),
            Stream::Tls(tls) => Pin::new(tls.as_mut()),
        }
    }
}

/// What a connection's stream is.
trait Io: AsyncRead + AsyncWrite + Unpin {}

impl<T: AsyncRead + AsyncWrite + Unpin> Io for T {}

impl Connected for Conn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        let requests = Some(self.requests.clone());
        match &self.stream {
            Stream::Plain(tcp) => ConnInfo { remote: tcp.peer_addr().ok(), client_certificates: None, requests },
            Stream::Tls(tls) => {
                let (tcp, session) = tls.get_ref();
                let certificates = session
                    .peer_certificates()
                    .map(|chain| Arc::new(chain.iter().map(|c| c.clone().into_owned()).collect::<Vec<_>>()));
                ConnInfo { remote: tcp.peer_addr().ok(), client_certificates: certificates, requests }
            }
        }
    }
}

/// A service that counts each request on its connection from its start
/// until its response has been sent (or dropped), so that a connection is
/// idle only when nothing is in progress on it: a parked poll, a response
/// still being written, a health `Watch` stream.
#[derive(Clone, Debug)]
pub struct CountRequests<S> {
    inner: S,
}

impl<S> CountRequests<S> {
    /// Counts the requests `inner` serves.
    pub fn new(inner: S) -> CountRequests<S> {
        CountRequests { inner }
    }
}

impl<S, B, R> Service<http::Request<B>> for CountRequests<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    R: Body<Data = Bytes> + Send + 'static,
    R::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let in_progress = request.extensions().get::<ConnInfo>().and_then(|c| c.requests.as_ref()).map(Requests::begin);
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            // The body holds the count until it is sent or dropped.
            Ok(response.map(|body| {
                tonic::body::Body::new(body.map_frame(move |frame| {
                    let _counted = &in_progress;
                    frame
                }))
            }))
        })
    }
}

impl AsyncRead for Conn {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_io(cx, |io, cx| io.poll_read(cx, buf))
    }
}

impl AsyncWrite for Conn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.get_mut().poll_io(cx, |io, cx| io.poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_io(cx, |io, cx| io.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().stream().poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_io(cx, |io, cx| io.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match &self.stream {
            Stream::Plain(tcp) => tcp.is_write_vectored(),
            Stream::Tls(tls) => tls.is_write_vectored(),
        }
    }
}

/// How the connections of a listener are served.
#[derive(Clone, Debug)]
struct Settings {
    tls: Option<Arc<ServerTls>>,
    idle_timeout: Duration,
    closing: CancellationToken,
}

/// The connections of `listener`, over TLS when `tls` is given, within the
/// connection limits of `limits`, each closed when `closing` is cancelled.
/// Ends when the server stops reading it.
pub fn incoming(
    listener: TcpListener,
    tls: Option<Arc<ServerTls>>,
    limits: &Limits,
    closing: CancellationToken,
) -> impl tokio_stream::Stream<Item = io::Result<Conn>> + Send + 'static {
    let (sender, receiver) = mpsc::channel(READY_CONNECTIONS);
    let admissions = Arc::new(Admissions::new(limits.max_connections, limits.max_connections_per_address));
    let settings = Settings { tls, idle_timeout: limits.connection_idle_timeout, closing };
    tokio::spawn(accept_loop(listener, admissions, settings, sender));
    ReceiverStream::new(receiver)
}

async fn accept_loop(
    listener: TcpListener,
    admissions: Arc<Admissions>,
    settings: Settings,
    sender: mpsc::Sender<io::Result<Conn>>,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = sender.closed() => return,
        };
        let (tcp, remote) = match accepted.and_then(|(tcp, remote)| tcp.set_nodelay(true).map(|()| (tcp, remote))) {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::debug!(%error, "accepting a connection");
                continue;
            }
        };
        // Refused: dropped, so closed at once.
        let Some(admitted) = admissions.admit(remote.ip()) else { continue };
        let Some(tls) = &settings.tls else {
            if sender.send(Ok(Conn::new(Stream::Plain(tcp), admitted, &settings))).await.is_err() {
                return;
            }
            continue;
        };
        let (acceptor, sender, settings) = (tls.acceptor(), sender.clone(), settings.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => {
                    let _ = sender.send(Ok(Conn::new(Stream::Tls(Box::new(stream)), admitted, &settings))).await;
                }
                Ok(Err(error)) => tracing::debug!(%remote, %error, "TLS handshake failed"),
                Err(_) => tracing::debug!(%remote, "TLS handshake timed out"),
            }
        });
    }
}

/// The connections open, in total and by client address, within their
/// limits.
///
/// Invariant: the counts are the numbers of live [`Admitted`]; an address
/// is in the map only while its count is above zero.
#[derive(Debug)]
struct Admissions {
    max_total: usize,
    max_per_address: usize,
    open: Mutex<Open>,
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
    /// Connections refused since the last refusal logged, and when that was.
    refused: (u64, Option<Instant>),
}

/// One connection open, counted until dropped.
#[derive(Debug)]
struct Admitted {
    admissions: Arc<Admissions>,
    address: IpAddr,
}

impl Admissions {
    fn new(max_total: usize, max_per_address: usize) -> Admissions {
        Admissions { max_total, max_per_address, open: Mutex::new(Open::default()) }
    }

    /// A place for a connection from `address`, or `None` when the
    /// connections open already reach a limit.
    fn admit(self: &Arc<Self>, address: IpAddr) -> Option<Admitted> {
        let address = address.to_canonical();
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let of_address = open.by_address.get(&address).copied().unwrap_or(0);
        let full = if open.total >= self.max_total {
            Some(("limits.max_connections", self.max_total))
        } else if of_address >= self.max_per_address {
            Some(("limits.max_connections_per_address", self.max_per_address))
        } else {
            None
        };
        if let Some((key, limit)) = full {
            open.refused.0 += 1;
            let now = Instant::now();
            if open.refused.1.is_none_or(|logged| now >= logged + REFUSALS_LOGGED_EVERY) {
                let refused = std::mem::replace(&mut open.refused, (0, Some(now))).0;
                tracing::warn!(
                    %address,
                    refused_since_last_logged = refused,
                    "closing a new connection at once: {limit} are open already ({key})"
                );
            }
            return None;
        }
        open.total += 1;
        *open.by_address.entry(address).or_insert(0) += 1;
        Some(Admitted { admissions: self.clone(), address })
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.admissions.open.lock().unwrap_or_else(|p| p.into_inner());
        open.total -= 1;
        if let Some(count) = open.by_address.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                open.by_address.remove(&self.address);
            }
        }
    }
}
