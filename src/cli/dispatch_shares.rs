//! `queue describe`'s view of fairness at work: each key's share of what
//! the partitions this node holds handed out lately, beside its target (its
//! weight over the weights of the keys handed out in that time).

use std::collections::BTreeMap;

use fairway::proto::v1 as pb;

/// One key's share and target, in percent of cost handed out.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Share {
    pub key: String,
    pub tasks: u64,
    pub share: f64,
    pub target: f64,
}

/// The keys' shares over the partitions of `response` (the longest span
/// among them), most first; the others' share; the span in seconds.
pub(super) fn shares(response: &pb::DescribeQueueResponse) -> (Vec<Share>, f64, f64) {
    let mut keys: BTreeMap<&str, (u64, u64, f64)> = BTreeMap::new();
    let mut others = 0;
    let mut span: f64 = 0.0;
    for p in &response.partitions {
        for k in &p.recent_dispatch {
            let entry = keys.entry(&k.fairness_key).or_insert((0, 0, k.weight));
            (entry.0, entry.1) = (entry.0 + k.tasks, entry.1 + k.cost);
        }
        others += p.recent_others.as_ref().map_or(0, |o| o.cost);
        if let Some(s) = &p.recent_span {
            span = span.max(s.seconds as f64 + f64::from(s.nanos) / 1e9);
        }
    }
    let total = (keys.values().map(|k| k.1).sum::<u64>() + others).max(1) as f64;
    let weights: f64 = keys.values().map(|k| k.2).sum::<f64>().max(f64::MIN_POSITIVE);
    let mut shares: Vec<Share> = keys
        .into_iter()
        .map(|(key, (tasks, cost, weight))| Share {
            key: key.to_owned(),
            tasks,
            share: 100.0 * cost as f64 / total,
            target: 100.0 * weight / weights,
        })
        .collect();
    shares.sort_by(|a, b| b.share.total_cmp(&a.share).then_with(|| a.key.cmp(&b.key)));
    (shares, 100.0 * others as f64 / total, span)
}

/// Prints the shares, if anything was handed out lately.
pub(super) fn print(response: &pb::DescribeQueueResponse) {
    let (shares, others, span) = shares(response);
    if shares.is_empty() {
        return;
    }
    println!("  handed out over the last {span:.1} s by the partitions this node holds (share of cost;");
    println!("  target: the key's weight over the weights of the keys listed):");
    for s in &shares {
        println!(
            "    {:<32} {:>8} tasks {:>6.1}%  target {:>5.1}%",
            format!("{:?}", s.key),
            s.tasks,
            s.share,
            s.target
        );
    }
    if others > 0.0 {
        println!("    {:<32} {:>14} {:>6.1}%", "(other keys)", "", others);
    }
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
        let response = pb::DescribeQueueResponse {
            partitions: vec![
                partition(vec![key("a", 30, 30, 3.0), key("b", 10, 10, 1.0)], 0),
                partition(vec![key("a", 30, 30, 3.0), key("b", 10, 20, 1.0)], 10),
            ],
            ..Default::default()
        };
        let (shares, others, span) = shares(&response);
        assert_eq!(span, 12.0);
        assert_eq!(shares.iter().map(|s| (s.key.as_str(), s.tasks)).collect::<Vec<_>>(), [("a", 60), ("b", 20)]);
        assert_eq!((shares[0].share, shares[1].share, others), (60.0, 30.0, 10.0));
        assert_eq!((shares[0].target, shares[1].target), (75.0, 25.0));
    }
}
