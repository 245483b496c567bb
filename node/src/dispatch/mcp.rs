//! The mcp runner and the upstream client under the importer: a row's target `"URL#tool"`
//! is a `tools/call` on the MCP server at URL over Streamable HTTP, through the official SDK
//! (rmcp). The connection goes through the SSRF guard and a client pinned to the checked
//! addresses, with the row's configured headers, a timeout and the response cap.
//!
//! Each invocation opens its own MCP session (initialize, tools/call, close): simple and
//! stateless across nodes, at the price of one extra round trip per call.

use std::collections::HashMap;
use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::Url;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation, Tool,
};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt as _};
use serde_json::{Map, Value};

use super::http::{configured_headers, guard, pinned_client, redacted};
use super::ssrf::AllowList;
use super::{Ran, RunError};
use crate::config::RunnersConfig;

/// Characters of a tool's error text quoted in the failure message.
const ERROR_TEXT_CHARS: usize = 500;

type Client = RunningService<RoleClient, ClientConfig>;

/// Splits `"URL#tool"`.
pub fn parse_target(target: &str) -> Result<(Url, String), RunError> {
    let (url, tool) = target
        .trim()
        .rsplit_once('#')
        .ok_or_else(|| RunError::BadTarget("an mcp target is \"URL#tool\"".into()))?;
    let url = Url::parse(url).map_err(|e| RunError::BadTarget(format!("{url:?}: {e}")))?;
    if tool.is_empty() {
        return Err(RunError::BadTarget("the tool name after # is empty".into()));
    }
    Ok((url, tool.to_owned()))
}

/// An open session with an upstream MCP server.
pub struct Upstream {
    client: Client,
}

impl Upstream {
    /// Connects (guard, pinned client, initialize) to the server at `url`, sending `headers`.
    pub async fn connect(
        config: &RunnersConfig,
        url: &Url,
        headers: HeaderMap,
    ) -> Result<Self, RunError> {
        let allow = AllowList::lenient(config.allow.iter().map(String::as_str));
        let (host, addrs) = guard(&allow, url).await?;
        let http = pinned_client(&host, &addrs)?;
        let custom: HashMap<_, _> = headers
            .iter()
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        let transport_config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
            .custom_headers(custom)
            .max_json_response_size(config.max_response_bytes)
            .max_sse_event_size(config.max_response_bytes);
        let transport = StreamableHttpClientTransport::with_client(http, transport_config);
        let info = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("rowcall", env!("CARGO_PKG_VERSION")),
        );
        let client = info
            .serve(transport)
            .await
            .map_err(|e| RunError::Unreachable(format!("MCP initialize failed: {e}")))?;
        Ok(Self { client })
    }

    /// The server's name, from its initialize answer.
    pub fn server_name(&self) -> Option<String> {
        self.client
            .peer()
            .peer_info()
            .and_then(|info| info.server_info.as_ref().map(|i| i.name.clone()))
    }

    /// Every tool, following `nextCursor` through all pages.
    pub async fn list_tools(&self) -> Result<Vec<Tool>, RunError> {
        self.client
            .peer()
            .list_all_tools()
            .await
            .map_err(|e| RunError::Protocol(format!("tools/list: {e}")))
    }

    /// One `tools/call`.
    pub async fn call(
        &self,
        tool: &str,
        args: Map<String, Value>,
    ) -> Result<CallToolResult, RunError> {
        self.client
            .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args))
            .await
            .map_err(|e| RunError::Protocol(format!("tools/call {tool}: {e}")))
    }

    /// Ends the session in the background (a DELETE to the server); the caller does not wait.
    pub fn close(self) {
        tokio::spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(5), self.client.cancel()).await;
        });
    }
}

/// Runs `tools/call` for the row `key` with target `target`.
pub async fn call(
    config: &RunnersConfig,
    key: &str,
    target: &str,
    args: Map<String, Value>,
) -> Ran {
    let (url, tool) = match parse_target(target) {
        Ok(parsed) => parsed,
        Err(e) => {
            return Ran {
                outcome: Err(e),
                called: Some(format!("tools/call at {target}")),
                upstream_status: None,
            }
        }
    };
    let called = Some(format!("tools/call {tool} at {}", redacted(&url)));
    let limit = Duration::from_millis(config.timeout_ms);
    let exchange = async {
        let upstream = Upstream::connect(config, &url, configured_headers(config, key)?).await?;
        let result = upstream.call(&tool, args).await;
        upstream.close();
        result
    };
    let result = match tokio::time::timeout(limit, exchange).await {
        Ok(result) => result,
        Err(_) => Err(RunError::Timeout {
            ms: config.timeout_ms,
        }),
    };
    let upstream_status = match &result {
        Ok(r) if r.is_error == Some(true) => Some("is_error".to_owned()),
        Ok(_) => Some("ok".to_owned()),
        Err(_) => None,
    };
    Ran {
        outcome: result.and_then(into_result),
        called,
        upstream_status,
    }
}

/// The tool's answer as the row's result: `{content, structuredContent?}`; `isError` fails
/// the invocation with the tool's text.
fn into_result(result: CallToolResult) -> Result<Value, RunError> {
    let value = serde_json::to_value(&result)
        .map_err(|e| RunError::Protocol(format!("the tool result does not encode: {e}")))?;
    if result.is_error == Some(true) {
        let text: String = result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect::<Vec<_>>()
            .join(" ");
        let text: String = text.chars().take(ERROR_TEXT_CHARS).collect();
        return Err(RunError::ToolError(if text.is_empty() {
            value.to_string()
        } else {
            text
        }));
    }
    let mut out = Map::new();
    if let Some(content) = value.get("content") {
        out.insert("content".into(), content.clone());
    }
    if let Some(structured) = value.get("structuredContent") {
        out.insert("structuredContent".into(), structured.clone());
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_split_at_the_last_hash() {
        let (url, tool) = parse_target("http://127.0.0.1:9/mcp#search_docs").unwrap();
        assert_eq!(
            (url.as_str(), tool.as_str()),
            ("http://127.0.0.1:9/mcp", "search_docs")
        );
        assert!(parse_target("http://h/mcp#").is_err());
        assert!(parse_target("http://h/mcp").is_err());
    }
}
