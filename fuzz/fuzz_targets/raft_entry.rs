//! Raft entry decoding: any payload a peer sends as AppendEntries, a snapshot's piece, a
//! forwarded request or a log entry decodes or is refused without panicking, and what decodes can be described
//! and fingerprinted (what the leader and the state machine do first with it).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rowcall_node::raft::{Entry, Request, TypeConfig};

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = serde_json::from_slice::<Request>(data) {
        let _ = request.command.fingerprint();
        let _ = request.command.to_string();
    }
    if let Ok(entry) = serde_json::from_slice::<Entry>(data) {
        let _ = format!("{entry:?}");
    }
    let _ = serde_json::from_slice::<openraft::raft::AppendEntriesRequest<TypeConfig>>(data);
    let _ = serde_json::from_slice::<rowcall_node::raft::network::SnapshotChunk>(data);
});
