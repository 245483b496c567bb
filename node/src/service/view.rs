//! What a caller may see, decided once for every front end (DESIGN §10: transports do not
//! decide policy): of a row, of a row's contract, of the cluster, and of a failure.
//!
//! ```text
//!   credential / share token ──► Viewer { Anonymous | Share(key) | Holder(name) | Admin }
//!     Viewer::row(row)        → Whole | WithoutTarget | nothing (a hidden row)
//!     Viewer::contract(row)   → may read it? (a hidden row's needs a credential for it)
//!     Viewer::status(status)  → the cluster without its id, incarnations, addresses
//!     Viewer::addresses()     → may learn where members are (the gRPC leader hint)
//!     Viewer::run_detail()    → told why an upstream failed, or a generic line
//! ```
//!
//! The rule behind all of it: the admin key sees everything; anyone else sees what the
//! catalogue offers (visible rows, without the `target` that names internal hosts, paths and
//! sometimes a `?token=`) and what a client needs to use the cluster (who leads, how far it
//! applied), never what helps to impersonate a peer (cluster id, incarnations, addresses).

use crate::app::App;
use crate::auth::{Principal, Scope};
use crate::catalogue::feed::{Change, ChangeOp};
use crate::catalogue::row::Row;

/// Who is looking, as far as what they may see goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Viewer {
    /// No credential, or one the node does not recognise.
    Anonymous,
    /// A share token, checked, for one row.
    Share {
        /// The row it is scoped to.
        key: String,
    },
    /// A named credential that may run `key`-auth rows on the interface it came in on: an
    /// invoke key over HTTP and gRPC, an MCP token over MCP.
    Holder {
        /// The credential's name.
        name: String,
    },
    /// The admin key.
    Admin,
}

/// How much of a row a viewer sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sight {
    /// Every field.
    Whole,
    /// Every field but `target`.
    WithoutTarget,
}

impl Sight {
    /// `row` as JSON (the HTTP protocol's shape), this much of it.
    pub fn json(self, row: &Row) -> serde_json::Value {
        let mut value = serde_json::to_value(row).unwrap_or_default();
        if self == Self::WithoutTarget {
            if let Some(fields) = value.as_object_mut() {
                fields.remove("target");
            }
        }
        value
    }
}

impl Viewer {
    /// The viewer presenting `credential` (an unrecognised one sees what no credential does:
    /// reads do not refuse a bad credential, they just show less).
    pub fn of(app: &App, credential: Option<&str>) -> Self {
        let principal = credential
            .filter(|c| !c.is_empty())
            .and_then(|c| app.credentials.identify(c));
        Self::of_principal(principal.as_ref())
    }

    /// The viewer of a read about row `key` (its contract) presenting `credential` and
    /// perhaps a share token: the credential's viewer when it names one, else a share token
    /// that holds for `key`, else a stranger (a token for another row, expired or revoked,
    /// shows no more than none, as an unrecognised credential does on a read).
    pub fn for_row(app: &App, credential: Option<&str>, share: Option<&str>, key: &str) -> Self {
        match (Self::of(app, credential), share) {
            (Self::Anonymous, Some(token))
                if crate::dispatch::share::verify_for(app, token, key).is_ok() =>
            {
                Self::Share {
                    key: key.to_owned(),
                }
            }
            (viewer, _) => viewer,
        }
    }

    /// The viewer a recognised principal (or none) is. A principal of any scope but the
    /// admin's is a holder: it reaches a front end only where its scope lets it act.
    pub fn of_principal(principal: Option<&Principal>) -> Self {
        match principal {
            None => Self::Anonymous,
            Some(p) if p.scope == Scope::Admin => Self::Admin,
            Some(p) => Self::Holder {
                name: p.name.clone(),
            },
        }
    }

    /// Whether this is the admin key.
    pub fn is_admin(&self) -> bool {
        *self == Self::Admin
    }

    /// How much of `row` this viewer sees in listings, reads and the change feed; `None`:
    /// not at all (a hidden row, `planner_visible: false`, is kept out of every listing on
    /// purpose, so only the admin sees it there).
    pub fn row(&self, row: &Row) -> Option<Sight> {
        match self {
            Self::Admin => Some(Sight::Whole),
            _ if !row.planner_visible => None,
            _ => Some(Sight::WithoutTarget),
        }
    }

    /// What this viewer's change feed says of `change`: its own op, a delete for a row that
    /// left the listings it sees (a put that hid it), or nothing for a row it never saw
    /// listed (a hidden row put or deleted), so the feed names no key a listing hides.
    pub fn change(&self, change: &Change) -> Option<ChangeOp> {
        if self.is_admin() || change.op == ChangeOp::Reset {
            return Some(change.op);
        }
        match (change.listed.before, change.listed.after) {
            (_, true) => Some(change.op),
            (true, false) => Some(ChangeOp::Delete),
            (false, false) => None,
        }
    }

    /// `row` as JSON as this viewer sees it, or `None` (see [`Viewer::row`]).
    pub fn row_json(&self, row: &Row) -> Option<serde_json::Value> {
        Some(self.row(row)?.json(row))
    }

    /// Whether this viewer may read `row`'s contract. Every visible row's contract is public
    /// (asks link to it). A hidden row is invocable but neither suggested nor projected
    /// (DESIGN §2.1): whoever may run it by key — the admin, a credential holder, a share
    /// token for that very key — may read how to; a stranger is told there is no such row,
    /// as `GET /api/directory/{key}` tells them.
    pub fn contract(&self, row: &Row) -> bool {
        if row.planner_visible {
            return true;
        }
        match self {
            Self::Admin | Self::Holder { .. } => true,
            Self::Share { key } => *key == row.key,
            Self::Anonymous => false,
        }
    }

    /// Whether this viewer may learn where members are (the leader hint on gRPC answers).
    pub fn addresses(&self) -> bool {
        self.is_admin()
    }

    /// Whether this viewer is told why an invocation's upstream failed (its status, its
    /// error text, the addresses the node resolved). Only a named credential: a stranger and
    /// a share-token holder get a generic line, and the receipt (admin) and the log keep
    /// the detail.
    pub fn run_detail(&self) -> bool {
        matches!(self, Self::Admin | Self::Holder { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::row::RowType;

    fn row(key: &str, visible: bool) -> Row {
        Row {
            target: "GET https://internal.example/x?token=s3cret".into(),
            planner_visible: visible,
            ..Row::fixture(key, RowType::Http, "# WHAT: a row\n")
        }
    }

    fn viewers() -> [Viewer; 4] {
        [
            Viewer::Anonymous,
            Viewer::Share {
                key: "HIDDEN".into(),
            },
            Viewer::Holder { name: "ci".into() },
            Viewer::Admin,
        ]
    }

    #[test]
    fn a_feed_names_only_rows_its_viewer_saw_listed() {
        use crate::catalogue::feed::Listed;
        let change = |op, before, after| Change {
            index: 7,
            op,
            key: "K".into(),
            projection: false,
            listed: Listed { before, after },
        };
        let (put, delete) = (ChangeOp::Put, ChangeOp::Delete);
        // (change, what anyone but the admin is shown)
        let table = [
            (change(put, false, true), Some(put)),
            (change(put, true, true), Some(put)),
            (change(put, true, false), Some(delete)),
            (change(put, false, false), None),
            (change(delete, true, false), Some(delete)),
            (change(delete, false, false), None),
            (change(ChangeOp::Reset, false, false), Some(ChangeOp::Reset)),
        ];
        for viewer in viewers() {
            for (change, shown) in &table {
                let expected = if viewer.is_admin() {
                    Some(change.op)
                } else {
                    *shown
                };
                assert_eq!(viewer.change(change), expected, "{viewer:?} {change:?}");
            }
        }
    }

    #[test]
    fn only_the_admin_sees_targets_and_hidden_rows() {
        let (visible, hidden) = (row("SHOWN", true), row("HIDDEN", false));
        for viewer in viewers() {
            let admin = viewer.is_admin();
            let shown = viewer.row_json(&visible).unwrap();
            assert_eq!(shown.get("target").is_some(), admin, "{viewer:?}");
            assert_eq!(viewer.row_json(&hidden).is_some(), admin, "{viewer:?}");
            assert!(viewer.contract(&visible), "{viewer:?}");
        }
        let may_read: Vec<bool> = viewers().iter().map(|v| v.contract(&hidden)).collect();
        assert_eq!(may_read, [false, true, true, true]);
        let other_share = Viewer::Share {
            key: "SHOWN".into(),
        };
        assert!(!other_share.contract(&hidden));
        let detail: Vec<bool> = viewers().iter().map(Viewer::run_detail).collect();
        assert_eq!(detail, [false, false, true, true]);
    }
}
