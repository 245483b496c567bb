//! The recorded history of a run: one [`Event`] per request a client session made, and the
//! [`FinalState`] of every node after the faults healed. The checker judges only these, so
//! it can be tested with crafted histories.
//!
//! Values: every write of a row carries a fresh token (`s3w17`: session 3's 17th write) in
//! the row's WHAT line; a read observes the token it found, or `None` for "no such row".

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// What a session asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// `GET /api/dispatch?ask=word`; `key` is the session's own row the word belongs to.
    Ask {
        /// The query.
        word: String,
        /// The own row this word was written into, if any.
        key: Option<String>,
    },
    /// `GET /api/dispatch?key=K`.
    Contract {
        /// The row.
        key: String,
    },
    /// `GET /api/directory/{key}`.
    Read {
        /// The row.
        key: String,
    },
    /// `GET /api/directory/{key}?consistency=linearizable` of another session's row: the
    /// node confirms a read index with the leader's quorum first (DESIGN §3.1). Judged by
    /// the outside linearizability checker; not counted in the read availability (by
    /// design it needs a quorum, which §3.2's reads do not).
    LinearizableRead {
        /// The row.
        key: String,
    },
    /// `POST /api/dispatch {"key": K}`.
    Invoke {
        /// The row.
        key: String,
        /// Whether it is one of the session's own rows (else a shared row).
        own: bool,
    },
    /// `GET /api/dispatch?confirm=ID` of a receipt this session was given.
    Confirm {
        /// The receipt.
        id: String,
    },
    /// `POST /api/directory` of a new row.
    Insert {
        /// The row.
        key: String,
        /// The value written.
        token: String,
    },
    /// `POST /api/directory` of an existing row.
    Update {
        /// The row.
        key: String,
        /// The value written.
        token: String,
    },
    /// `DELETE /api/directory/{key}`.
    Delete {
        /// The row.
        key: String,
    },
}

/// The three availability classes of the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Ask, contract, directory read, confirm.
    Read,
    /// Insert, update, delete.
    Write,
    /// Invocations.
    Invoke,
}

impl Class {
    /// All classes, in report order.
    pub const ALL: [Class; 3] = [Class::Read, Class::Write, Class::Invoke];

    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Invoke => "invoke",
        }
    }
}

impl Op {
    /// The operation's name in the report.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Ask { .. } => "ask",
            Self::Contract { .. } => "contract",
            Self::Read { .. } => "read",
            Self::LinearizableRead { .. } => "linearizable_read",
            Self::Invoke { .. } => "invoke",
            Self::Confirm { .. } => "confirm",
            Self::Insert { .. } => "insert",
            Self::Update { .. } => "update",
            Self::Delete { .. } => "delete",
        }
    }

    /// Every operation name, in report order.
    pub const NAMES: [&'static str; 9] = [
        "ask",
        "contract",
        "read",
        "linearizable_read",
        "confirm",
        "invoke",
        "insert",
        "update",
        "delete",
    ];

    /// Its availability class.
    pub fn class(&self) -> Class {
        match self {
            Self::Ask { .. }
            | Self::Contract { .. }
            | Self::Read { .. }
            | Self::LinearizableRead { .. }
            | Self::Confirm { .. } => Class::Read,
            Self::Invoke { .. } => Class::Invoke,
            Self::Insert { .. } | Self::Update { .. } | Self::Delete { .. } => Class::Write,
        }
    }

    /// Whether it counts toward the availability of its class: all but linearizable
    /// reads, which are there to be judged, and by design fail without a quorum.
    pub fn counts_for_availability(&self) -> bool {
        !matches!(self, Self::LinearizableRead { .. })
    }

    /// For a read of one row (its contract too): the row.
    pub fn read_key(&self) -> Option<&str> {
        match self {
            Self::Read { key } | Self::Contract { key } | Self::LinearizableRead { key } => {
                Some(key)
            }
            _ => None,
        }
    }

    /// For a write: the row and the value it leaves (`None`: deleted).
    pub fn written(&self) -> Option<(&str, Option<&str>)> {
        match self {
            Self::Insert { key, token } | Self::Update { key, token } => {
                Some((key, Some(token.as_str())))
            }
            Self::Delete { key } => Some((key, None)),
            _ => None,
        }
    }
}

/// What a successful answer showed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "seen", rename_all = "snake_case")]
pub enum Seen {
    /// A write was acknowledged.
    Written,
    /// A row's value (`None`: 404, no such row).
    Row {
        /// The token found.
        token: Option<String>,
        /// The row's `version` (the log index of the write that left it).
        #[serde(default)]
        version: Option<u64>,
    },
    /// The keys an ask returned.
    Ask {
        /// Candidate keys.
        keys: Vec<String>,
    },
    /// An invocation's proof.
    Receipt {
        /// The receipt id.
        id: String,
        /// `proof.status == "pending"`: kept in the node's outbox.
        pending: bool,
        /// For own rows: the token in the result (which version ran).
        token: Option<String>,
    },
    /// A confirmation.
    Confirm {
        /// `confirmed`.
        confirmed: bool,
        /// Confirmed from the node's outbox (`status: "pending"`).
        pending: bool,
    },
}

/// How a request ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// An answer the protocol defines (for reads, 404 "no such row/receipt" is an answer).
    Ok(Seen),
    /// No answer, or an error answer.
    Failed {
        /// `timeout`, `connect`, `transport`, or `http_<status>:<code>`.
        error: String,
        /// For writes: it may still have taken effect (timeouts, 5xx). Refusals (4xx) are
        /// not ambiguous.
        ambiguous: bool,
    },
}

/// The error of an operation a session could not make because it was still waiting for
/// an earlier answer (see the workload's open-loop ticks). Not a request: the checker
/// skips it; availability counts it as failed.
pub const BLOCKED: &str = "blocked";

/// How an operation ended after its retries.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Operation {
    /// Some attempt got a protocol answer.
    pub ok: bool,
    /// From the first attempt's start to the last attempt's end.
    pub latency_us: u64,
}

/// One request of one session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The session.
    pub session: u32,
    /// The node asked (its id).
    pub node: u64,
    /// The node's incarnation: bumped when its data folder is wiped (a restart keeps it).
    pub incarnation: u32,
    /// What was asked.
    #[serde(flatten)]
    pub op: Op,
    /// Microseconds since the run started, when the request was sent.
    pub start_us: u64,
    /// Microseconds until the answer (or the failure).
    pub latency_us: u64,
    /// 0 for an operation's first attempt; 1, 2 for its retries on other nodes.
    #[serde(default)]
    pub attempt: u8,
    /// On the first attempt only: how the whole operation (with retries) ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<Operation>,
    /// The `x-rowcall-min-index` sent (0: none; sent to a node that has not yet shown the
    /// session its highest index).
    pub min_index: u64,
    /// The answer's `x-rowcall-index`.
    pub index: Option<u64>,
    /// The answer carried `x-rowcall-stale: true`.
    pub stale: bool,
    /// How it ended.
    #[serde(flatten)]
    pub outcome: Outcome,
}

impl Event {
    /// Whether the request got a protocol answer.
    pub fn ok(&self) -> bool {
        matches!(self.outcome, Outcome::Ok(_))
    }

    /// Whether this is a tick the session missed while blocked (no request was sent).
    pub fn blocked(&self) -> bool {
        matches!(&self.outcome, Outcome::Failed { error, .. } if error == BLOCKED)
    }

    /// Whether this event starts an operation (its first attempt).
    pub fn starts_operation(&self) -> bool {
        self.attempt == 0
    }

    /// Whether the operation this event starts succeeded (on some attempt).
    pub fn operation_ok(&self) -> bool {
        self.operation.map_or_else(|| self.ok(), |o| o.ok)
    }

    /// The latency of the operation this event starts, retries included.
    pub fn operation_latency_us(&self) -> u64 {
        self.operation.map_or(self.latency_us, |o| o.latency_us)
    }
}

/// A node's digest of its directory and receipt log (`GET /api/cluster/digest`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Digest {
    /// The applied index it was taken at.
    pub index: u64,
    /// Rows.
    pub rows: u64,
    /// Hash of the rows.
    pub rows_sha256: String,
    /// Receipts.
    pub receipts: u64,
    /// Hash of the receipt log.
    pub receipts_sha256: String,
    /// Leaves in the receipt log's Merkle tree (absent from older nodes).
    #[serde(default)]
    pub log_leaves: u64,
    /// The tree's root.
    #[serde(default)]
    pub log_root: String,
}

/// One node at the end of the run, after healing and settling.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FinalNode {
    /// The node.
    pub id: u64,
    /// Whether it answered at the end.
    pub reachable: bool,
    /// Every row on the node: key → token and version.
    pub rows: BTreeMap<String, Stored>,
    /// The receipts given to clients that this node confirms.
    pub confirmed: BTreeSet<String>,
    /// Its digest, if it answered.
    pub digest: Option<Digest>,
}

/// A row as a node holds it at the end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stored {
    /// The token in its WHAT line (or the WHAT line, for rows that are not the workload's).
    pub token: String,
    /// Its version: the log index of the write that left it.
    pub version: u64,
}

/// Every node at the end of the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FinalState {
    /// The nodes.
    pub nodes: Vec<FinalNode>,
    /// Whether the nodes reached the same index with empty outboxes within the bound.
    pub settled: bool,
    /// Receipts still in some node's outbox at the end.
    pub outbox_left: u64,
}

/// The token in a row's WHAT line (`# WHAT: chaos probe <word> <token>`), if it is ours.
pub fn token_of_what(what: &str) -> Option<String> {
    let mut words = what.split_whitespace();
    match (words.next(), words.next(), words.next(), words.next()) {
        (Some("chaos"), Some("probe"), Some(_word), Some(token)) => Some(token.to_owned()),
        _ => None,
    }
}

/// The WHAT line of a row's content.
pub fn what_of_content(content: &str) -> Option<&str> {
    content
        .lines()
        .find_map(|line| line.trim().strip_prefix("# WHAT:"))
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_come_back_from_content_and_events_round_trip_as_json() {
        let content = "# WHAT: chaos probe qzvkmert s3w17\n\n{\"token\":\"s3w17\"}\n";
        assert_eq!(
            what_of_content(content).and_then(token_of_what).as_deref(),
            Some("s3w17")
        );
        assert_eq!(token_of_what("Current time"), None);
        let event = Event {
            session: 3,
            node: 2,
            incarnation: 0,
            op: Op::Insert {
                key: "CH03_00001".into(),
                token: "s3w1".into(),
            },
            start_us: 10,
            latency_us: 5,
            attempt: 0,
            operation: None,
            min_index: 0,
            index: Some(9),
            stale: false,
            outcome: Outcome::Ok(Seen::Written),
        };
        let line = serde_json::to_string(&event).unwrap();
        assert_eq!(serde_json::from_str::<Event>(&line).unwrap(), event);
    }
}
