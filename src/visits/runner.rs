//! The loop that runs a node's rounds: every visit type some lister listed,
//! again after `round_interval` when a round sent visits, after
//! `idle_interval` when it sent none or failed.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Scheduler, VisitQueue};
use crate::clock::UnixMillis;

/// Runs rounds of every visit type some lister listed, until `stop`: again
/// after `round_interval` when a round sent visits, after `idle_interval`
/// when it sent none or failed.
pub async fn run_rounds(
    scheduler: Arc<Scheduler>,
    queue: Arc<dyn VisitQueue>,
    clock: crate::clock::SharedClock,
    stop: tokio_util::sync::CancellationToken,
) {
    let config = scheduler.config().clone();
    let mut due: BTreeMap<String, UnixMillis> = BTreeMap::new();
    loop {
        let now = clock.now_ms();
        match scheduler.visit_types().await {
            Ok(types) => {
                for visit_type in types {
                    if due.get(&visit_type).is_some_and(|&at| at > now) {
                        continue;
                    }
                    let wait = match scheduler.run_round(&visit_type, queue.as_ref(), now).await {
                        Ok(report) if report.sent() > 0 => {
                            tracing::info!(
                                visit_type,
                                sent = report.sent(),
                                slots = report.slots,
                                woken = report.woken,
                                "round"
                            );
                            config.round_interval
                        }
                        Ok(_) => config.idle_interval,
                        Err(error) => {
                            tracing::warn!(visit_type, %error, "round failed");
                            config.idle_interval
                        }
                    };
                    due.insert(visit_type, now + crate::clock::millis(wait));
                }
            }
            Err(error) => tracing::warn!(%error, "reading the listers"),
        }
        let next = due.values().min().map_or(config.round_interval, |&at| {
            std::time::Duration::from_millis(u64::try_from(at - clock.now_ms()).unwrap_or(0))
        });
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(next.min(config.round_interval)) => {}
        }
    }
}
