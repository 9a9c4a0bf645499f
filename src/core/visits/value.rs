//! What a visit of an origin is worth now: the changes it is expected to
//! find, per loader-second of it, from what is known of the origin, its
//! change rate ([`super::rate`]) and its visits' mean duration.
//!
//! - Never visited successfully: a visit finds something new for certain.
//! - A lister gave a change after the last successful visit: certain too.
//! - Otherwise the content is known up to the last successful visit (or the
//!   last listing that gave no later change), and changes since are a
//!   Poisson process: `λ·t` of them expected, at least one with chance
//!   `1 − e^{−λ·t}`.
//!
//! The worth grows linearly in time, at `λ / duration` (its *growth*). The
//! `expected_value` index is split in [`BANDS`] bands of growth (a factor
//! of 4 apart); within a band an origin's key is the time its worth
//! reaches [`DUE_WORTH`]. So within a band ascending keys are descending
//! worths, and the worth of any entry at any time is known from its key
//! alone (within the band's factor): a round reads the head of each band,
//! ranks the entries by worth now, and sends the best. Ordering by due time
//! alone would send, under contention, a slow origin overdue for days
//! before a fast one that became due an hour ago and holds more changes.
//!
//! An origin known to hold a change (never visited, or a change listed) is
//! *certain*: its entry sits in a band of its own kind, read up to now
//! whatever the due threshold, so it is due from the time the change became
//! known, and it ranks from there at the due threshold plus its growth.
//! The origins of one listing become known at one time; each is taken as
//! known up to [`CERTAIN_SPREAD_MS`] earlier, by a hash of its URL
//! ([`Worth::spread`]), so
//! that they do not sit in the index in URL order, one host's in a run,
//! where a round that reads a lister's head would find only the hosts
//! whose runs come first.
//!
//! Invariant: an entry whose key is at or below now has a worth at or
//! above [`DUE_WORTH`] (it is *due*); a certain one is due at any threshold.

use super::rate::{MAX_RATE, MIN_RATE};
use super::{DAY_MS, IndexEntry, ListedOrigin, VisitStats, chance_of_change};
use crate::clock::UnixMillis;
use crate::hash::{fnv1a, splitmix64};

/// The most by which a certain entry's due time is put earlier, by a hash
/// of its URL (see the module doc).
pub const CERTAIN_SPREAD_MS: i64 = 60_000;

/// The rate taken for an origin without an estimate (changes per day):
/// about once a month.
pub const DEFAULT_RATE: f64 = 1.0 / 30.0;
/// The duration taken for a visit of an origin never visited (seconds).
pub const DEFAULT_VISIT_SECONDS: f64 = 100.0;
/// The least duration a visit is charged (seconds): a visit that ends at
/// once still takes a loader's slot, a queue round trip and the archive's
/// work; charged less, fast-failing origins would rank above everything.
pub const MIN_VISIT_SECONDS: f64 = 100.0;
/// The worth (expected changes per loader-second) at which an origin is
/// due: for a visit of the default duration, a chance of change of 50%.
pub const DUE_WORTH: f64 = std::f64::consts::LN_2 / DEFAULT_VISIT_SECONDS;
/// The worth of a visit of the default duration with chance `chance` of
/// finding a change.
pub fn worth_of_chance(chance: f64) -> f64 {
    -(-chance).ln_1p() / DEFAULT_VISIT_SECONDS
}

/// The share of a listed origin's change rate a visit is credited with
/// ([`Freshness::Listed`]). Its lister's next listing would show a change,
/// and a visit then finds it for certain: a visit before that saves only
/// the wait for the listing, and may find nothing. At 0.4 such an origin is
/// due at a 97% chance of change where others are at 75%, and at 99.9%
/// where they are at 95%, so the sure visits a listing brings go first
/// while loaders are busy. (Credited in full, the visits of listers that
/// give dates were 13.9% and 16.6% useless on two simulated forges, against
/// 6.4% and 6.7% so: docs/scheduler.md.)
pub const LISTED_CREDIT: f64 = 0.4;

/// Bands of growth in the `expected_value` index, of each kind (certain or
/// not).
pub const BANDS: u8 = 1 << BAND_BITS;
/// The growth (per day) at the top of band 0: 100 changes a day for a visit
/// of 100 s. Band `b` holds growths in `(TOP / 4^(b+1), TOP / 4^b]`; the
/// last band, everything slower.
const TOP_GROWTH: f64 = 1.0;
/// Bits of an index key below its band: the key time, in ms since the
/// Unix epoch (up to year 142,000).
const TIME_BITS: u32 = 52;
/// Bits of an index key for the band, above the time; the bit above them
/// tells a certain entry.
const BAND_BITS: u32 = 4;
const TIME_MAX: i64 = (1 << TIME_BITS) - 1;

/// What is known of an origin's content since its last successful visit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freshness {
    /// Never visited successfully; holding content since `since`.
    New {
        /// Its listed update date, or when it was first listed if that is
        /// earlier or no date was given: so never visited origins go
        /// oldest change first, as the reference's policy sends them.
        since: UnixMillis,
    },
    /// Its lister gave a change after the last successful visit.
    Changed {
        /// The change's date, as the lister gave it.
        since: UnixMillis,
    },
    /// Known as it was at `since`; whether it changed after is a chance.
    Known {
        /// Up to when its content is known.
        since: UnixMillis,
    },
    /// Known as it was at `since`, the later of its last successful visit
    /// and its last listing, which gave no change after it: whether it
    /// changed after is a chance, and its lister's next listing will tell.
    Listed {
        /// Up to when its content is known.
        since: UnixMillis,
    },
}

impl Freshness {
    /// What is known of `origin`.
    pub fn of(origin: &ListedOrigin, stats: &VisitStats) -> Freshness {
        let Some(success) = stats.last_successful.filter(|_| stats.last_snapshot.is_some()) else {
            let since = origin.last_update.map_or(origin.first_seen, |update| update.min(origin.first_seen));
            return Freshness::New { since };
        };
        match origin.last_update {
            Some(update) if update > success => Freshness::Changed { since: update },
            // The last listing gave no change after the visit.
            Some(_) => Freshness::Listed { since: success.max(origin.last_seen) },
            None => Freshness::Known { since: success },
        }
    }

    /// The chance that a visit at `now` finds something new, for a change
    /// rate `rate` per day (`None`: [`DEFAULT_RATE`]), as a visit is
    /// credited with it: at [`Freshness::credited_rate`].
    pub fn chance(self, rate: Option<f64>, now: UnixMillis) -> f64 {
        match self {
            Freshness::New { .. } | Freshness::Changed { .. } => 1.0,
            Freshness::Known { since } | Freshness::Listed { since } => {
                chance_of_change(self.credited_rate(rate.unwrap_or(DEFAULT_RATE)), now - since)
            }
        }
    }

    /// The share of `rate` a visit is credited with: all of it, but
    /// [`LISTED_CREDIT`] of it for a listed origin, whose next listing would
    /// show a change anyway.
    pub fn credited_rate(self, rate: f64) -> f64 {
        match self {
            Freshness::Listed { .. } => rate * LISTED_CREDIT,
            _ => rate,
        }
    }

    /// The changes a visit at `now` is expected to find: one for an origin
    /// never visited, whatever its age (none of it is archived).
    pub fn pending(self, rate: Option<f64>, now: UnixMillis) -> f64 {
        match self {
            Freshness::New { .. } => self.certain(),
            _ => self.certain() + rate.unwrap_or(DEFAULT_RATE) * days(now - self.since()),
        }
    }

    /// From when what is known of it holds.
    pub fn since(self) -> UnixMillis {
        match self {
            Freshness::New { since }
            | Freshness::Changed { since }
            | Freshness::Known { since }
            | Freshness::Listed { since } => since,
        }
    }

    /// The changes a visit finds for certain: one when never visited or
    /// a change was listed (a first visit weighted more, 4 or 16 changes,
    /// gave more lag in simulation), else none.
    pub fn certain(self) -> f64 {
        match self {
            Freshness::New { .. } | Freshness::Changed { .. } => 1.0,
            Freshness::Known { .. } | Freshness::Listed { .. } => 0.0,
        }
    }
}

/// The middle growth of band `band` (per day).
fn band_growth(band: u8) -> f64 {
    TOP_GROWTH / 4f64.powf(f64::from(band) + 0.5)
}

fn days(ms: i64) -> f64 {
    (ms.max(0)) as f64 / DAY_MS as f64
}

/// An origin's place in the `expected_value` index: whether it is certain to
/// hold a change, its band of growth, and the time its worth reaches
/// [`DUE_WORTH`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Worth {
    /// Known to hold a change (never visited, or a change listed).
    pub certain: bool,
    /// Its band of growth, `0..BANDS`.
    pub band: u8,
    /// When its worth reaches [`DUE_WORTH`] (clamped to `0..2^52` ms).
    pub due: UnixMillis,
}

impl Worth {
    /// Where an origin with `freshness`, change rate `rate` (per day) and
    /// visits of `seconds` on average stands (`None`: the defaults).
    pub fn of(freshness: Freshness, rate: Option<f64>, seconds: Option<f64>) -> Worth {
        let rate = freshness.credited_rate(rate.unwrap_or(DEFAULT_RATE)).clamp(MIN_RATE, MAX_RATE);
        let seconds = seconds.unwrap_or(DEFAULT_VISIT_SECONDS).max(MIN_VISIT_SECONDS);
        let growth = rate / seconds;
        let band = ((TOP_GROWTH / growth).log(4.0).floor().max(0.0) as u64).min(u64::from(BANDS) - 1) as u8;
        let since = freshness.since();
        let after = |days: f64| since.saturating_add((days * DAY_MS as f64).clamp(0.0, TIME_MAX as f64) as i64);
        let certain = freshness.certain() > 0.0;
        let due = if certain {
            // Due from when the change became known.
            since
        } else {
            after(DUE_WORTH * seconds / rate)
        };
        Worth { certain, band, due: due.clamp(0, TIME_MAX) }
    }

    /// A certain entry due up to [`CERTAIN_SPREAD_MS`] earlier, by a hash of
    /// `url`: entries of one listing alternate in the index whatever their
    /// hosts, and none is due later than before. Others are unchanged.
    pub fn spread(self, url: &str) -> Worth {
        if !self.certain {
            return self;
        }
        let offset = (splitmix64(fnv1a(url.bytes())) % CERTAIN_SPREAD_MS as u64) as i64;
        Worth { due: self.due.saturating_sub(offset).max(0), ..self }
    }

    /// The index key: the kind and the band above the time, so that each
    /// band of each kind is a range of keys ([`Worth::band_keys`]).
    pub fn key(self) -> i64 {
        (i64::from(self.certain) << (TIME_BITS + BAND_BITS)) | (i64::from(self.band) << TIME_BITS) | self.due
    }

    /// The place a key names.
    pub fn of_key(key: i64) -> Worth {
        let certain = (key >> (TIME_BITS + BAND_BITS)) & 1 == 1;
        let band = ((key >> TIME_BITS) & (i64::from(BANDS) - 1)) as u8;
        Worth { certain, band, due: key & TIME_MAX }
    }

    /// The keys of band `band` of the certain entries or of the others:
    /// `from..below`.
    pub fn band_keys(certain: bool, band: u8) -> (i64, i64) {
        let from = Worth { certain, band, due: 0 }.key();
        (from, from + TIME_MAX + 1)
    }

    /// Its worth at `now`, taking its band's middle growth (within a factor
    /// of 2 of its own growth's contribution), where `threshold` is the
    /// worth at which origins are due: a certain entry is worth at least
    /// that from its key's time on.
    pub fn at(self, now: UnixMillis, threshold: f64) -> f64 {
        let lift = if self.certain { (threshold - DUE_WORTH).max(0.0) } else { 0.0 };
        DUE_WORTH + lift + band_growth(self.band) * (now - self.due) as f64 / DAY_MS as f64
    }

    /// The key ranges to read for the entries due at `now` at the worth
    /// `threshold` (`from..below`, empty ones left out), or for all of them
    /// (`threshold` `None`): of each band, the certain entries up to now and
    /// the others whose worth (by [`Worth::at`]) reaches the threshold.
    pub fn ranges(threshold: Option<f64>, now: UnixMillis) -> Vec<(i64, i64)> {
        let mut ranges = Vec::with_capacity(2 * usize::from(BANDS));
        for band in 0..BANDS {
            for certain in [true, false] {
                let (from, end) = Worth::band_keys(certain, band);
                let latest = match threshold {
                    None => TIME_MAX,
                    Some(_) if certain => now,
                    Some(worth) => {
                        let lead = ((worth - DUE_WORTH) / band_growth(band) * DAY_MS as f64)
                            .clamp(-(TIME_MAX as f64), TIME_MAX as f64);
                        now.saturating_sub(lead.ceil() as i64)
                    }
                };
                let below = end.min(from + latest.clamp(-1, TIME_MAX) + 1);
                if below > from {
                    ranges.push((from, below));
                }
            }
        }
        ranges
    }
}

/// Entries of the `expected_value` index (of any bands), most worth at `now`
/// first (ties by URL), each with that worth; `threshold` as in
/// [`Worth::at`]. With `certain_first`, every certain entry goes before
/// the others: while loaders are busy, a visit sure to find something
/// takes the slot before one that may find nothing.
pub fn rank_by_worth(
    entries: Vec<IndexEntry>,
    now: UnixMillis,
    threshold: f64,
    certain_first: bool,
) -> Vec<(IndexEntry, f64)> {
    let mut ranked: Vec<(IndexEntry, Worth, f64)> = entries
        .into_iter()
        .map(|e| {
            let worth = Worth::of_key(e.key);
            (e, worth, worth.at(now, threshold))
        })
        .collect();
    ranked.sort_by(|(a, ka, wa), (b, kb, wb)| {
        let first = if certain_first { kb.certain.cmp(&ka.certain) } else { std::cmp::Ordering::Equal };
        first.then_with(|| wb.total_cmp(wa)).then_with(|| a.url.cmp(&b.url))
    });
    ranked.into_iter().map(|(e, _, w)| (e, w)).collect()
}

/// An origin not due yet that spare capacity could visit.
#[derive(Clone, Debug, PartialEq)]
pub struct Spare<T> {
    /// What names it (an index entry, say).
    pub item: T,
    /// The chance a visit now finds something new.
    pub chance: f64,
    /// Its worth now (expected changes per loader-second).
    pub worth: f64,
}

/// Up to `slots` of `spares` whose chance is at least `min_chance`, most
/// worth first; `room` is asked before one is taken, as in a round.
pub fn pick_spares<T>(
    mut spares: Vec<Spare<T>>,
    slots: usize,
    min_chance: f64,
    room: &mut dyn FnMut(&T) -> bool,
) -> Vec<T> {
    spares.retain(|s| s.chance >= min_chance);
    spares.sort_by(|a, b| b.worth.total_cmp(&a.worth));
    let mut picked = Vec::new();
    for spare in spares {
        if picked.len() == slots {
            break;
        }
        if room(&spare.item) {
            picked.push(spare.item);
        }
    }
    picked
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::visits::{DAY_MS, VisitStatus};

    fn origin(last_update: Option<i64>, last_seen: i64) -> ListedOrigin {
        ListedOrigin {
            url: "https://h/r".into(),
            visit_type: "git".into(),
            lister: "l".into(),
            last_update,
            first_seen: 5,
            last_seen,
            is_fork: false,
            extra_loader_arguments: String::new(),
        }
    }

    fn visited(at: i64) -> VisitStats {
        VisitStats {
            last_visit: Some(at),
            last_successful: Some(at),
            last_visit_status: Some(VisitStatus::Successful),
            last_snapshot: Some(b"s".to_vec()),
            ..VisitStats::default()
        }
    }

    #[test]
    fn what_is_known_of_an_origin() {
        let day = DAY_MS;
        assert_eq!(Freshness::of(&origin(None, 0), &VisitStats::default()), Freshness::New { since: 5 });
        assert_eq!(
            Freshness::of(&origin(Some(2), 0), &VisitStats::default()),
            Freshness::New { since: 2 },
            "never visited, known to hold content since its update date"
        );
        assert_eq!(Freshness::of(&origin(Some(9), 0), &VisitStats::default()), Freshness::New { since: 5 });
        assert_eq!(
            Freshness::of(&origin(Some(9 * day), 10 * day), &visited(day)),
            Freshness::Changed { since: 9 * day }
        );
        assert_eq!(
            Freshness::of(&origin(Some(0), 10 * day), &visited(day)),
            Freshness::Listed { since: 10 * day },
            "the last listing saw no change after the visit"
        );
        assert_eq!(Freshness::of(&origin(None, 10 * day), &visited(day)), Freshness::Known { since: day });
    }

    #[test]
    fn spares_go_by_worth_above_the_chance_floor() {
        let spare = |item, chance, worth| Spare { item, chance, worth };
        let spares =
            vec![spare("slow", 0.4, 1.0), spare("fast", 0.3, 10.0), spare("low", 0.05, 50.0), spare("b", 0.35, 5.0)];
        assert_eq!(pick_spares(spares.clone(), 10, 0.1, &mut |_| true), vec!["fast", "b", "slow"]);
        assert_eq!(pick_spares(spares.clone(), 1, 0.1, &mut |_| true), vec!["fast"]);
        assert_eq!(pick_spares(spares, 10, 0.1, &mut |s| *s != "fast"), vec!["b", "slow"], "no room for fast");
    }

    #[test]
    fn the_chance_and_the_pending_changes_grow_with_time_and_rate() {
        let known = Freshness::Known { since: 0 };
        assert!(known.chance(Some(1.0), DAY_MS) > known.chance(Some(0.1), DAY_MS));
        assert!(known.chance(Some(0.1), 10 * DAY_MS) > known.chance(Some(0.1), DAY_MS));
        assert!((known.pending(Some(0.5), 4 * DAY_MS) - 2.0).abs() < 1e-9);
        assert_eq!(Freshness::New { since: 3 }.chance(None, 3), 1.0);
        assert!((Freshness::Changed { since: 0 }.pending(Some(0.5), 2 * DAY_MS) - 2.0).abs() < 1e-9);
    }

    #[test]
    fn a_known_origin_is_due_when_its_worth_reaches_the_due_worth() {
        let known = Freshness::Known { since: 10 * DAY_MS };
        for (rate, seconds) in [(0.5, 100.0), (2.0, 300.0), (0.01, 600.0), (1.0 / 365.0, 150.0)] {
            let worth = Worth::of(known, Some(rate), Some(seconds));
            assert!(!worth.certain);
            let at_due = known.pending(Some(rate), worth.due) / seconds;
            assert!((at_due - DUE_WORTH).abs() < 1e-6 * DUE_WORTH, "{rate}/{seconds}: {at_due}");
            // The worth read back from the key is within the band's factor.
            let later = worth.due + 3 * DAY_MS;
            let exact = known.pending(Some(rate), later) / seconds;
            let from_key = Worth::of_key(worth.key()).at(later, DUE_WORTH);
            assert!(from_key / exact < 2.0 && exact / from_key < 2.0, "{rate}/{seconds}: {from_key} vs {exact}");
        }
        let default = Worth::of(known, None, None);
        assert!((known.chance(None, default.due) - 0.5).abs() < 1e-6, "the default visit: a 50% chance");
    }

    #[test]
    fn a_listed_origin_is_due_later_than_one_only_a_visit_can_tell() {
        let (known, listed) = (Freshness::Known { since: 0 }, Freshness::Listed { since: 0 });
        for rate in [0.01, 0.5, 2.0] {
            let at_known = Worth::of(known, Some(rate), None);
            let at_listed = Worth::of(listed, Some(rate), None);
            assert!(!at_listed.certain && at_listed.due > at_known.due, "{rate}");
            // Where others are due at 70%, a listed origin is at about 95%.
            let due_at = |threshold: f64| {
                let mut day = 0.0;
                while Worth::of_key(at_listed.key()).at((day * DAY_MS as f64) as i64, threshold) < threshold {
                    day += 0.001 / rate;
                }
                chance_of_change(rate, (day * DAY_MS as f64) as i64)
            };
            let at_70 = due_at(worth_of_chance(0.7));
            assert!((0.93..0.97).contains(&at_70), "{rate}: due at {at_70}");
            assert!(due_at(worth_of_chance(0.95)) > 0.998, "{rate}");
            // The chance a spare is judged by is credited the same way.
            let day = (DAY_MS as f64 * 1.2 / rate) as i64;
            assert!((known.chance(Some(rate), day) - 0.7).abs() < 0.01);
            assert!(listed.chance(Some(rate), day) < 0.4);
        }
    }

    #[test]
    fn a_short_visit_is_charged_the_least_a_visit_costs() {
        let known = Freshness::Known { since: 0 };
        let instant = Worth::of(known, Some(0.2), Some(1.0));
        assert_eq!(instant, Worth::of(known, Some(0.2), Some(MIN_VISIT_SECONDS)));
        assert!(Worth::of(known, Some(0.2), Some(2.0 * MIN_VISIT_SECONDS)).due > instant.due);
    }

    #[test]
    fn the_ranges_read_what_reaches_a_threshold_and_every_certain_entry_up_to_now() {
        let now = 300 * DAY_MS;
        for chance in [0.3, 0.5, 0.8, 0.99] {
            let worth = worth_of_chance(chance);
            let ranges = Worth::ranges(Some(worth), now);
            let read = |key: i64| ranges.iter().any(|(from, below)| (*from..*below).contains(&key));
            for band in [0, 5, BANDS - 1] {
                for hours in (-2_000..2_000).step_by(7) {
                    let due = (now + hours * 3_600_000).max(0);
                    let uncertain = Worth { certain: false, band, due };
                    let at = uncertain.at(now, worth);
                    assert_eq!(read(uncertain.key()), at >= worth * (1.0 - 1e-9), "{band} {chance} {hours}");
                    let certain = Worth { certain: true, band, due };
                    assert_eq!(read(certain.key()), due <= now, "certain {band} {chance} {hours}");
                    if due <= now {
                        assert!(certain.at(now, worth) >= worth, "a certain entry is worth the threshold");
                    }
                }
            }
        }
        let all = Worth::ranges(None, now);
        assert_eq!(all.len(), 2 * usize::from(BANDS));
        assert!((worth_of_chance(0.5) - DUE_WORTH).abs() < 1e-12);
    }

    #[test]
    fn one_listing_s_new_origins_alternate_hosts_in_the_index() {
        let since = 7 * DAY_MS;
        let new = Worth::of(Freshness::New { since }, None, None);
        // Two hosts of 500 origins each, listed at once: in URL order, all of
        // the first host's come before any of the second's.
        let mut keys: Vec<(i64, &str)> = Vec::new();
        let urls: Vec<(String, &str)> = ["a.example", "b.example"]
            .iter()
            .flat_map(|host| (0..500).map(move |i| (format!("https://{host}/r{i:03}"), *host)))
            .collect();
        for (url, host) in &urls {
            let spread = new.spread(url);
            assert!(spread.certain && spread.band == new.band);
            assert!((since - CERTAIN_SPREAD_MS..=since).contains(&spread.due), "due within the spread, not later");
            assert_eq!(new.spread(url), spread, "the same origin, the same key");
            keys.push((spread.key(), host));
        }
        keys.sort();
        let first_hundred = keys.iter().take(100).filter(|(_, host)| *host == "a.example").count();
        assert!((30..=70).contains(&first_hundred), "{first_hundred} of the first 100 on one host");
        let known = Worth::of(Freshness::Known { since }, Some(0.1), None);
        assert_eq!(known.spread("https://a.example/r000"), known, "only certain entries move");
    }

    #[test]
    fn a_known_change_is_due_at_once_and_bands_split_the_keys() {
        let changed = Worth::of(Freshness::Changed { since: 7 * DAY_MS }, Some(0.001), Some(5_000.0));
        assert_eq!(changed.due, 7 * DAY_MS, "due when the change became known, however slow");
        assert!(changed.certain);
        let new = Worth::of(Freshness::New { since: 7 * DAY_MS }, None, None);
        assert!(new.certain && new.due == 7 * DAY_MS);
        let fast = Worth::of(Freshness::Known { since: 0 }, Some(2.0), Some(100.0));
        let slow = Worth::of(Freshness::Known { since: 0 }, Some(0.01), Some(100.0));
        assert!(fast.band < slow.band && fast.due < slow.due);
        for worth in [changed, new, fast, slow] {
            assert_eq!(Worth::of_key(worth.key()), worth);
            let (from, below) = Worth::band_keys(worth.certain, worth.band);
            assert!((from..below).contains(&worth.key()));
        }
        let slowest = Worth::of(Freshness::Known { since: 0 }, Some(1e-5), Some(1e6));
        assert_eq!(slowest.band, BANDS - 1, "the last band holds everything slower");
        let fastest = Worth::of(Freshness::Known { since: 0 }, Some(100.0), Some(1.0));
        assert_eq!(fastest.band, 0);
        // An origin overdue for a week at a slow rate is worth less than a
        // fast one due an hour ago: the order a due-time index got wrong.
        let now = 100 * DAY_MS;
        let overdue_slow = Worth { due: now - 7 * DAY_MS, ..slow };
        let just_due_fast = Worth { due: now - DAY_MS / 24, ..fast };
        assert!(just_due_fast.at(now, DUE_WORTH) > overdue_slow.at(now, DUE_WORTH));
    }
}
