//! A connection to one rowcall node over its HTTP protocol (DESIGN §3). Subcommands call
//! these methods and never build requests themselves, so the transport can change alone.

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

/// How long one request may take before the client gives up.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// What went wrong talking to a node.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The node could not be reached, or the answer could not be read.
    #[error("request to {url} failed")]
    Transport {
        /// The request's address.
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// The node answered with an error status.
    #[error("{status} from {url}: {message}")]
    Status {
        /// The request's address.
        url: String,
        /// The HTTP status.
        status: reqwest::StatusCode,
        /// The node's `error.message` (and `hint`), or the raw body.
        message: String,
    },
    /// The node answered 2xx with a body this client does not understand.
    #[error("unexpected answer from {url}: {detail}")]
    Unexpected {
        /// The request's address.
        url: String,
        /// What did not fit.
        detail: String,
    },
}

/// One ranked candidate of an ask.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Candidate {
    /// The row key.
    pub key: String,
    /// The resolver's score (higher is better).
    #[serde(default)]
    pub score: f64,
    /// The row's WHAT line.
    #[serde(default)]
    pub what: String,
    /// The query words that matched.
    #[serde(default)]
    pub why: Vec<String>,
}

/// The answer to an ask. Only the fields the client uses are typed; the whole body is kept.
#[derive(Debug, Clone)]
pub struct AskAnswer {
    /// Candidates, best first.
    pub candidates: Vec<Candidate>,
    /// The body as the node sent it.
    pub raw: Value,
}

/// What an MCP import did (`rowcall import-mcp`).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ImportReport {
    /// The upstream's name, when it gave one.
    #[serde(default)]
    pub server: Option<String>,
    /// How many tools it lists.
    #[serde(default)]
    pub tools: usize,
    /// Keys of new rows.
    #[serde(default)]
    pub added: Vec<String>,
    /// Keys of updated rows.
    #[serde(default)]
    pub changed: Vec<String>,
    /// Keys of rows whose tool is gone (disabled by the node).
    #[serde(default)]
    pub removed: Vec<String>,
    /// Rows already up to date.
    #[serde(default)]
    pub unchanged: usize,
    /// The write's log index, when anything was written.
    #[serde(default)]
    pub version: Option<u64>,
    /// Tools imported with less than they offered.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// The body as the node sent it.
    #[serde(skip)]
    pub raw: Value,
}

/// A client for one node.
#[derive(Debug, Clone)]
pub struct NodeClient {
    base: String,
    http: reqwest::Client,
}

impl NodeClient {
    /// A client for the node at `base` (e.g. `http://127.0.0.1:8080`).
    pub fn new(base: &str) -> Result<Self, ClientError> {
        let base = base.trim_end_matches('/').to_owned();
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|source| ClientError::Transport {
                url: base.clone(),
                source,
            })?;
        Ok(Self { base, http })
    }

    /// The node's address.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Ranked candidates for a plain-language request (`GET /api/dispatch?ask=…&limit=…`).
    pub async fn ask(&self, query: &str, limit: usize) -> Result<AskAnswer, ClientError> {
        let url = format!("{}/api/dispatch", self.base);
        let limit = limit.to_string();
        let request = self
            .http
            .get(&url)
            .query(&[("ask", query), ("limit", limit.as_str())]);
        let raw = self.send(&url, request).await?;
        let candidates = raw
            .get("candidates")
            .cloned()
            .map(serde_json::from_value)
            .transpose()
            .map_err(|e| ClientError::Unexpected {
                url: url.clone(),
                detail: e.to_string(),
            })?
            .unwrap_or_default();
        Ok(AskAnswer { candidates, raw })
    }

    /// Imports (or re-imports) the tools of the MCP server at `url` as rows, on the node
    /// (`POST /api/directory/import-mcp`, admin key).
    pub async fn import_mcp(
        &self,
        url: &str,
        prefix: Option<&str>,
        category: Option<&str>,
        admin_key: &str,
    ) -> Result<ImportReport, ClientError> {
        let endpoint = format!("{}/api/directory/import-mcp", self.base);
        let mut body = serde_json::json!({ "url": url });
        if let Some(prefix) = prefix {
            body["prefix"] = prefix.into();
        }
        if let Some(category) = category {
            body["category"] = category.into();
        }
        let request = self.http.post(&endpoint).bearer_auth(admin_key).json(&body);
        let raw = self.send(&endpoint, request).await?;
        let mut report: ImportReport =
            serde_json::from_value(raw.clone()).map_err(|e| ClientError::Unexpected {
                url: endpoint.clone(),
                detail: e.to_string(),
            })?;
        report.raw = raw;
        Ok(report)
    }

    /// Sends a request and reads a JSON answer, turning error statuses into
    /// [`ClientError::Status`] with the node's message.
    async fn send(
        &self,
        url: &str,
        request: reqwest::RequestBuilder,
    ) -> Result<Value, ClientError> {
        let transport = |source| ClientError::Transport {
            url: url.to_owned(),
            source,
        };
        let response = request.send().await.map_err(transport)?;
        let status = response.status();
        let body = response.bytes().await.map_err(transport)?;
        let json: Option<Value> = serde_json::from_slice(&body).ok();
        if !status.is_success() {
            let message = json
                .as_ref()
                .and_then(|v| v.get("error"))
                .map(|e| {
                    let text = |f: &str| e.get(f).and_then(Value::as_str).unwrap_or("");
                    match text("hint") {
                        "" => text("message").to_owned(),
                        hint => format!("{} ({hint})", text("message")),
                    }
                })
                .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
            return Err(ClientError::Status {
                url: url.to_owned(),
                status,
                message,
            });
        }
        json.ok_or_else(|| ClientError::Unexpected {
            url: url.to_owned(),
            detail: "the body is not JSON".into(),
        })
    }
}
