//! Tests against a real Apache Cassandra node. `bash scripts/test.sh` starts
//! one (deploy/cassandra/cassandra.sh); `FAIRWAY_TEST_CASSANDRA=HOST:PORT`
//! points them at another. Each test works in a keyspace of its own, dropped
//! afterwards, but for the store conformance suites' (see [`cassandra_store`]).
//! Without a reachable node they fail, saying how to start one.

mod cluster;
mod conformance;
mod end_to_end;
mod faulty;
mod outage;
mod ownership;
mod queue_settings;
mod rounds_lease;
mod schedules;
mod secure;
mod startup;
mod tombstones;
mod visit_metrics;
mod visit_tombstones;

use std::fs::File;
use std::path::Path;
use std::sync::{Arc, LazyLock, Mutex};

use fairway::store::cassandra::{CassandraConfig, CassandraStore, apply_schema, connect_session};
use fairway::store::conformance::TestStore;
use scylla::client::session::Session;
use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};

/// Tests that use the node share it; the outage test takes it alone.
static NODE: LazyLock<Arc<RwLock<()>>> = LazyLock::new(|| Arc::new(RwLock::new(())));

/// Held for as long as a test needs the node to stay up.
async fn shared() -> OwnedRwLockReadGuard<()> {
    NODE.clone().read_owned().await
}

/// Held by a test that pauses or kills the node: every other test of this
/// binary waits, and so do the lab's chaos runs on the same node (another
/// process, `tools/fairway-lab/tests/chaos.rs`), through a lock file.
pub(crate) async fn exclusive() -> (File, OwnedRwLockWriteGuard<()>) {
    let lock = Path::new(env!("CARGO_TARGET_TMPDIR")).join(SINGLE_NODE_LOCK);
    let file = tokio::task::spawn_blocking(move || fairway::test_util::take_turn(&lock))
        .await
        .expect("the lock file's thread")
        .expect("the lock of the runs that pause or kill the single node");
    (file, NODE.clone().write_owned().await)
}

/// The lock file, in the workspace's target directory, that the tests which
/// pause or kill the single test node take: this binary's outage test and
/// the lab's chaos runs of Fairway faults, which use the same node.
const SINGLE_NODE_LOCK: &str = "single-node-runs.lock";

/// Where the test node listens.
pub(crate) fn contact_point() -> String {
    std::env::var("FAIRWAY_TEST_CASSANDRA").unwrap_or_else(|_| "127.0.0.1:9042".to_owned())
}

pub(crate) async fn session() -> Session {
    let contact_point = contact_point();
    connect_session(&contact_point, &CassandraConfig::default()).await.unwrap_or_else(|error| {
        panic!(
            "{error}\nThis test needs a Cassandra node at {contact_point}. `bash scripts/test.sh` starts one; \
             or start it with `deploy/cassandra/cassandra.sh start` (set FAIRWAY_TEST_CASSANDRA=HOST:PORT \
             for a node elsewhere)."
        )
    })
}

/// A keyspace with Fairway's schema, for one test.
pub(crate) struct Keyspace {
    pub name: String,
    session: Session,
    _node: Option<OwnedRwLockReadGuard<()>>,
}

impl Keyspace {
    /// A keyspace on a node that stays up while it is used.
    pub(crate) async fn create() -> Keyspace {
        let node = shared().await;
        let mut keyspace = Keyspace::create_unguarded().await;
        keyspace._node = Some(node);
        keyspace
    }

    /// A keyspace for a test that holds the node alone (see [`exclusive`]).
    pub(crate) async fn create_unguarded() -> Keyspace {
        let session = session().await;
        let name = format!("fw_test_{:012x}", rand::random::<u64>() >> 16);
        apply_schema(&session, &name, "{'class': 'SimpleStrategy', 'replication_factor': 1}")
            .await
            .expect("apply the schema to a fresh keyspace");
        Keyspace { name, session, _node: None }
    }

    pub(crate) fn session(&self) -> &Session {
        &self.session
    }

    pub(crate) fn store_url(&self) -> String {
        format!("cassandra://{}/{}", contact_point(), self.name)
    }

    pub(crate) async fn store(&self) -> CassandraStore {
        self.store_with(&CassandraConfig::default()).await
    }

    pub(crate) async fn store_with(&self, config: &CassandraConfig) -> CassandraStore {
        CassandraStore::connect(&contact_point(), &self.name, config).await.expect("connect to the test keyspace")
    }

    pub(crate) async fn drop_keyspace(self) {
        let statement = format!("DROP KEYSPACE IF EXISTS {}", self.name);
        if let Err(error) = self.session.query_unpaged(statement, ()).await {
            eprintln!("could not drop test keyspace {}: {error}", self.name);
        }
    }
}

/// A store in an empty keyspace, for a test of a conformance suite. Those
/// keyspaces are emptied after each test and used again (`fw_pool_N`, as many
/// as tests ran at once, kept across runs): a keyspace made and dropped costs
/// the node about 2 s of its CPU, a truncate of every table a tenth of that,
/// and the suites' fifty-odd tests share the node with the rest.
pub(crate) async fn cassandra_store() -> TestStore<CassandraStore> {
    let keyspace = Keyspace::from_pool().await;
    TestStore::of(Arc::new(keyspace.store().await), ()).with_cleanup(keyspace.back_to_pool())
}

/// The emptied keyspaces of [`cassandra_store`], and how many there are.
static POOL: LazyLock<Mutex<(Vec<String>, usize)>> = LazyLock::new(|| Mutex::new((Vec::new(), 0)));

impl Keyspace {
    /// An empty keyspace of the pool, or a new one (found from an earlier run, or made).
    async fn from_pool() -> Keyspace {
        let node = shared().await;
        let session = session().await;
        let taken = {
            let mut pool = POOL.lock().expect("the pool's lock");
            pool.0.pop().ok_or_else(|| {
                pool.1 += 1;
                format!("fw_pool_{}", pool.1 - 1)
            })
        };
        let keyspace = Keyspace { name: taken.clone().unwrap_or_else(|name| name), session, _node: Some(node) };
        if let Err(name) = taken {
            // An earlier run may have left it, with rows in it, and an older schema.
            apply_schema(&keyspace.session, &name, "{'class': 'SimpleStrategy', 'replication_factor': 1}")
                .await
                .expect("apply the schema to a keyspace of the pool");
            keyspace.truncate_tables().await.expect("empty a keyspace of the pool");
        }
        keyspace
    }

    /// Empties the keyspace for the next test; drops it if it cannot.
    async fn back_to_pool(self) {
        match self.truncate_tables().await {
            Ok(()) => POOL.lock().expect("the pool's lock").0.push(self.name.clone()),
            Err(error) => {
                eprintln!("could not empty test keyspace {}: {error}; dropping it", self.name);
                self.drop_keyspace().await;
            }
        }
    }

    async fn truncate_tables(&self) -> Result<(), String> {
        let tables = self
            .session
            .query_unpaged("SELECT table_name FROM system_schema.tables WHERE keyspace_name = ?", (&self.name,))
            .await
            .map_err(|e| e.to_string())?
            .into_rows_result()
            .map_err(|e| e.to_string())?
            .rows::<(String,)>()
            .map_err(|e| e.to_string())?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        for (table,) in tables {
            let statement = format!("TRUNCATE {}.{table}", self.name);
            self.session.query_unpaged(statement, ()).await.map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}
