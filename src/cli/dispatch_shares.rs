//! `queue describe`'s view of fairness at work: each key's share of what
//! the partitions this node holds handed out lately, beside its target
//! (see [`fairway::api::dispatch_shares`]).

use fairway::api::dispatch_shares::shares;
use fairway::proto::v1 as pb;

/// Prints the shares, if anything was handed out lately.
pub(super) fn print(response: &pb::DescribeQueueResponse) {
    let shares = shares(response);
    if shares.keys.is_empty() {
        return;
    }
    println!("  handed out over the last {:.1} s by the partitions this node holds (share of cost;", shares.span_s);
    println!("  target: the key's weight over the weights of the keys listed):");
    for s in &shares.keys {
        println!(
            "    {:<32} {:>8} tasks {:>6.1}%  target {:>5.1}%",
            format!("{:?}", s.key),
            s.tasks,
            s.share,
            s.target
        );
    }
    if shares.others > 0.0 {
        println!("    {:<32} {:>14} {:>6.1}%", "(other keys)", "", shares.others);
    }
}
