//! openraft's storage conformance suite run against rowcall's log store (its write-ahead
//! log and sled) and state machine: every test gets a fresh data folder of its own.

use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;
use rowcall_node::catalogue::SharedCatalogue;
use rowcall_node::config::SyncMode;
use rowcall_node::raft::TypeConfig;
use rowcall_node::store::{Durable, LogStore, StateMachine};

struct SledBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for SledBuilder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError<u64>> {
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

#[test]
fn sled_stores_pass_the_openraft_suite() {
    if let Err(e) = Suite::test_all(SledBuilder) {
        panic!("storage suite failed: {e}");
    }
}
