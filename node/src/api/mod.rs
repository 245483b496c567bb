//! The node's public interfaces. `http` serves the whole protocol of DESIGN §3; `mcp` the
//! MCP projection of §5, mounted in the same router.

pub mod http;
pub mod mcp;
