//! rowcall-client: the `rowcall` command line and the library it is built on.
//!
//! ```text
//!   rowcall <subcommand> ──► cli (clap: flags, output) ──► node::NodeClient ──HTTP──► a node
//!                                 │                                                 (any member)
//!                                 └─ eval ──► quality (top-1, recall@5, MRR) over the answers
//! ```
//!
//! `node` speaks the node's HTTP protocol (DESIGN §3) for now; the subcommands only see
//! `NodeClient`, so a gRPC transport can replace it without touching them. `quality` is pure
//! and also used by the node's resolver benchmark and the integration tests, so all three
//! report the same numbers for the same answers. `dataset` says where their data comes from:
//! the fixture in the repository, or the public data named by `ROWCALL_PUBLIC_DATA`.

pub mod cli;
pub mod dataset;
pub mod node;
pub mod quality;
