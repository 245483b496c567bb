//! The MCP server handler: `tools/list` and `tools/call` of one mode, and the forwarding of
//! projection changes to a session as `notifications/tools/list_changed`.

use std::sync::{Arc, Mutex};

use axum::http::request::Parts;
use axum::http::HeaderMap;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation,
    InitializeRequestParams, InitializeResult, JsonObject, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, SubscriptionFilter, Tool,
};
use rmcp::service::{NotificationContext, Peer, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Value};
use tokio::sync::{broadcast, watch};

use super::test_tools;
use super::tools::{self, compact_tools, cursor_after, parse_cursor, row_tool};
use super::Mode;
use crate::api::base_url;
use crate::app::App;
use crate::auth::{Principal, Scope};
use crate::catalogue::feed::Change;
use crate::dispatch::InvokeInput;
use crate::service::dispatch::{contract_json, invoke_as, rank, readable_row, MAX_LIMIT};
use crate::service::view::Viewer;
use crate::service::ServiceError;

const ROWS_INSTRUCTIONS: &str = "Each tool is one capability of the rowcall catalogue. \
    Results carry a proof; its confirm address checks the receipt without a credential.";
const COMPACT_INSTRUCTIONS: &str = "search for a capability in plain words, read its \
    contract, then invoke it by key. Results carry a proof; its confirm address checks the \
    receipt without a credential.";

/// One session's (or one stateless request's) handler; rmcp makes one per session.
pub struct Projection {
    app: Arc<App>,
    mode: Mode,
    page_size: usize,
    /// Subscribed at `initialize`, so nothing between the client's handshake and its first
    /// `tools/list` is missed; handed to the forwarding task at `initialized`.
    changes: Mutex<Option<broadcast::Receiver<Change>>>,
    /// Dropped with the handler when the session ends, which stops its forwarding task.
    alive: watch::Sender<()>,
}

impl Projection {
    /// A handler of `mode` over the node's catalogue.
    pub fn new(app: Arc<App>, mode: Mode) -> Self {
        let page_size = app.config.mcp.page_size.max(1);
        Self {
            app,
            mode,
            page_size,
            changes: Mutex::new(None),
            alive: watch::Sender::new(()),
        }
    }

    fn rows_page(&self, after: Option<&str>) -> ListToolsResult {
        let catalogue = self.app.catalogue.read();
        let mut rows = catalogue.projected_after(after);
        let tools: Vec<Tool> = rows
            .by_ref()
            .take(self.page_size)
            .map(|row| row_tool(row))
            .collect();
        let more = rows.next().is_some();
        let mut result = ListToolsResult::with_all_items(tools);
        if more {
            result.next_cursor = result.tools.last().map(|tool| cursor_after(&tool.name));
        }
        result
    }

    /// Whether the conformance suite's test tools are served (see `test_tools`).
    fn test_tools(&self) -> bool {
        self.app.config.mcp.test_tools
    }

    /// Runs a row through the service's invoke path, as the caller the auth layer
    /// identified.
    async fn invoke(
        &self,
        caller: Option<Principal>,
        base: &str,
        key: &str,
        input: InvokeInput,
    ) -> CallToolResult {
        // Every MCP request bears a credential, so the caller pays, never an address.
        match invoke_as(&self.app, caller, None, Scope::Mcp, base, key, input).await {
            Ok(invocation) => {
                let failed = invocation.failure.is_some();
                let body = serde_json::to_value(invocation.answer).unwrap_or(Value::Null);
                if failed {
                    CallToolResult::structured_error(body)
                } else {
                    CallToolResult::structured(body)
                }
            }
            Err(refused) => CallToolResult::structured_error(refused.body()),
        }
    }

    async fn call_compact(
        &self,
        name: &str,
        args: JsonObject,
        caller: Option<Principal>,
        base: &str,
    ) -> Result<CallToolResult, ErrorData> {
        let text = |field: &str| args.get(field).and_then(Value::as_str);
        let missing = |field: &'static str| {
            CallToolResult::structured_error(
                ServiceError::BadRequest {
                    message: format!("argument {field:?} (a string) is required"),
                    hint: "see the tool's inputSchema",
                }
                .body(),
            )
        };
        Ok(match name {
            tools::SEARCH => {
                let Some(query) = text("query") else {
                    return Ok(missing("query"));
                };
                let limit = args
                    .get("limit")
                    .and_then(Value::as_u64)
                    .map_or(5, |n| usize::try_from(n).unwrap_or(MAX_LIMIT))
                    .clamp(1, MAX_LIMIT);
                match rank(&self.app, base, query, limit, Default::default()).await {
                    Ok(answer) => {
                        if self.app.config.resolver.learn {
                            let asker = caller.as_ref().map_or("public", |p| p.name.as_str());
                            let offered = answer.candidates.iter().map(|c| c.key.as_str());
                            self.app.asks.asked(asker, query, offered);
                        }
                        CallToolResult::structured(
                            serde_json::to_value(answer).unwrap_or(Value::Null),
                        )
                    }
                    Err(e) => CallToolResult::structured_error(e.body()),
                }
            }
            tools::CONTRACT => {
                let Some(key) = text("key") else {
                    return Ok(missing("key"));
                };
                let viewer = Viewer::of_principal(caller.as_ref());
                match readable_row(&self.app, &viewer, key) {
                    Ok(row) => CallToolResult::structured(contract_json(&row, base)),
                    Err(e) => CallToolResult::structured_error(e.body()),
                }
            }
            tools::INVOKE => {
                let Some(key) = text("key") else {
                    return Ok(missing("key"));
                };
                let input = match (args.get("args"), args.get("body")) {
                    (None | Some(Value::Null), body) => InvokeInput {
                        args: None,
                        body: body.and_then(Value::as_str).map(str::to_owned),
                        repeatable: false,
                    },
                    (Some(Value::Object(map)), body) => InvokeInput {
                        args: Some(map.clone()),
                        body: body.and_then(Value::as_str).map(str::to_owned),
                        repeatable: false,
                    },
                    (Some(_), _) => {
                        return Ok(CallToolResult::structured_error(
                            ServiceError::WrongShape("args must be a JSON object".into()).body(),
                        ))
                    }
                };
                self.invoke(caller, base, key, input).await
            }
            other => return Err(unknown_tool(other)),
        })
    }
}

fn unknown_tool(name: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!("unknown tool {name:?}"),
        Some(json!({ "hint": "tools/list names the tools" })),
    )
}

/// Waits for the next change of the projection, then swallows whatever else is already
/// queued so that a burst (a bulk import) is one notification. False when the feed closed.
async fn next_projection_change(changes: &mut broadcast::Receiver<Change>) -> bool {
    loop {
        match changes.recv().await {
            Ok(change) if !change.projection => continue,
            // Lagging means changes were dropped: some may have been projection changes.
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => break,
            Err(broadcast::error::RecvError::Closed) => return false,
        }
    }
    loop {
        match changes.try_recv() {
            Ok(_) | Err(broadcast::error::TryRecvError::Lagged(_)) => continue,
            Err(_) => return true,
        }
    }
}

/// Sends `list_changed` to one session whenever this node applies a projection change,
/// until the session ends.
async fn forward_list_changed(
    peer: Peer<RoleServer>,
    mut changes: broadcast::Receiver<Change>,
    mut alive: watch::Receiver<()>,
) {
    loop {
        tokio::select! {
            changed = next_projection_change(&mut changes) => {
                if !changed || peer.notify_tool_list_changed().await.is_err() {
                    return;
                }
            }
            // Only ever an error: the handler (and with it the session) is gone.
            _ = alive.changed() => return,
        }
    }
}

impl ServerHandler for Projection {
    fn get_info(&self) -> ServerConfig {
        let (capabilities, instructions) = match self.mode {
            Mode::Rows => (
                ServerCapabilities::builder()
                    .enable_tools()
                    .enable_tool_list_changed()
                    .build(),
                ROWS_INSTRUCTIONS,
            ),
            Mode::Compact => (
                ServerCapabilities::builder().enable_tools().build(),
                COMPACT_INSTRUCTIONS,
            ),
        };
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("rowcall", env!("CARGO_PKG_VERSION")))
            .with_instructions(instructions)
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        if self.mode == Mode::Rows {
            let (_, changes) = self.app.catalogue.read().watch(None, 0);
            *self.changes.lock().unwrap_or_else(|p| p.into_inner()) = Some(changes);
        }
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let changes = self
            .changes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(changes) = changes {
            tokio::spawn(forward_list_changed(
                context.peer,
                changes,
                self.alive.subscribe(),
            ));
        }
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut result = match self.mode {
            Mode::Compact => ListToolsResult::with_all_items(compact_tools().to_vec()),
            Mode::Rows => {
                let after = match request.and_then(|r| r.cursor) {
                    None => None,
                    Some(cursor) => Some(parse_cursor(&cursor).ok_or_else(|| {
                        ErrorData::invalid_params("unknown cursor; list again from the start", None)
                    })?),
                };
                self.rows_page(after.as_deref())
            }
        };
        // The test tools close the last page.
        if self.test_tools() && result.next_cursor.is_none() {
            result.tools.extend_from_slice(test_tools::tools());
        }
        Ok(result)
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        if self.test_tools() {
            if let Some(tool) = test_tools::get(name) {
                return Some(tool);
            }
        }
        match self.mode {
            Mode::Compact => compact_tools().iter().find(|t| t.name == name).cloned(),
            Mode::Rows => self
                .app
                .catalogue
                .read()
                .get(name)
                .filter(|row| row.mcp_projected())
                .map(|row| row_tool(&row)),
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let parts = context.extensions.get::<Parts>();
        let caller = parts.and_then(|p| p.extensions.get::<Principal>().cloned());
        let base = base_url(&self.app, parts.map_or(&HeaderMap::new(), |p| &p.headers));
        let name = request.name.as_ref();
        if self.test_tools() {
            if let Some(result) = test_tools::call(name, &context).await {
                return result.map(Into::into);
            }
        }
        let result = match self.mode {
            Mode::Rows => {
                let projected = self
                    .app
                    .catalogue
                    .read()
                    .get(name)
                    .is_some_and(|row| row.mcp_projected());
                if !projected {
                    return Err(unknown_tool(name));
                }
                let input = InvokeInput {
                    args: request.arguments.clone(),
                    ..InvokeInput::default()
                };
                self.invoke(caller, &base, name, input).await
            }
            Mode::Compact => {
                let args = request.arguments.clone().unwrap_or_default();
                self.call_compact(name, args, caller, &base).await?
            }
        };
        Ok(result.into())
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        (self.mode == Mode::Rows).then(|| {
            let mut filter = SubscriptionFilter::new();
            filter.tools_list_changed = Some(true);
            filter
        })
    }

    /// Protocol 2026-07-28 has no sessions: a client listens through `subscriptions/listen`.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let (_, mut changes) = self.app.catalogue.read().watch(None, 0);
        loop {
            tokio::select! {
                _ = context.cancelled() => return Ok(()),
                changed = next_projection_change(&mut changes) => {
                    if !changed || context.sink().notify_tool_list_changed().await.is_err() {
                        return Ok(());
                    }
                }
            }
        }
    }
}
