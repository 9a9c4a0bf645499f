//! SIGINT and SIGTERM for `fairway worker`: the first stops the taking of
//! tasks, the second stops the running commands and hands their tasks back,
//! the third ends the worker at once (its commands die with it, and their
//! tasks are delivered again when their leases run out).

use tokio_util::sync::CancellationToken;

pub(super) struct Signals {
    /// Stop taking tasks.
    pub(super) stopping: CancellationToken,
    /// Kill the running commands and hand their tasks back.
    pub(super) abandon: CancellationToken,
}

impl Signals {
    /// Catches the signals from now on (before any task is taken).
    pub(super) fn watch() -> Signals {
        use tokio::signal::unix::{SignalKind, signal};
        let signals = Signals { stopping: CancellationToken::new(), abandon: CancellationToken::new() };
        let (Ok(mut interrupt), Ok(mut terminate)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate()))
        else {
            tracing::warn!("cannot catch SIGINT and SIGTERM: they will kill the worker and its commands");
            return signals;
        };
        let tokens = [signals.stopping.clone(), signals.abandon.clone()];
        tokio::spawn(async move {
            let mut next = async || {
                tokio::select! {
                    _ = interrupt.recv() => "SIGINT",
                    _ = terminate.recv() => "SIGTERM",
                }
            };
            let said = [
                "no more tasks; the running commands finish first (signal again to kill them and hand their tasks back)",
                "killing the running commands and handing their tasks back (signal again to exit at once)",
            ];
            for (token, said) in tokens.into_iter().zip(said) {
                let name = next().await;
                tracing::info!("{name}: {said}");
                token.cancel();
            }
            let name = next().await;
            tracing::warn!("{name}: exiting now; tasks not yet reported are delivered again when their leases run out");
            std::process::exit(130);
        });
        signals
    }
}
