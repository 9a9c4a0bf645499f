//! `GET /metrics` over HTTP/1.1, for Prometheus. Every answer is a fresh
//! reading of the queues; nothing else is served. Once told to stop it
//! accepts nothing more, and is gone within [`DRAIN`].

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::metrics::{self, Sampler};

/// How long scrapes in progress may take to finish once `stop` fires.
const DRAIN: Duration = Duration::from_secs(5);
/// How long a client may take to send a request's head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// Answers scrapes on `listener` until `stop`; then stops accepting, lets the
/// scrapes in progress finish (for up to [`DRAIN`]) and closes idle
/// connections.
pub(super) async fn serve(listener: TcpListener, sampler: Arc<Sampler>, stop: CancellationToken) {
    let graceful = GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.cancelled() => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of file descriptors, say: wait for some to close.
                tracing::warn!(%error, "metrics endpoint: could not accept a connection");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(100)) => continue,
                    _ = stop.cancelled() => break,
                }
            }
        };
        let sampler = sampler.clone();
        let service = service_fn(move |request| {
            let response = respond(&request, &sampler);
            async move { Ok::<_, Infallible>(response) }
        });
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEAD_TIMEOUT)
            .serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "metrics endpoint: connection ended badly");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown()).await.is_err() {
        tracing::warn!("metrics endpoint: scrapes still running after {DRAIN:?}; dropping them");
    }
}

fn respond(request: &Request<Incoming>, sampler: &Sampler) -> Response<Full<Bytes>> {
    if request.uri().path() != "/metrics" {
        return plain(StatusCode::NOT_FOUND, "not found; metrics are on /metrics\n");
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "use GET\n");
        response.headers_mut().insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    let mut response = Response::new(Full::new(Bytes::from(sampler.render())));
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(metrics::CONTENT_TYPE));
    response
}

fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}
