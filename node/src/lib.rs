//! rowcall-node: one member of a rowcall cluster.
//!
//! A node keeps the capability directory and the receipt log in a Raft state machine
//! (openraft on sled) and serves the whole HTTP protocol: ask, contract, invoke, confirm,
//! and the directory around them. Every front end is a thin adapter over one service layer.
//!
//! ```text
//!   HTTP client ──► api::http ─┐
//!   MCP client  ──► api::mcp  ─┴► service ─┬─ reads ──► catalogue (in-memory view: rows, counts, resolver)
//!                                          │            store (receipts on sled)
//!                                          └─ writes ─► app::App::write ──► openraft ──► store::LogStore (its own log, synced)
//!                                                                               │
//!   peers ◄── raft::network (tonic) ◄───────────────────────────────────────────┤ replicate
//!   peers ──► api::peer (tonic)   ──► openraft                                ▼
//!                                                                  store::StateMachine::apply
//!                                                                  (sled batch + sync, then catalogue)
//! ```
//!
//! "Synced" is `store::durable`: sled's flush, then fdatasync/fsync of every file and folder
//! it changed, one round shared by every write issued before it started (group commit).
//!
//! Invocations run on the node that took the request (`dispatch`) and their receipts are
//! written through Raft before the answer leaves, so every node can confirm them. Values
//! every layer shares (receipts, share tokens, the clock) live in `model`, and what the
//! cluster calls carry between nodes in `raft::calls`, below everything that uses them.

pub mod activity;
pub mod allocator;
pub mod api;
pub mod app;
pub mod auth;
pub mod catalogue;
pub mod cluster;
pub mod config;
pub mod dispatch;
pub mod metrics;
pub mod model;
pub mod net;
pub mod raft;
pub mod server;
pub mod service;
pub mod store;
pub mod telemetry;
pub mod trace;

pub use config::Config;
pub use server::{start, start_with, NodeHandle, StartOptions};
