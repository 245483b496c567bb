//! Tools the official MCP conformance suite calls by name, served only when
//! `mcp.test_tools` is on (`ROWCALL_MCP_TEST_TOOLS=1`; off by default, and never meant for a
//! production catalogue). A catalogue key is upper case (`^[A-Z_][A-Z0-9_]*$`), so no row
//! can be one of these lower-case names: they are the suite's, not the catalogue's.
//!
//! `test_reconnection` exercises resumable streams (SEP-1699): it ends the POST stream its
//! call is answered on before answering, so the answer reaches the client only when it
//! reconnects with `GET` and `Last-Event-ID`, through the event store (`replay`).

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use rmcp::model::{CallToolResult, ContentBlock, Tool};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::json;

use super::cut::StreamCut;
use super::tools::object;

/// The suite's tool for `server-sse-polling`.
pub const RECONNECTION: &str = "test_reconnection";

/// How long the tool waits for its stream to end before answering anyway.
const CUT_BOUND: Duration = Duration::from_secs(5);

/// The test tools' definitions, in name order.
pub fn tools() -> &'static [Tool] {
    static TOOLS: LazyLock<Vec<Tool>> = LazyLock::new(|| {
        vec![Tool::new(
            RECONNECTION,
            "Conformance test: closes the SSE stream of its own call before answering, so \
             the answer arrives after the client reconnects with Last-Event-ID",
            Arc::new(object(json!({"type": "object", "properties": {}}))),
        )]
    });
    &TOOLS
}

/// The definition of test tool `name`, if it is one.
pub fn get(name: &str) -> Option<Tool> {
    tools().iter().find(|tool| tool.name == name).cloned()
}

/// Runs test tool `name`; `None` when it is not one.
pub async fn call(
    name: &str,
    context: &RequestContext<RoleServer>,
) -> Option<Result<CallToolResult, ErrorData>> {
    match name {
        RECONNECTION => Some(reconnection(context).await),
        _ => None,
    }
}

async fn reconnection(context: &RequestContext<RoleServer>) -> Result<CallToolResult, ErrorData> {
    let Some(cut) = context.extensions.get::<StreamCut>() else {
        // A stateless (2026-07-28) request has no stream of its own to end.
        return Err(ErrorData::invalid_request(
            "test_reconnection needs a session: its answer is resumed on the session's GET \
             stream",
            None,
        ));
    };
    if !cut.cut(CUT_BOUND).await {
        tracing::debug!("test_reconnection: the POST stream did not end within the bound");
    }
    Ok(CallToolResult::success(vec![ContentBlock::text(
        "Reconnection test completed successfully",
    )]))
}
