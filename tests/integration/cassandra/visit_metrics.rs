//! A keyspace made before `visit_metrics` had its rate counts: applying the
//! schema again adds the counter columns, keeps the counts it had, and the
//! store counts every field from then on.

use fairway::core::visits::{Cooldowns, DAY_MS, ListedOrigin, ListerMetrics, OriginWrite, VisitStats};
use fairway::store::cassandra::apply_schema;
use fairway::store::visits::VisitStore;

use super::{Keyspace, session, shared};

const NOW: i64 = 20_000 * DAY_MS;
const REPLICATION: &str = "{'class': 'SimpleStrategy', 'replication_factor': 1}";

#[tokio::test]
async fn an_older_visit_metrics_table_gains_the_rate_counts_and_keeps_its_counts() {
    let node = shared().await;
    let session = session().await;
    let name = format!("fw_test_{:012x}", rand::random::<u64>() >> 16);
    // The table as the first release made it, with counts in it.
    for statement in [
        format!("CREATE KEYSPACE {name} WITH replication = {REPLICATION}"),
        format!(
            "CREATE TABLE {name}.visit_metrics (lister text, visit_type text, known counter, enabled counter, \
             never_visited counter, pending_changes counter, PRIMARY KEY ((lister), visit_type))"
        ),
        format!(
            "UPDATE {name}.visit_metrics SET known = known + 7, enabled = enabled + 6, never_visited = never_visited + 5, \
             pending_changes = pending_changes + 4 WHERE lister = 'l' AND visit_type = 'git'"
        ),
    ] {
        session.query_unpaged(statement, ()).await.expect("the older keyspace");
    }
    let keyspace = Keyspace { name, session, _node: Some(node) };
    apply_schema(keyspace.session(), &keyspace.name, REPLICATION).await.expect("the schema over the older keyspace");
    apply_schema(keyspace.session(), &keyspace.name, REPLICATION).await.expect("and again: idempotent");

    let store = keyspace.store().await;
    let before =
        ListerMetrics { known: 7, enabled: 6, never_visited: 5, pending_changes: 4, ..ListerMetrics::default() };
    assert_eq!(store.metrics("l").await.unwrap(), vec![("git".into(), before)], "the new columns read as 0");

    let origin = ListedOrigin {
        url: "https://forge.example/a".into(),
        visit_type: "git".into(),
        lister: "l".into(),
        last_update: Some(NOW - DAY_MS),
        first_seen: NOW - DAY_MS,
        last_seen: NOW,
        is_fork: false,
        extra_loader_arguments: String::new(),
    };
    let stats = VisitStats { rate: Some(0.5), ..VisitStats::default() };
    let write = OriginWrite::new(None, origin, stats, &Cooldowns::default(), NOW);
    store.apply(std::slice::from_ref(&write)).await.unwrap();
    let mut after = before;
    after.add(write.metrics[0].1, 1);
    assert_eq!((after.rated, after.rate_micro), (1, 500_000));
    assert_eq!(store.metrics("l").await.unwrap(), vec![("git".into(), after)]);
    keyspace.drop_keyspace().await;
}
