//! Stable, seedless hashing for decisions that every node and every run must
//! make alike (sketch cells, partition owners). Not for untrusted input that
//! could be chosen to collide: keys only ever delay themselves. And the
//! hasher of maps keyed by the ids a partition assigns ([`IdMap`]).

/// A map keyed by ids the partition assigns, never by a client's text:
/// hashed with foldhash (seeded per map), which costs a fraction of the
/// standard library's SipHash. Maps keyed by what clients choose keep
/// SipHash.
pub type IdMap<V> = std::collections::HashMap<i64, V, foldhash::fast::RandomState>;

/// FNV-1a over bytes.
pub fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The splitmix64 finaliser: spreads nearby inputs over the whole range.
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
