//! The rule of a node's hold on the lease of a visit type's rounds
//! (`rounds/<visit type>`, see [`crate::store::leases`]): whether it may
//! run a round, and when it asks the store again. Pure: the time is an
//! argument.
//!
//! Invariant: a node runs a round only while it holds the lease with more
//! than a margin (a third of the lease) left by its own clock, counted from
//! the moment it asked for the lease, not from when the store answered. So
//! another node, which takes the lease only once it expired by that node's
//! clock, never runs rounds of the same visit type at the same time while
//! the clocks of the two differ by less than the margin.

use std::time::Duration;

use crate::clock::{UnixMillis, millis};

/// The shortest wait between two asks of one lease.
const FLOOR: Duration = Duration::from_millis(10);

/// The times that follow from the lease's length (`scheduler.rounds_lease`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Timing {
    ttl: Duration,
}

impl Timing {
    pub(crate) fn new(ttl: Duration) -> Timing {
        Timing { ttl }
    }

    /// The lease's length, as asked of the store.
    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    /// A holder renews this long after it last asked: a third of the lease.
    pub(crate) fn renew_every(&self) -> Duration {
        (self.ttl / 3).max(FLOOR)
    }

    /// The validity a holder must have left to run rounds: a third of the
    /// lease (the clocks of the nodes must differ by less).
    pub(crate) fn margin_ms(&self) -> i64 {
        millis(self.ttl / 3)
    }

    /// The wait after the store failed to answer: a twelfth of the lease,
    /// so that a holder tries about twice more before it must stop.
    pub(crate) fn retry_after_error(&self) -> Duration {
        (self.ttl / 12).max(FLOOR)
    }
}

/// This node's hold on the lease: the token the store gave it, and the
/// time (by this node's clock) the lease lasts until at the least.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hold {
    /// The token of this holding: unchanged as long as the holding lasts.
    pub token: u64,
    /// When the store's lease ends at the earliest: the time of the ask it
    /// answered, plus the lease's length.
    pub until: UnixMillis,
}

impl Hold {
    /// Until when (exclusive) it may run rounds: the margin before `until`.
    pub(crate) fn runs_until(&self, timing: Timing) -> UnixMillis {
        self.until.saturating_sub(timing.margin_ms())
    }

    /// Whether it may run a round at `now`.
    pub(crate) fn runs_rounds(&self, now: UnixMillis, timing: Timing) -> bool {
        now < self.runs_until(timing)
    }
}

/// What the store answered an ask (an acquire).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// This node holds the lease, at this token.
    Held {
        /// The lease's token.
        token: u64,
    },
    /// Another node holds it, until this time by its clock (if known).
    HeldByOther {
        /// When that holding expires, if the store said.
        expires_at: Option<UnixMillis>,
    },
    /// No answer (an error or a timeout): the lease may or may not have
    /// been renewed.
    Failed,
}

/// After an ask made at `asked_at` got `answer`, at `now`: the hold (from
/// `previous`, the hold before the ask) and how long to wait before the next
/// ask.
///
/// - Held: held until `asked_at` + the lease, renewed a third of the lease
///   after the ask.
/// - Held by another: not held; asked again when that holding expires, at
///   the latest a third of the lease later.
/// - No answer: the hold before is kept (it still ends when it did: the
///   store may not have renewed it), asked again soon.
pub(crate) fn after_ask(
    timing: Timing,
    previous: Option<Hold>,
    asked_at: UnixMillis,
    answer: Answer,
    now: UnixMillis,
) -> (Option<Hold>, Duration) {
    let until_ms = |at: UnixMillis| Duration::from_millis(u64::try_from(at.saturating_sub(now)).unwrap_or(0));
    match answer {
        Answer::Held { token } => {
            let hold = Hold { token, until: asked_at.saturating_add(millis(timing.ttl())) };
            let wait = until_ms(asked_at.saturating_add(millis(timing.renew_every())));
            (Some(hold), wait.max(FLOOR))
        }
        Answer::HeldByOther { expires_at } => {
            let wait = expires_at.map_or(timing.renew_every(), |at| until_ms(at.saturating_add(1)));
            (None, wait.clamp(FLOOR, timing.renew_every()))
        }
        Answer::Failed => (previous, timing.retry_after_error()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(6);

    #[test]
    fn a_holder_runs_rounds_until_a_third_of_the_lease_is_left_and_renews_every_third() {
        let timing = Timing::new(TTL);
        let (hold, wait) = after_ask(timing, None, 1_000, Answer::Held { token: 3 }, 1_050);
        let hold = hold.expect("held");
        assert_eq!(hold, Hold { token: 3, until: 7_000 }, "counted from the ask, not the answer");
        assert_eq!(wait, Duration::from_millis(1_950), "renewed 2 s after the ask");
        assert!(hold.runs_rounds(4_999, timing));
        assert!(!hold.runs_rounds(5_000, timing), "2 s (a third) before the end, it stops");
    }

    #[test]
    fn a_failed_renewal_keeps_the_old_end_and_retries_soon() {
        let timing = Timing::new(TTL);
        let held = Some(Hold { token: 3, until: 7_000 });
        let (hold, wait) = after_ask(timing, held, 3_000, Answer::Failed, 3_100);
        assert_eq!(hold, held, "not extended by an ask that got no answer");
        assert_eq!(wait, Duration::from_millis(500));
        // Errors until the margin: no more rounds, though no one said so.
        assert!(!hold.unwrap().runs_rounds(5_000, timing));
        assert_eq!(after_ask(timing, None, 0, Answer::Failed, 0).0, None);
    }

    #[test]
    fn a_refused_renewal_ends_the_hold_at_once_and_the_next_ask_waits_for_the_expiry() {
        let timing = Timing::new(TTL);
        let held = Some(Hold { token: 3, until: 7_000 });
        let (hold, wait) = after_ask(timing, held, 3_000, Answer::HeldByOther { expires_at: Some(4_000) }, 3_010);
        assert_eq!(hold, None);
        assert_eq!(wait, Duration::from_millis(991), "just past the other's expiry");
        let far = after_ask(timing, None, 3_000, Answer::HeldByOther { expires_at: Some(60_000) }, 3_000);
        assert_eq!(far.1, Duration::from_secs(2), "at most a third of the lease");
        let past = after_ask(timing, None, 3_000, Answer::HeldByOther { expires_at: Some(1_000) }, 3_000);
        assert_eq!(past.1, FLOOR, "never a busy loop");
        assert_eq!(after_ask(timing, None, 0, Answer::HeldByOther { expires_at: None }, 0).1, Duration::from_secs(2));
    }

    /// A holder killed just after a renewal: a node that asks again as
    /// the rule says takes the lease over within the lease and a third,
    /// under 10 s with the default 6 s.
    #[test]
    fn another_node_takes_over_within_ten_seconds_of_the_holders_death() {
        let timing = Timing::new(TTL);
        let died_at = 10_000;
        let last_renewal = died_at; // the latest possible: its lease ends at died_at + 6 s
        let expires_at = last_renewal + millis(TTL);
        // The other node asked just before the renewal, and was told the old expiry.
        let mut now = died_at - 1;
        let (_, mut wait) =
            after_ask(timing, None, now, Answer::HeldByOther { expires_at: Some(died_at + 4_000) }, now);
        loop {
            now += millis(wait);
            if now >= expires_at {
                break;
            }
            wait = after_ask(timing, None, now, Answer::HeldByOther { expires_at: Some(expires_at) }, now).1;
        }
        assert!(now - died_at < 10_000, "taken {} ms after the death", now - died_at);
    }
}
