//! rowcall-chaos: measures the availability a rowcall cluster buys, and checks that it
//! keeps DESIGN §3.1–3.2 through crashes, pauses and partitions (DESIGN §8), and §7's
//! "never with state it has lost" through lost, wiped and restored folders and a jumped
//! clock.
//!
//! ```text
//!                 sessions (workload.rs)              faults (faults.rs)
//!          ask/contract/read/confirm/invoke/       kill -9, SIGSTOP, SIGTERM,
//!          insert/update/delete, min-index         wipe + rejoin, lost Raft state,
//!                    │                             old copy, clock offset, link states
//!                    │ HTTP                                 │
//!      ┌─────────────┼───────────────┐          ┌───────────┴──────────┐
//!      ▼             ▼               ▼          ▼                      ▼
//!   node 1 ◄──proxy 1→2──► node 2 ◄──proxy 2→3──► node 3     (cluster.rs, proxy.rs:
//!      ▲ └────────────proxy 1→3, 3→1, …─────────┘ ▲            one TCP proxy per
//!      └─────────── gRPC (Raft, forwarding) ──────┘            directed link)
//!
//!   events (history.rs) ──► settle.rs: heal, drain outboxes, same index,
//!                             rows + confirmations + digests of every node
//!                        ──► check.rs: lost writes / receipts, RYW, index order, divergence
//!                        ──► linearizability.rs: each row's history through an outside
//!                            linearizability tester (consistency_model)
//!                        ──► report.rs + svg.rs: report.json, chart.svg, summary.txt
//! ```
//!
//! The same workload then runs against one node killed and restarted on the cluster run's
//! fault windows (the baseline), so the report gives the gain as a ratio from one run.

pub mod bench;
pub mod bench_api;
pub mod bench_loop;
pub mod bench_reads;
pub mod bench_regions;
pub mod bench_scale;
pub mod bench_soak;
pub mod bench_tls;
pub mod check;
pub mod cluster;
pub mod error;
pub mod etcd;
pub mod faults;
pub mod history;
pub mod linearizability;
pub mod proxy;
pub mod report;
pub mod rng;
pub mod run;
pub mod settle;
pub mod svg;
pub mod vocabulary;
pub mod workload;

pub use error::ChaosError;
pub use run::{run, RunOptions};
