//! rowcall's protocol buffers, compiled at build time by protox.
//!
//! `raft` is the node-to-node service: Raft votes, log replication, snapshot chunks, write
//! forwarding, joins and removals, and read-index requests. It is internal to a cluster.

/// Raft-internal service between the nodes of one cluster.
pub mod raft {
    #![allow(missing_docs, clippy::all)]
    tonic::include_proto!("rowcall.raft.v1");
}
