//! `fairway serve`: loads the layered config (file, `FAIRWAY_*`
//! environment, flags), starts the node, and stops it in order on Ctrl-C or
//! SIGTERM.
//!
//! Invariant: the signal handlers are installed before the server says
//! where it listens, so that a signal sent from then on stops it in order.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use opentelemetry::trace::TracerProvider;

use fairway::clock::SystemClock;
use fairway::config::Config;
use fairway::server::{self, Listeners};
use fairway::telemetry::otlp;

#[derive(Args, Debug)]
pub(super) struct ServeArgs {
    /// A TOML config file (see docs/operations.md for the keys).
    #[arg(long, env = "FAIRWAY_CONFIG")]
    config: Option<PathBuf>,
    /// Address to listen on, e.g. 127.0.0.1:7070 (port 0 picks a free port).
    #[arg(long)]
    listen: Option<String>,
    /// `embedded:DIR` or `cassandra://HOST:PORT/KEYSPACE`.
    #[arg(long)]
    store: Option<String>,
    /// Address to serve Prometheus metrics on (`GET /metrics`), e.g.
    /// 127.0.0.1:9464; empty for none (the default).
    #[arg(long)]
    metrics_listen: Option<String>,
}

pub(super) async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let mut flags = Vec::new();
    if let Some(listen) = args.listen {
        flags.push(("listen", listen));
    }
    if let Some(store) = args.store {
        flags.push(("store", store));
    }
    if let Some(metrics_listen) = args.metrics_listen {
        flags.push(("telemetry.metrics_listen", metrics_listen));
    }
    let config = Config::load(args.config.as_deref(), std::env::vars(), &flags)?;
    let traces = match config.telemetry.otlp_endpoint().map_err(anyhow::Error::msg)? {
        Some(endpoint) => {
            let address = match config.cluster.advertise.as_str() {
                "" => config.listen.to_string(),
                advertised => advertised.to_owned(),
            };
            let node = config.cluster.node_name(&address);
            Some(otlp::tracer_provider(&endpoint, node).context("cannot export traces")?)
        }
        None => None,
    };
    super::init_logging(true, traces.as_ref().map(|provider| provider.tracer("fairway")));
    if !config.ignored_env.is_empty() {
        tracing::warn!(variables = ?config.ignored_env, "FAIRWAY_* variables that name no config key are ignored");
    }
    let served = serve(&config).await;
    if let Some(provider) = traces {
        // Blocks until the last batch of spans is pushed, over this runtime.
        let flushed = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(error)) = flushed {
            tracing::warn!(%error, "the last spans could not be pushed");
        }
    }
    served
}

async fn serve(config: &Config) -> anyhow::Result<()> {
    let store_url = config.store_url()?;
    let store = server::open_store(&store_url, config).await?;
    let grpc = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let address = grpc.local_addr().context("listener address")?;
    let metrics = match config.telemetry.metrics_listen().map_err(anyhow::Error::msg)? {
        Some(address) => Some(
            tokio::net::TcpListener::bind(address)
                .await
                .with_context(|| format!("cannot serve metrics on {address}"))?,
        ),
        None => None,
    };
    let console = match config.console.address(address, &config.security).map_err(anyhow::Error::msg)? {
        Some(at) => Some(bind_console(at, config.console.listen.is_empty()).await?),
        None => None,
    };
    tracing::info!(store = %store_url, "store open");
    let shutdown = shutdown_signal();
    let mut announced = format!("listening on {address}\n");
    if let Some(console) = &console {
        let scheme = if config.security.tls_files().is_some() { "https" } else { "http" };
        announced.push_str(&format!("console on {scheme}://{}/\n", console.local_addr()?));
    }
    announce(&announced);
    let listeners = Listeners { grpc, metrics, console };
    server::serve(listeners, config, store, Arc::new(SystemClock), shutdown).await?;
    Ok(())
}

/// Prints `lines` in one write to standard output, where a reader may
/// stop after the first line (the tests' harnesses do) and close the pipe:
/// one write puts every line in the pipe before the reader can close it,
/// and a pipe closed even so costs nothing but the lines.
fn announce(lines: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(lines.as_bytes()).and_then(|()| stdout.flush());
}

/// The console's listener at `at`; when `at` is only the default (the
/// port after gRPC's) and taken, any free port, with a warning.
async fn bind_console(at: std::net::SocketAddr, default: bool) -> anyhow::Result<tokio::net::TcpListener> {
    match tokio::net::TcpListener::bind(at).await {
        Ok(listener) => Ok(listener),
        Err(error) if default => {
            tracing::warn!(%error, "the console's default address {at} is taken: serving it on another port (set console.listen)");
            let any = std::net::SocketAddr::new(at.ip(), 0);
            tokio::net::TcpListener::bind(any).await.with_context(|| format!("cannot serve the console on {any}"))
        }
        Err(error) => Err(error).with_context(|| {
            format!("cannot serve the console on {at} (console.listen; console.enabled = false turns it off)")
        }),
    }
}

/// Ctrl-C or SIGTERM. The handlers are installed when this is called, not
/// when the future is first polled: a signal sent as soon as the server
/// says where it listens stops it in order rather than killing it.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let signals = signal(SignalKind::interrupt()).and_then(|i| Ok((i, signal(SignalKind::terminate())?)));
        async move {
            match signals {
                Ok((mut interrupt, mut terminate)) => tokio::select! {
                    _ = interrupt.recv() => {}
                    _ = terminate.recv() => {}
                },
                Err(error) => {
                    tracing::warn!(%error, "cannot listen for signals; only Ctrl-C stops the server");
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
