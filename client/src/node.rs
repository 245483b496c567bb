//! A connection to one rowcall node over its HTTP protocol (DESIGN §3). Subcommands call
//! these methods and never build requests themselves, so the transport can change alone.

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

/// How long one request may take before the client gives up.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a backup may take to build and arrive.
const BACKUP_TIMEOUT: Duration = Duration::from_secs(3600);

/// A backup saved by [`NodeClient::backup`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupReport {
    /// The log index the backup's state was cut at.
    pub index: u64,
    /// Its size.
    pub bytes: u64,
    /// Its SHA-256, hex (as `sha256sum` prints it).
    pub sha256: String,
}

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
        Self::trusting(base, None)
    }

    /// A client for the node at `base`; with `ca` (PEM), an `https://` node is trusted
    /// only if its certificate chains to that CA (a private CA, as `deploy/tls` makes).
    ///
    /// ```no_run
    /// let pem = std::fs::read("ca.pem").unwrap();
    /// let node = rowcall_client::node::NodeClient::trusting("https://10.0.0.5:8080", Some(&pem))?;
    /// # Ok::<(), rowcall_client::node::ClientError>(())
    /// ```
    pub fn trusting(base: &str, ca: Option<&[u8]>) -> Result<Self, ClientError> {
        let base = base.trim_end_matches('/').to_owned();
        let transport = |source| ClientError::Transport {
            url: base.clone(),
            source,
        };
        let mut builder = reqwest::Client::builder().timeout(REQUEST_TIMEOUT);
        if let Some(pem) = ca {
            let root = reqwest::Certificate::from_pem(pem).map_err(transport)?;
            builder = builder.tls_certs_only([root]);
        }
        let http = builder.build().map_err(transport)?;
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

    /// Saves a consistent backup of the node's applied state to `file` (admin key): written
    /// beside it first, checked against the SHA-256 the node sent, synced, then renamed, so
    /// `file` is either a whole backup or untouched.
    pub async fn backup(
        &self,
        admin_key: &str,
        file: &std::path::Path,
    ) -> Result<BackupReport, ClientError> {
        use sha2::Digest as _;
        use std::io::Write as _;
        let url = format!("{}/api/cluster/backup", self.base);
        let transport = |source| ClientError::Transport {
            url: url.clone(),
            source,
        };
        let local = |what: &str, e: std::io::Error| ClientError::Unexpected {
            url: url.clone(),
            detail: format!("{what} {}: {e}", file.display()),
        };
        let mut response = self
            .http
            .get(&url)
            .bearer_auth(admin_key)
            // A large catalogue's backup may take longer than one request's usual bound.
            .timeout(BACKUP_TIMEOUT)
            .send()
            .await
            .map_err(transport)?;
        let status = response.status();
        if !status.is_success() {
            let body = response.bytes().await.map_err(transport)?;
            return Err(status_error(&url, status, &body));
        }
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let (Some(index), Some(expected)) = (
            header("x-rowcall-backup-index").and_then(|i| i.parse::<u64>().ok()),
            header("x-rowcall-backup-sha256"),
        ) else {
            return Err(ClientError::Unexpected {
                url: url.clone(),
                detail: "the answer names no backup index and checksum".into(),
            });
        };
        let mut partial = file.as_os_str().to_owned();
        partial.push(".partial");
        let partial = std::path::PathBuf::from(partial);
        // A backup holds every receipt and the share-token secret: owner-only, like the
        // data folder it comes from.
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut out = options.open(&partial).map_err(|e| local("create", e))?;
        let mut hash = sha2::Sha256::new();
        let mut bytes = 0u64;
        while let Some(chunk) = response.chunk().await.map_err(transport)? {
            hash.update(&chunk);
            bytes += chunk.len() as u64;
            out.write_all(&chunk).map_err(|e| local("write", e))?;
        }
        let sha256 = hex::encode(hash.finalize());
        if sha256 != expected {
            let _ = std::fs::remove_file(&partial);
            return Err(ClientError::Unexpected {
                url,
                detail: format!(
                    "the backup arrived damaged: SHA-256 {sha256}, the node sent {expected}"
                ),
            });
        }
        out.sync_all().map_err(|e| local("sync", e))?;
        drop(out);
        std::fs::rename(&partial, file).map_err(|e| local("rename to", e))?;
        Ok(BackupReport {
            index,
            bytes,
            sha256,
        })
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
        if !status.is_success() {
            return Err(status_error(url, status, &body));
        }
        let json: Option<Value> = serde_json::from_slice(&body).ok();
        json.ok_or_else(|| ClientError::Unexpected {
            url: url.to_owned(),
            detail: "the body is not JSON".into(),
        })
    }
}

/// [`ClientError::Status`] for an error answer, with the node's message (and hint) when the
/// body is rowcall's JSON error, the raw body otherwise.
fn status_error(url: &str, status: reqwest::StatusCode, body: &[u8]) -> ClientError {
    let json: Option<Value> = serde_json::from_slice(body).ok();
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
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    ClientError::Status {
        url: url.to_owned(),
        status,
        message,
    }
}
