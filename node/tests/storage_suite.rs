//! openraft's storage conformance suite run against rowcall's log store (its write-ahead
//! log and sled) and state machine: every test gets a fresh data folder of its own.

use openraft::testing::log::{StoreBuilder, Suite};
use rowcall_node::catalogue::SharedCatalogue;
use rowcall_node::config::SyncMode;
use rowcall_node::raft::{StorageError, TypeConfig};
use rowcall_node::store::{Durable, LogStore, StateMachine};

struct SledBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for SledBuilder {
    async fn build(&self) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError> {
        let dir = tempfile::tempdir().expect("temporary folder");
        let storage =
            Durable::open(&dir.path().join("sled"), SyncMode::Fdatasync).expect("open sled");
        let log = LogStore::open(&storage, &dir.path().join("raft-log"))
            .await
            .expect("open the log");
        let snapshots = dir.path().join("snapshots");
        let sm = StateMachine::open(&storage, &snapshots, SharedCatalogue::default())?;
        Ok((dir, log, sm))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sled_stores_pass_the_openraft_suite() {
    if let Err(e) = Suite::test_all(SledBuilder).await {
        panic!("storage suite failed: {e}");
    }
}
