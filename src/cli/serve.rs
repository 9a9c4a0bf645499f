use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;

use fairway::clock::SystemClock;
use fairway::config::Config;
use fairway::server;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// A TOML config file (see docs/operations.md for the keys).
    #[arg(long, env = "FAIRWAY_CONFIG")]
    config: Option<PathBuf>,
    /// Address to listen on, e.g. 127.0.0.1:7070 (port 0 picks a free port).
    #[arg(long)]
    listen: Option<String>,
    /// `embedded:DIR` or `cassandra://HOST:PORT/KEYSPACE`.
    #[arg(long)]
    store: Option<String>,
}

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let mut flags = Vec::new();
    if let Some(listen) = args.listen {
        flags.push(("listen", listen));
    }
    if let Some(store) = args.store {
        flags.push(("store", store));
    }
    let config = Config::load(args.config.as_deref(), std::env::vars(), &flags)?;
    let store_url = config.store_url()?;
    let store = server::open_store(&store_url, &config).await?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let address = listener.local_addr().context("listener address")?;
    tracing::info!(store = %store_url, "store open");
    println!("listening on {address}");
    server::serve(listener, &config, store, Arc::new(SystemClock), shutdown_signal()).await?;
    Ok(())
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; only Ctrl-C stops the server");
                let _ = interrupt.await;
                return;
            }
        };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}
