//! The receipt: one invocation, append-only (DESIGN §2.2), and its public view.

use rand::Rng;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

/// A receipt id: `inv_` and 10 base36 characters.
pub fn new_receipt_id() -> String {
    const ALPHABET: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut rng = rand::rng();
    let mut id = String::with_capacity(14);
    id.push_str("inv_");
    for _ in 0..10 {
        id.push(ALPHABET[rng.random_range(0..36)] as char);
    }
    id
}

/// Whether `id` has the shape of a receipt id.
pub fn valid_receipt_id(id: &str) -> bool {
    id.strip_prefix("inv_").is_some_and(|rest| {
        rest.len() == 10
            && rest
                .bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
    })
}

/// Hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// One invocation. Decided in full (id, times, hashes) before it is proposed; only `index` is
/// filled in when the entry is applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Receipt {
    /// `inv_` + 10 base36 characters.
    pub id: String,
    /// The row that ran.
    pub key: String,
    /// The row's version when it ran.
    pub row_version: u64,
    /// Credential name (never the secret), `public`, or `share:<id>`.
    pub caller: String,
    /// SHA-256 of the input as received.
    pub input_sha256: String,
    /// SHA-256 of the output as returned.
    pub output_sha256: String,
    /// Whether the invocation succeeded.
    pub ok: bool,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When it started (RFC 3339, UTC).
    pub started_at: String,
    /// How long the runner took.
    pub duration_ms: u64,
    /// The node that ran it.
    pub served_by: u64,
    /// The id of the request that ran it (`x-request-id`, or the trace id of a
    /// `traceparent`, or one the node made), as the logs of every node it passed name it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// What was called (for runners that reach out), without secrets: `METHOD URL` (and
    /// `-> URL` per redirect) for http rows, `tools/call NAME at URL` for mcp rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub called: Option<String>,
    /// The upstream's answer: its HTTP status for http rows (`"200"`), `ok` or `is_error`
    /// (the tool result's `isError`) for mcp rows; absent when nothing answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_status: Option<String>,
    /// The ask that led to this invocation: the same caller asked it on the node that ran
    /// the row, within two minutes, and was offered the row. Every node's resolver learns
    /// its words for the row (`[resolver] learn`). Shown with the receipt to the admin only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asked: Option<String>,
    /// The stored input, cut at `store_cap_bytes`.
    pub input: String,
    /// The stored output, cut at `store_cap_bytes`.
    pub output: String,
    /// Whether the stored input was cut.
    #[serde(default)]
    pub input_truncated: bool,
    /// Whether the stored output was cut.
    #[serde(default)]
    pub output_truncated: bool,
    /// The cap applied to the stored input and output.
    pub store_cap_bytes: u32,
    /// The Raft log index of the entry that recorded it.
    #[serde(default)]
    pub index: u64,
}

/// `text` cut to at most `cap` bytes on a character boundary, and whether it was cut.
pub fn cap_text(text: &str, cap: usize) -> (String, bool) {
    if text.len() <= cap {
        return (text.to_owned(), false);
    }
    let mut end = cap;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (text[..end].to_owned(), true)
}

/// The keyless answer to `?confirm=`: the public fields of a receipt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Confirmation {
    /// Always true here; an unknown id answers 404 with `confirmed: false`.
    pub confirmed: bool,
    /// The receipt id.
    pub id: String,
    /// The row that ran.
    pub key: String,
    /// When it ran.
    pub at: String,
    /// Whether it succeeded.
    pub ok: bool,
    /// SHA-256 of the input.
    pub input_sha256: String,
    /// SHA-256 of the output.
    pub output_sha256: String,
    /// The Raft log index that recorded it; absent while it waits in the outbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u64>,
    /// `pending` while it waits in the outbox of the node that ran it (it confirms there
    /// now, everywhere once the cluster heals); absent once committed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Its leaf and inclusion proof against the latest checkpoint a majority of voters
    /// co-signed; absent until one covers it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<super::transparency::InclusionProof>,
}

impl From<&Receipt> for Confirmation {
    fn from(r: &Receipt) -> Self {
        Self {
            confirmed: true,
            id: r.id.clone(),
            key: r.key.clone(),
            at: r.started_at.clone(),
            ok: r.ok,
            input_sha256: r.input_sha256.clone(),
            output_sha256: r.output_sha256.clone(),
            index: Some(r.index),
            status: None,
            proof: None,
        }
    }
}

#[cfg(test)]
impl Receipt {
    /// A well-formed receipt of an `ECHO` invocation served by node 1, for unit tests that
    /// change only the fields they are about.
    pub fn sample(id: &str) -> Self {
        Self {
            id: id.into(),
            key: "ECHO".into(),
            row_version: 1,
            caller: "public".into(),
            input_sha256: String::new(),
            output_sha256: String::new(),
            ok: true,
            error: None,
            started_at: crate::model::time::format_ms(0),
            duration_ms: 1,
            served_by: 1,
            request_id: None,
            called: None,
            upstream_status: None,
            asked: None,
            input: "{}".into(),
            output: "{}".into(),
            input_truncated: false,
            output_truncated: false,
            store_cap_bytes: 16,
            index: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_the_documented_shape() {
        for _ in 0..100 {
            let id = new_receipt_id();
            assert!(valid_receipt_id(&id), "{id}");
        }
        assert!(!valid_receipt_id("inv_ABCDEFGHIJ"));
        assert!(!valid_receipt_id("inv_123"));
        assert!(!valid_receipt_id("rcp_0123456789"));
    }

    #[test]
    fn capping_respects_char_boundaries() {
        let (cut, truncated) = cap_text("héllo", 2);
        assert_eq!((cut.as_str(), truncated), ("h", true));
        let (whole, truncated) = cap_text("abc", 3);
        assert_eq!((whole.as_str(), truncated), ("abc", false));
    }
}
