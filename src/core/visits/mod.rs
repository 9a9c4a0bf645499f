//! The origin-visit scheduler's pure core: what a visit's outcome does to an
//! origin's statistics and next visit (`feedback`), when an origin may be
//! scheduled again (`cooldown`), where it stands in the policy indexes
//! (`placement`), how a round's free slots are shared among listers and
//! weighted policies (`slots`, `round`), how often an origin changes
//! (`rate`), what a visit of it is worth now (`value`) and at what chance
//! of a change it is due (`threshold`). No I/O; time is an argument.
//!
//! Invariants kept here:
//! 1. An outcome older than the last one recorded for the origin changes
//!    nothing (outcomes may arrive out of order; the latest visit wins).
//! 2. The interval index stays within `0..=MAX_OFFSET`; the interval it
//!    names only grows with the index.
//! 3. A round never hands out more slots than it has, and a slot a policy
//!    cannot fill goes to the others in proportion to their weights.
//! 4. An origin's change evidence stays bounded (see `rate`), and the chance
//!    that a visit finds something new is 1 when that is known, else
//!    grows with the time since its content was last known.

pub mod cooldown;
pub mod feedback;
pub mod placement;
pub mod policy;
pub mod rate;
pub mod round;
pub mod slots;
pub mod threshold;
pub mod value;

pub use cooldown::Cooldowns;
pub use feedback::{MAX_OFFSET, VisitResult, VisitStats, VisitStatus, interval_days};
pub use placement::{IndexEntry, KeyRange, ListerMetrics, OriginState, OriginWrite, Placement};
pub use policy::{Candidate, ListedOrigin, Policy};
pub use rate::{ChangeEvidence, chance_of_change, time_to_chance};
pub use round::{Choice, Heads, Sharing, heads_to_extend, plan_round};
pub use slots::share_slots;
pub use threshold::{DueThreshold, RoundLoad};
pub use value::Freshness;

/// Milliseconds in a day.
pub const DAY_MS: i64 = 24 * 3600 * 1000;
