//! The synthetic forge: listers of very different sizes, their origins and
//! hosts, and the truth the scheduler never sees (when each origin changes,
//! which origins are dead). Immutable once built; every random draw is a
//! hash of the seed, so both arms see the same forge and the same updates.

use std::ops::Range;

use fairway::core::visits::DAY_MS;
use fairway::hash::splitmix64;

/// What the forge is made of.
#[derive(Clone, Debug)]
pub(crate) struct ForgeParams {
    pub origins: u32,
    pub listers: usize,
    pub start: i64,
    pub days: u32,
    pub seed: u64,
    /// Share of the listers that give no update date.
    pub undated_share: f64,
}

/// Share of origins that are dead: every visit finds nothing.
pub(super) const DEAD_SHARE: f64 = 0.05;
/// Share of origins created during the run (the others exist at the start).
pub(super) const NEW_SHARE: f64 = 0.10;
/// Size of the biggest lister over the smallest.
pub(super) const SIZE_SPREAD: f64 = 1000.0;
/// Hosts of the one lister spread over many hosts.
pub(super) const SPREAD_HOSTS: u32 = 50;
/// Rank of that lister (0 is the biggest).
pub(super) const SPREAD_RANK: usize = 3;

/// Update rates (per day) and the share of origins at each: most origins
/// change rarely, a few several times a day.
pub(super) const RATE_MIX: [(f64, f64); 5] =
    [(0.50, 1.0 / 365.0), (0.30, 1.0 / 60.0), (0.14, 1.0 / 10.0), (0.05, 0.5), (0.01, 2.0)];

#[derive(Clone, Debug)]
pub(crate) struct Lister {
    pub name: String,
    /// Origin ids, contiguous: those existing at the start first, then the
    /// new ones in order of creation.
    pub origins: Range<u32>,
    /// Whether its listings give each origin's last update.
    pub dated: bool,
    /// Host ids of its origins.
    pub hosts: Range<u32>,
    /// Time between two listings.
    pub period_ms: i64,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Origin {
    pub lister: u16,
    pub host: u32,
    pub dead: bool,
    /// Updates per day (a Poisson process from its creation or the start).
    pub rate: f32,
    /// When it was created (at or before the start for most).
    pub created: i64,
    /// Its last update before the start (its creation for new origins).
    pub updated_before: i64,
}

#[derive(Clone, Debug)]
pub(crate) struct Forge {
    pub params: ForgeParams,
    pub listers: Vec<Lister>,
    pub origins: Vec<Origin>,
    pub hosts: Vec<String>,
}

/// Where an origin's update process stands: `count` updates at or before
/// some time, the last of them at `last`, the next at `next`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cursor {
    pub count: u32,
    pub last: i64,
    pub next: i64,
}

/// A uniform number in [0, 1) for draw `what` of `key`.
pub(super) fn unit(seed: u64, key: u64, what: u64) -> f64 {
    let h = splitmix64(seed ^ splitmix64(key.wrapping_mul(0x1000_0001) ^ splitmix64(what)));
    (h >> 11) as f64 / (1u64 << 53) as f64
}

impl Forge {
    /// For tests: 2,000 origins of 3 listers that all give dates, over a day
    /// from time 0.
    #[cfg(test)]
    pub(crate) fn tiny() -> Forge {
        Forge::new(ForgeParams { origins: 2_000, listers: 3, start: 0, days: 1, seed: 1, undated_share: 0.0 })
    }

    pub(crate) fn new(params: ForgeParams) -> Forge {
        let seed = params.seed;
        let n = params.listers;
        // Sizes fall geometrically with rank, the biggest SIZE_SPREAD times the smallest.
        let ratio = if n > 1 { SIZE_SPREAD.powf(-1.0 / (n - 1) as f64) } else { 1.0 };
        let weights: Vec<f64> = (0..n).map(|i| ratio.powi(i as i32)).collect();
        let total: f64 = weights.iter().sum();
        let mut sizes: Vec<u32> =
            weights.iter().map(|w| ((w / total * f64::from(params.origins)).floor() as u32).max(1)).collect();
        let given: u32 = sizes.iter().sum();
        sizes[0] += params.origins.saturating_sub(given);
        let end = params.start + i64::from(params.days) * DAY_MS;

        let mut listers = Vec::with_capacity(n);
        let mut origins = Vec::with_capacity(params.origins as usize);
        let mut hosts = Vec::new();
        for (rank, &size) in sizes.iter().enumerate() {
            let name = format!("l{rank:02}");
            let spread = rank == SPREAD_RANK && n > SPREAD_RANK;
            let first_host = hosts.len() as u32;
            if spread {
                hosts.extend((0..SPREAD_HOSTS).map(|h| format!("h{h:02}.{name}.example")));
            } else {
                hosts.push(format!("{name}.example"));
            }
            let host_count = hosts.len() as u32 - first_host;
            // `undated_share` of the listers give no update date, spread
            // over the sizes (a third: ranks 1, 4, 7…).
            // (A hair above a third, so that rounding keeps the thirds exact.)
            let offset = 1.0 / 3.0 + 1e-9;
            let undated = ((rank + 1) as f64 * params.undated_share + offset).floor()
                > (rank as f64 * params.undated_share + offset).floor();
            let dated = !undated;
            let period_days = 1.0 + 6.0 * unit(seed, rank as u64, 1);
            let period_ms = (period_days * 24.0).round() as i64 * 3600 * 1000;
            let first = origins.len() as u32;
            let new = (f64::from(size) * NEW_SHARE).round() as u32;
            let existing = size - new;
            let mut created_new: Vec<i64> = (0..new)
                .map(|i| {
                    let u = unit(seed, u64::from(first + existing + i), 2);
                    params.start + 1 + (u * (end - params.start - 1) as f64) as i64
                })
                .collect();
            created_new.sort_unstable();
            for i in 0..size {
                let id = first + i;
                let key = u64::from(id);
                let dead = unit(seed, key, 3) < DEAD_SHARE;
                let rate = if dead { 0.0 } else { rate_of(unit(seed, key, 4)) };
                let host = first_host + (splitmix64(key ^ seed) % u64::from(host_count)) as u32;
                let (created, updated_before) = if i < existing {
                    // Created up to eight years ago; last changed an exponential
                    // time before the start (but not before its creation).
                    let age = (1.0 + 2_920.0 * unit(seed, key, 5)) * DAY_MS as f64;
                    let created = params.start - age as i64;
                    let since = if rate > 0.0 { -(1.0 - unit(seed, key, 6)).ln() / f64::from(rate) } else { f64::MAX };
                    let updated = params.start - (since * DAY_MS as f64).min(age) as i64;
                    (created, updated)
                } else {
                    let created = created_new[(i - existing) as usize];
                    (created, created)
                };
                origins.push(Origin { lister: rank as u16, host, dead, rate, created, updated_before });
            }
            listers.push(Lister {
                name,
                origins: first..first + size,
                dated,
                hosts: first_host..first_host + host_count,
                period_ms,
            });
        }
        Forge { params, listers, origins, hosts }
    }

    pub(crate) fn end(&self) -> i64 {
        self.params.start + i64::from(self.params.days) * DAY_MS
    }

    /// The origin's URL; [`Forge::id_of`] reads the id back.
    pub(crate) fn url(&self, id: u32) -> String {
        let origin = &self.origins[id as usize];
        format!("https://{}/r{id}", self.hosts[origin.host as usize])
    }

    pub(crate) fn id_of(url: &str) -> Option<u32> {
        url.rsplit_once("/r").and_then(|(_, id)| id.parse().ok())
    }

    /// Where an origin's updates begin: none yet, the first one ahead.
    pub(crate) fn cursor(&self, id: u32) -> Cursor {
        let origin = &self.origins[id as usize];
        let from = origin.created.max(self.params.start);
        Cursor { count: 0, last: origin.updated_before, next: self.update_after(id, 0, from) }
    }

    /// Moves `cursor` over every update at or before `through`, calling
    /// `each` with its time.
    pub(crate) fn advance(&self, id: u32, cursor: &mut Cursor, through: i64, mut each: impl FnMut(i64)) {
        while cursor.next <= through {
            each(cursor.next);
            cursor.last = cursor.next;
            cursor.count += 1;
            cursor.next = self.update_after(id, cursor.count, cursor.next);
        }
    }

    /// The time of update number `k` of the origin, given the one before.
    fn update_after(&self, id: u32, k: u32, previous: i64) -> i64 {
        let rate = self.origins[id as usize].rate;
        if rate <= 0.0 {
            return i64::MAX;
        }
        let u = unit(self.params.seed, u64::from(id), 100 + u64::from(k));
        let days = -(1.0 - u).ln() / f64::from(rate);
        previous.saturating_add((days * DAY_MS as f64).max(1.0) as i64)
    }
}

fn rate_of(u: f64) -> f32 {
    let mut acc = 0.0;
    for (share, rate) in RATE_MIX {
        acc += share;
        if u < acc {
            return rate as f32;
        }
    }
    RATE_MIX[RATE_MIX.len() - 1].1 as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forge(origins: u32, listers: usize) -> Forge {
        Forge::new(ForgeParams { origins, listers, start: 0, days: 10, seed: 7, undated_share: 1.0 / 3.0 })
    }

    #[test]
    fn listers_cover_every_origin_biggest_first() {
        let f = forge(100_000, 20);
        assert_eq!(f.origins.len(), 100_000);
        assert_eq!(f.listers.iter().map(|l| l.origins.len()).sum::<usize>(), 100_000);
        let sizes: Vec<usize> = f.listers.iter().map(|l| l.origins.len()).collect();
        assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "{sizes:?}");
        assert!(sizes[0] > 300 * sizes[19], "{sizes:?}");
        assert_eq!(f.listers[SPREAD_RANK].hosts.len(), SPREAD_HOSTS as usize);
        assert_eq!(f.listers.iter().filter(|l| !l.dated).count(), 7);
        for l in &f.listers {
            assert!((DAY_MS..=7 * DAY_MS).contains(&l.period_ms));
            for id in l.origins.clone() {
                assert_eq!(Forge::id_of(&f.url(id)), Some(id));
                assert!(l.hosts.contains(&f.origins[id as usize].host));
            }
        }
    }

    #[test]
    fn updates_follow_the_rate_and_cursors_agree() {
        let f = forge(20_000, 5);
        let end = 10 * DAY_MS;
        let (mut expected, mut seen) = (0.0, 0u64);
        for id in 0..20_000u32 {
            let o = f.origins[id as usize];
            expected += f64::from(o.rate) * (end - o.created.max(0)) as f64 / DAY_MS as f64;
            let mut whole = f.cursor(id);
            f.advance(id, &mut whole, end, |_| seen += 1);
            let mut steps = f.cursor(id);
            f.advance(id, &mut steps, end / 2, |_| {});
            f.advance(id, &mut steps, end, |_| {});
            assert_eq!((whole.count, whole.last), (steps.count, steps.last));
        }
        assert!((seen as f64 - expected).abs() < 0.05 * expected, "{seen} updates, {expected:.0} expected");
    }
}
