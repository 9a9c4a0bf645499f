//! The end-to-end scenarios of the embedded store, on Cassandra.

use crate::grpc_fairness::three_keys_get_their_weighted_shares_on;
use crate::support::Backend;

#[tokio::test]
async fn three_keys_get_their_weighted_shares() {
    three_keys_get_their_weighted_shares_on(Backend::Cassandra).await;
}
