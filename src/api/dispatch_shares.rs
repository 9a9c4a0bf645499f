//! Each key's share of what a queue's partitions handed out lately, beside
//! its target, from a DescribeQueue answer: what `fairway queue describe`
//! and the console show of fairness at work.

use std::collections::BTreeMap;

use crate::proto::v1 as pb;

/// One key's share of recent dispatch and its target, in percent.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyShare {
    /// The fairness key.
    pub key: String,
    /// Tasks handed out lately.
    pub tasks: u64,
    /// Its share of the cost handed out.
    pub share: f64,
    /// Its weight over the weights of the keys listed.
    pub target: f64,
}

/// What the partitions of `described` handed out lately.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Shares {
    /// The keys listed, the largest share first.
    pub keys: Vec<KeyShare>,
    /// The share of the keys not listed, together.
    pub others: f64,
    /// The longest span a partition's tally covers, in seconds.
    pub span_s: f64,
}

/// The keys' shares summed over the partitions of `described`.
pub fn shares(described: &pb::DescribeQueueResponse) -> Shares {
    let mut keys: BTreeMap<&str, (u64, u64, f64)> = BTreeMap::new();
    let mut others = 0;
    let mut span_s: f64 = 0.0;
    for p in &described.partitions {
        for k in &p.recent_dispatch {
            let entry = keys.entry(&k.fairness_key).or_insert((0, 0, k.weight));
            (entry.0, entry.1) = (entry.0 + k.tasks, entry.1 + k.cost);
        }
        others += p.recent_others.as_ref().map_or(0, |o| o.cost);
        if let Some(s) = &p.recent_span {
            span_s = span_s.max(s.seconds as f64 + f64::from(s.nanos) / 1e9);
        }
    }
    let total = (keys.values().map(|k| k.1).sum::<u64>() + others).max(1) as f64;
    let weights = keys.values().map(|k| k.2).sum::<f64>().max(f64::MIN_POSITIVE);
    let mut listed: Vec<KeyShare> = keys
        .into_iter()
        .map(|(key, (tasks, cost, weight))| KeyShare {
            key: key.to_owned(),
            tasks,
            share: 100.0 * cost as f64 / total,
            target: 100.0 * weight / weights,
        })
        .collect();
    listed.sort_by(|a, b| b.share.total_cmp(&a.share).then_with(|| a.key.cmp(&b.key)));
    Shares { keys: listed, others: 100.0 * others as f64 / total, span_s }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str, tasks: u64, cost: u64, weight: f64) -> pb::KeyDispatch {
        pb::KeyDispatch { fairness_key: name.into(), tasks, cost, weight }
    }

    #[test]
    fn shares_sum_over_partitions_and_targets_follow_weights() {
        let partition = |keys: Vec<pb::KeyDispatch>, others: u64| pb::PartitionState {
            recent_dispatch: keys,
            recent_others: Some(key("", others, others, 0.0)),
            recent_span: Some(prost_types::Duration { seconds: 12, nanos: 0 }),
            ..Default::default()
        };
        let described = pb::DescribeQueueResponse {
            partitions: vec![
                partition(vec![key("a", 30, 30, 3.0), key("b", 10, 10, 1.0)], 0),
                partition(vec![key("a", 30, 30, 3.0), key("b", 10, 20, 1.0)], 10),
            ],
            ..Default::default()
        };
        let shares = shares(&described);
        assert_eq!((shares.span_s, shares.others), (12.0, 10.0));
        let got: Vec<(&str, u64, f64, f64)> =
            shares.keys.iter().map(|s| (s.key.as_str(), s.tasks, s.share, s.target)).collect();
        assert_eq!(got, [("a", 60, 60.0, 75.0), ("b", 20, 30.0, 25.0)]);
    }
}
