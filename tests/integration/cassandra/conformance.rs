//! The store conformance suite on Cassandra: the same test functions as on
//! the embedded store.

use super::cassandra_store;

fairway::store_conformance_suite!(cassandra_store);
