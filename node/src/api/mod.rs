//! The node's public interfaces. `http` serves the whole protocol of DESIGN §3.

pub mod http;
