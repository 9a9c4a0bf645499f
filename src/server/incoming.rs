//! The connections the gRPC server serves: accepted with Nagle's algorithm
//! off (a small response must not wait for the client's delayed
//! acknowledgement), and, with TLS on, handshaken apart from the accept loop:
//! at most [`MAX_HANDSHAKES`] at once, each within [`HANDSHAKE_TIMEOUT`], so
//! that a client that connects and sends nothing holds up no one. Every
//! connection is closed when the server says so, whatever its client does.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls_pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tonic::transport::server::Connected;

use crate::security::ServerTls;

/// TLS handshakes in progress at once, at most; further connections wait to
/// be handshaken.
pub const MAX_HANDSHAKES: usize = 256;

/// The longest a TLS handshake may take before its connection is closed.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// One served connection, closed (its reads and writes fail) once the
/// server's `closing` token is cancelled.
#[derive(Debug)]
pub struct Conn {
    stream: Stream,
    closing: Pin<Box<WaitForCancellationFutureOwned>>,
}

#[derive(Debug)]
enum Stream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP, handshake done.
    Tls(Box<TlsStream<TcpStream>>),
}

impl Conn {
    fn new(stream: Stream, closing: &CancellationToken) -> Conn {
        Conn { stream, closing: Box::pin(closing.clone().cancelled_owned()) }
    }

    /// `op` (a read or a write) on the stream; when it would wait, an error
    /// instead once the server closed its connections, and a wake-up when
    /// it does. The closing is looked at only then, off the path of a
    /// read or write that goes through at once.
    fn poll_io<T>(
        &mut self,
        cx: &mut Context<'_>,
        op: impl FnOnce(Pin<&mut dyn Io>, &mut Context<'_>) -> Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match op(self.stream(), cx) {
            Poll::Pending if self.closing.as_mut().poll(cx).is_ready() => {
                let closed = "the server closed the connection at shutdown";
                Poll::Ready(Err(io::Error::new(io::ErrorKind::ConnectionAborted, closed)))
            }
            polled => polled,
        }
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

/// What a handler can learn of its request's connection (a request
/// extension).
#[derive(Clone, Debug)]
pub struct ConnInfo {
    /// The client's address.
    pub remote: Option<SocketAddr>,
    /// The certificate the client presented (mutual TLS), leaf first.
    pub client_certificates: Option<Arc<Vec<CertificateDer<'static>>>>,
}

impl Connected for Conn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        match &self.stream {
            Stream::Plain(tcp) => ConnInfo { remote: tcp.peer_addr().ok(), client_certificates: None },
            Stream::Tls(tls) => {
                let (tcp, session) = tls.get_ref();
                let certificates = session
                    .peer_certificates()
                    .map(|chain| Arc::new(chain.iter().map(|c| c.clone().into_owned()).collect::<Vec<_>>()));
                ConnInfo { remote: tcp.peer_addr().ok(), client_certificates: certificates }
            }
        }
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

/// The connections of `listener`, over TLS when `tls` is given, each closed
/// when `closing` is cancelled. Ends when the server stops reading it.
pub fn incoming(
    listener: TcpListener,
    tls: Option<Arc<ServerTls>>,
    closing: CancellationToken,
) -> impl tokio_stream::Stream<Item = io::Result<Conn>> + Send + 'static {
    let (sender, receiver) = mpsc::channel(MAX_HANDSHAKES);
    tokio::spawn(accept_loop(listener, tls, closing, sender));
    ReceiverStream::new(receiver)
}

async fn accept_loop(
    listener: TcpListener,
    tls: Option<Arc<ServerTls>>,
    closing: CancellationToken,
    sender: mpsc::Sender<io::Result<Conn>>,
) {
    let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = sender.closed() => return,
        };
        let tcp = match accepted.and_then(|(tcp, _)| tcp.set_nodelay(true).map(|()| tcp)) {
            Ok(tcp) => tcp,
            Err(error) => {
                tracing::debug!(%error, "accepting a connection");
                continue;
            }
        };
        let Some(tls) = &tls else {
            if sender.send(Ok(Conn::new(Stream::Plain(tcp), &closing))).await.is_err() {
                return;
            }
            continue;
        };
        let Ok(permit) = handshakes.clone().acquire_owned().await else { return };
        let (acceptor, sender, closing) = (tls.acceptor(), sender.clone(), closing.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let remote = tcp.peer_addr().ok();
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => {
                    let _ = sender.send(Ok(Conn::new(Stream::Tls(Box::new(stream)), &closing))).await;
                }
                Ok(Err(error)) => tracing::debug!(?remote, %error, "TLS handshake failed"),
                Err(_) => tracing::debug!(?remote, "TLS handshake timed out"),
            }
        });
    }
}
