//! The connections the gRPC server serves: accepted with Nagle's algorithm
//! off (a small response must not wait for the client's delayed
//! acknowledgement), and, with TLS on, handshaken apart from the accept loop:
//! at most [`MAX_HANDSHAKES`] at once, each within [`HANDSHAKE_TIMEOUT`], so
//! that a client that connects and sends nothing holds up no one.

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
use tonic::transport::server::Connected;

use crate::security::ServerTls;

/// TLS handshakes in progress at once, at most; further connections wait to
/// be handshaken.
pub const MAX_HANDSHAKES: usize = 256;

/// The longest a TLS handshake may take before its connection is closed.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// One served connection.
#[derive(Debug)]
pub enum Conn {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP, handshake done.
    Tls(Box<TlsStream<TcpStream>>),
}

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
        match self {
            Conn::Plain(tcp) => ConnInfo { remote: tcp.peer_addr().ok(), client_certificates: None },
            Conn::Tls(tls) => {
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
        match self.get_mut() {
            Conn::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Conn::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Conn::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Conn::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Conn::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(tcp) => Pin::new(tcp).poll_write_vectored(cx, bufs),
            Conn::Tls(tls) => Pin::new(tls.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Plain(tcp) => tcp.is_write_vectored(),
            Conn::Tls(tls) => tls.is_write_vectored(),
        }
    }
}

/// The connections of `listener`, over TLS when `tls` is given. Ends when
/// the server stops reading it.
pub fn incoming(
    listener: TcpListener,
    tls: Option<Arc<ServerTls>>,
) -> impl tokio_stream::Stream<Item = io::Result<Conn>> + Send + 'static {
    let (sender, receiver) = mpsc::channel(MAX_HANDSHAKES);
    tokio::spawn(accept_loop(listener, tls, sender));
    ReceiverStream::new(receiver)
}

async fn accept_loop(listener: TcpListener, tls: Option<Arc<ServerTls>>, sender: mpsc::Sender<io::Result<Conn>>) {
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
            if sender.send(Ok(Conn::Plain(tcp))).await.is_err() {
                return;
            }
            continue;
        };
        let Ok(permit) = handshakes.clone().acquire_owned().await else { return };
        let (acceptor, sender) = (tls.acceptor(), sender.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let remote = tcp.peer_addr().ok();
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => {
                    let _ = sender.send(Ok(Conn::Tls(Box::new(stream)))).await;
                }
                Ok(Err(error)) => tracing::debug!(?remote, %error, "TLS handshake failed"),
                Err(_) => tracing::debug!(?remote, "TLS handshake timed out"),
            }
        });
    }
}
