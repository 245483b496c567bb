//! rowcall's protocol buffers, compiled at build time by protox.
//!
//! - [`v1`] is the public API (`rowcall.v1`): `Dispatch` (ask, contract, invoke, confirm),
//!   `Directory` (rows and their change feed), `Receipts` and `Cluster`. Every node serves it
//!   on its gRPC listener; `rowcall-client` and other languages call it.
//! - [`raft`] is the node-to-node service: Raft votes, log replication, snapshot chunks,
//!   write forwarding, joins and removals, and read-index requests. It is internal to a
//!   cluster.
//! - [`json`] converts the JSON-carrying fields (`google.protobuf.Struct` / `Value`).

pub mod json;
pub mod tlog;

/// The well-known types the public API uses (`Struct`, `Value`), re-exported so users need
/// no version of their own.
pub use prost_types;

/// The public API: the services and their messages.
pub mod v1 {
    #![allow(missing_docs, clippy::all)]
    tonic::include_proto!("rowcall.v1");

    /// The encoded file descriptor set of the public API (with its imports and comments),
    /// for gRPC server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/rowcall_v1_descriptor.bin"));
}

/// Raft-internal service between the nodes of one cluster.
pub mod raft {
    #![allow(missing_docs, clippy::all)]
    tonic::include_proto!("rowcall.raft.v1");
}
