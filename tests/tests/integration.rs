//! The integration tests of rowcall, one module per subject, linked into one test binary:
//! every binary links the whole node, so one binary instead of sixteen saves minutes of
//! linking and gigabytes of disk. Run one subject with a filter, e.g.
//! `cargo test -p rowcall-tests --test integration -- cluster::`.

mod common;

mod attack_spend;
mod attack_view;
mod backup;
mod bad_input;
mod cli;
mod client;
mod clocks;
mod cluster;
mod console;
mod disk_space;
mod exactly_once;
mod hostile;
mod https;
mod identity;
mod mcp;
mod peer_auth;
mod protocol;
mod read_index;
mod resolver_quality;
mod runners;
mod semantic;
mod snapshots;
mod staleness;
mod transparency;
