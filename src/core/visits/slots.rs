//! Sharing a round's free slots among weighted policies.

/// Divides `slots` among policies of weights `weights`, each able to fill at
/// most `available[i]`. Shares are proportional to the weights; what a
/// policy cannot fill goes to the others, again by weight, until every slot
/// is given or no policy has more. The result never exceeds `available` or
/// sums above `slots`.
///
/// Each share is its exact value rounded down or up: the odd slots are drawn
/// with chances equal to the remainders (systematic sampling from `unit`, a
/// random number in `[0, 1)`), so that over many rounds each share averages
/// its exact value. A fixed rule (largest remainder, ties by position) would
/// give them to the same policies or listers every round, and a round with
/// fewer slots than listers would serve only the first listers.
pub fn share_slots(slots: u64, weights: &[f64], available: &[u64], unit: &mut dyn FnMut() -> f64) -> Vec<u64> {
    assert_eq!(weights.len(), available.len(), "one weight per policy");
    let mut given = vec![0u64; weights.len()];
    let mut left = slots;
    loop {
        let open: Vec<usize> = (0..weights.len()).filter(|&i| weights[i] > 0.0 && given[i] < available[i]).collect();
        if left == 0 || open.is_empty() {
            return given;
        }
        let total: f64 = open.iter().map(|&i| weights[i]).sum();
        let exact: Vec<(usize, f64)> = open.iter().map(|&i| (i, left as f64 * weights[i] / total)).collect();
        let mut round: Vec<(usize, u64, f64)> =
            exact.iter().map(|&(i, x)| (i, x.floor() as u64, x - x.floor())).collect();
        let mut odd = left - round.iter().map(|(_, n, _)| n).sum::<u64>();
        if odd > 0 {
            // Points at u, u + 1, u + 2 … over the remainders laid end to end;
            // a remainder is below 1, so it holds at most one point.
            let (mut point, mut end) = (unit().clamp(0.0, 1.0 - f64::EPSILON), 0.0);
            for entry in &mut round {
                end += entry.2;
                if odd > 0 && point < end {
                    entry.1 += 1;
                    entry.2 = -1.0;
                    odd -= 1;
                    point += 1.0;
                }
            }
            // What rounding errors left: the largest remainders not drawn.
            round.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
            for entry in round.iter_mut().take(odd as usize) {
                entry.1 += 1;
            }
        }
        for (i, share, _) in round {
            let taken = share.min(available[i] - given[i]);
            given[i] += taken;
            left -= taken;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(slots: u64, weights: &[f64], available: &[u64]) -> Vec<u64> {
        share_slots(slots, weights, available, &mut || 0.5)
    }

    #[test]
    fn slots_follow_the_weights_when_every_policy_can_fill_them() {
        assert_eq!(share(100, &[40.0, 40.0, 20.0], &[1000, 1000, 1000]), vec![40, 40, 20]);
        assert_eq!(share(10, &[1.0, 1.0, 1.0], &[10, 10, 10]).iter().sum::<u64>(), 10);
    }

    #[test]
    fn what_a_policy_cannot_fill_goes_to_the_others_by_weight() {
        // Never-visited has only 5 origins: its 35 other slots go 2:1 to the others.
        assert_eq!(share(100, &[40.0, 40.0, 20.0], &[1000, 5, 1000]), vec![63, 5, 32]);
        assert_eq!(share(100, &[40.0, 40.0, 20.0], &[10, 5, 20]), vec![10, 5, 20], "all there is");
        assert_eq!(share(0, &[1.0], &[5]), vec![0]);
    }

    #[test]
    fn a_zero_weight_policy_gets_nothing() {
        assert_eq!(share(10, &[0.0, 1.0], &[100, 3]), vec![0, 3]);
    }

    #[test]
    fn odd_slots_are_drawn_by_remainder_so_every_share_averages_its_exact_value() {
        // 7 slots among 20 equal listers: each gets 0 or 1, 7 in all, and
        // each gets 7/20 on average, not the first 7 every time.
        let mut seed = 1u64;
        let mut unit = || {
            seed = crate::hash::splitmix64(seed);
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut total = [0u64; 20];
        let rounds = 20_000;
        for _ in 0..rounds {
            let shares = share_slots(7, &[1.0; 20], &[100; 20], &mut unit);
            assert_eq!(shares.iter().sum::<u64>(), 7);
            assert!(shares.iter().all(|&s| s <= 1));
            total.iter_mut().zip(&shares).for_each(|(t, s)| *t += s);
        }
        for t in total {
            let mean = t as f64 / f64::from(rounds);
            assert!((mean - 0.35).abs() < 0.02, "{total:?}");
        }
        // Weights 49 / 49 / 2 and one slot: the small policy gets it 2% of the time.
        let small = (0..rounds).filter(|_| share_slots(1, &[49.0, 49.0, 2.0], &[9; 3], &mut unit)[2] == 1).count();
        assert!((small as f64 / f64::from(rounds) - 0.02).abs() < 0.005, "{small}");
        // Units at the edges still give every slot.
        for u in [0.0, 0.999_999_999_999] {
            assert_eq!(share_slots(3, &[1.0; 7], &[5; 7], &mut || u).iter().sum::<u64>(), 3);
        }
    }
}
