//! Sharing a round's free slots among weighted policies.

/// Divides `slots` among policies of weights `weights`, each able to fill at
/// most `available[i]`. Shares are proportional to the weights (largest
/// remainders get the odd slots); what a policy cannot fill goes to the
/// others, again by weight, until every slot is given or no policy has
/// more. The result never exceeds `available` or sums above `slots`.
pub fn share_slots(slots: u64, weights: &[f64], available: &[u64]) -> Vec<u64> {
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
        round.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
        for entry in &mut round {
            if odd == 0 {
                break;
            }
            entry.1 += 1;
            odd -= 1;
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

    #[test]
    fn slots_follow_the_weights_when_every_policy_can_fill_them() {
        assert_eq!(share_slots(100, &[40.0, 40.0, 20.0], &[1000, 1000, 1000]), vec![40, 40, 20]);
        assert_eq!(share_slots(10, &[1.0, 1.0, 1.0], &[10, 10, 10]).iter().sum::<u64>(), 10);
    }

    #[test]
    fn what_a_policy_cannot_fill_goes_to_the_others_by_weight() {
        // Never-visited has only 5 origins: its 35 other slots go 2:1 to the others.
        assert_eq!(share_slots(100, &[40.0, 40.0, 20.0], &[1000, 5, 1000]), vec![63, 5, 32]);
        assert_eq!(share_slots(100, &[40.0, 40.0, 20.0], &[10, 5, 20]), vec![10, 5, 20], "all there is");
        assert_eq!(share_slots(0, &[1.0], &[5]), vec![0]);
    }

    #[test]
    fn a_zero_weight_policy_gets_nothing() {
        assert_eq!(share_slots(10, &[0.0, 1.0], &[100, 3]), vec![0, 3]);
    }
}
