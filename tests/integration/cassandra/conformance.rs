//! The store conformance suite on Cassandra: the same test functions as on
//! the embedded store.

use super::cassandra_store;

fairway::store_conformance_suite!(cassandra_store);

mod visits {
    use super::cassandra_store;

    fairway::visit_store_conformance_suite!(cassandra_store);
}

mod schedules {
    use super::cassandra_store;

    fairway::schedule_store_conformance_suite!(cassandra_store);
}

mod leases {
    use super::cassandra_store;

    fairway::lease_store_conformance_suite!(cassandra_store);
}
