//! rowcall-client: the Rust client of rowcall's public gRPC API, and the `rowcall` command
//! line built on it.
//!
//! ```text
//!   your service ─┐
//!   rowcall CLI ──┴► Client (session index, retries, hedged reads, leader hints) ──gRPC──► nodes
//!                      └─ Watch (change feed that resumes on another node)
//!   rowcall eval / import-mcp ─► node::NodeClient ──HTTP──► a node
//!   rowcall verify ─► Client (checkpoint, proofs) ─► verify: judged against pinned keys and
//!                     the last checkpoint seen (state file), never the answering node's word
//! ```
//!
//! [`Client`] speaks `rowcall.v1` (the protos are re-exported as [`proto`]) to any members
//! of a cluster. It retries what is safe to retry (reads; writes, which carry an
//! idempotency key; an invocation only when it surely did not run), asks a second node when
//! the first is slow to answer a read, follows the nodes' leader hints for writes, and sends
//! the session's highest seen index with every call so the session reads its own writes on
//! whichever node answers.
//!
//! ```no_run
//! # async fn demo() -> Result<(), rowcall_client::Error> {
//! use rowcall_client::{row_input, Client};
//!
//! let client = Client::builder()
//!     .nodes(["http://127.0.0.1:9081", "http://127.0.0.1:9082", "http://127.0.0.1:9083"])
//!     .credential(std::env::var("ROWCALL_ADMIN_KEY").unwrap_or_default())
//!     .build()?;
//! let row = serde_json::json!({"key": "GREET", "type": "static", "auth": "public",
//!                              "content": "# WHAT: Greet someone\n\nhello"});
//! client.put(row_input(row)?).await?;
//! // Read on any node: the session's index makes it wait for the write if it must.
//! let best = client.ask("greet someone", 1).await?.best.expect("found");
//! let ran = client.invoke(&best.key, None).await?;
//! assert_eq!(ran.result, Some(serde_json::json!("hello")));
//! client.confirm(&ran.proof.invocation_id).await?;
//! # Ok(())
//! # }
//! ```
//!
//! [`verify`] checks a receipt against the receipt log's transparency log (RFC 9162 proofs,
//! checkpoints co-signed by a majority of voters) for `rowcall verify`.
//!
//! `node` speaks the node's HTTP protocol for what has no gRPC call (the MCP importer) and
//! for tests; `quality` and `dataset` score resolver answers for `rowcall eval`, the node's
//! resolver benchmark and the integration tests alike.

pub mod cli;
mod client;
pub mod dataset;
mod error;
mod hedge;
pub mod node;
pub mod quality;
pub mod render;
mod rows;
pub mod verify;
mod watch;

pub use self::client::{Attempted, Client, ClientBuilder, Invocation, WriteStats};
pub use self::error::{Error, Rejection};
pub use self::rows::{row_input, row_json};
pub use self::watch::Watch;
/// The public API's messages and services (`rowcall.v1`).
pub use rowcall_proto::v1 as proto;
