//! The store conformance suite on the embedded (redb) store.

use std::sync::Arc;

use fairway::store::conformance::TestStore;
use fairway::store::embedded::EmbeddedStore;

async fn embedded_store() -> TestStore<EmbeddedStore> {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = EmbeddedStore::open(dir.path()).expect("open the embedded store");
    TestStore::of(Arc::new(store), dir)
}

fairway::store_conformance_suite!(embedded_store);

#[test]
fn a_second_opener_of_a_data_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _first = EmbeddedStore::open(dir.path()).unwrap();
    let err = EmbeddedStore::open(dir.path()).unwrap_err();
    assert!(err.to_string().contains("another process has it open"), "{err}");
}
fairway::visit_store_conformance_suite!(embedded_store);

mod schedules {
    use super::embedded_store;

    fairway::schedule_store_conformance_suite!(embedded_store);
}

mod leases {
    use super::embedded_store;

    fairway::lease_store_conformance_suite!(embedded_store);
}
