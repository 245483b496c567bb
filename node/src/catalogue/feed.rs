//! The change feed: every change to the applied directory, published as the state machine
//! applies entries (on every node, whichever node took the write), for
//! `GET /api/directory/changes` and for MCP `notifications/tools/list_changed`.
//!
//! Live changes go out on a `tokio::sync::broadcast` channel. A bounded ring of recent
//! changes lets a subscriber that has seen everything up to index N catch up on what came
//! after; when N is older than the ring (or older than the last snapshot install or restart,
//! whose history this node never saw), it gets a single [`Backlog::Reset`] instead and must
//! read the directory again.

use std::collections::VecDeque;

use serde::Serialize;
use tokio::sync::broadcast;

use super::row::Row;

/// Changes kept for catch-up.
const RETAINED: usize = 4096;
/// Changes a live subscriber may fall behind before it is told it lagged.
const CHANNEL_CAPACITY: usize = 1024;

/// What happened to a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeOp {
    /// Inserted or replaced.
    Put,
    /// Deleted.
    Delete,
    /// The whole directory was replaced (snapshot install): read it again.
    Reset,
}

/// One change to the applied directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// The log index of the entry that made the change (a bulk write gives all its rows
    /// the same index).
    pub index: u64,
    /// What happened.
    pub op: ChangeOp,
    /// The row's key; empty for a reset.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub key: String,
    /// Whether the MCP projection changed: a tool appeared, disappeared, or its definition
    /// changed. Always true for a reset.
    pub projection: bool,
    /// Whether the row was listed (visible to callers other than the admin) before and
    /// after the change: what a stranger's feed may say of it ([`crate::service::view`]).
    #[serde(skip)]
    pub listed: Listed,
}

/// Whether a row was in the listings callers other than the admin see (not hidden with
/// `planner_visible: false`), before and after one change.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Listed {
    /// Before the change (false: absent, or hidden).
    pub before: bool,
    /// After it (false: deleted, or hidden).
    pub after: bool,
}

impl Listed {
    /// Replacing `old` by `new` (`None`: absent).
    pub fn of(old: Option<&Row>, new: Option<&Row>) -> Self {
        Self {
            before: old.is_some_and(|r| r.planner_visible),
            after: new.is_some_and(|r| r.planner_visible),
        }
    }
}

/// What a new subscriber missed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backlog {
    /// These changes, oldest first (possibly none).
    Changes(Vec<Change>),
    /// More than this node can replay: read the directory again.
    Reset,
}

/// The feed's state, kept inside the catalogue so that it changes under the same lock.
#[derive(Debug)]
pub struct Feed {
    tx: broadcast::Sender<Change>,
    recent: VecDeque<Change>,
    /// Every change with an index above this is in `recent`; `None` until the first change
    /// after a restart or snapshot install (nothing before it is known).
    complete_after: Option<u64>,
    last_index: u64,
}

impl Default for Feed {
    fn default() -> Self {
        Self {
            tx: broadcast::Sender::new(CHANNEL_CAPACITY),
            recent: VecDeque::new(),
            complete_after: None,
            last_index: 0,
        }
    }
}

impl Feed {
    /// The highest index published.
    pub fn last_index(&self) -> u64 {
        self.last_index
    }

    /// Publishes one change.
    pub fn publish(
        &mut self,
        index: u64,
        op: ChangeOp,
        key: &str,
        projection: bool,
        listed: Listed,
    ) {
        if self.complete_after.is_none() {
            // Nothing between the last reset and this entry changed a row.
            self.complete_after = Some(index.saturating_sub(1));
        }
        self.push(Change {
            index,
            op,
            key: key.to_owned(),
            projection,
            listed,
        });
    }

    /// Publishes a reset: history before it is unknown.
    pub fn reset(&mut self, index: u64) {
        self.recent.clear();
        self.complete_after = None;
        self.last_index = self.last_index.max(index);
        let _ = self.tx.send(Change {
            index,
            op: ChangeOp::Reset,
            key: String::new(),
            projection: true,
            listed: Listed::default(),
        });
    }

    fn push(&mut self, change: Change) {
        self.last_index = self.last_index.max(change.index);
        if self.recent.len() == RETAINED {
            if let Some(dropped) = self.recent.pop_front() {
                self.complete_after = Some(dropped.index);
            }
        }
        self.recent.push_back(change.clone());
        // No subscribers is not an error.
        let _ = self.tx.send(change);
    }

    /// Subscribes, with what a subscriber that has seen everything up to `since` missed.
    /// `applied` is the node's applied index, read under the same lock.
    pub fn watch(
        &self,
        since: Option<u64>,
        applied: u64,
    ) -> (Backlog, broadcast::Receiver<Change>) {
        let rx = self.tx.subscribe();
        let backlog = match since {
            None => Backlog::Changes(Vec::new()),
            Some(since) => match self.complete_after {
                Some(after) if since >= after => Backlog::Changes(
                    self.recent
                        .iter()
                        .filter(|c| c.index > since)
                        .cloned()
                        .collect(),
                ),
                // No change since the last reset: nothing missed if the subscriber is current.
                None if since >= applied.max(self.last_index) => Backlog::Changes(Vec::new()),
                _ => Backlog::Reset,
            },
        };
        (backlog, rx)
    }
}

/// Whether replacing `old` by `new` (`None`: absent) changes the MCP projection: the set of
/// projected rows, or the definition of one (name, description, input schema, annotations —
/// built from `content`, `args_schema`, `risk` and `type`; see `api::mcp::tools`).
pub fn projection_changed(old: Option<&Row>, new: Option<&Row>) -> bool {
    let old = old.filter(|r| r.mcp_projected());
    let new = new.filter(|r| r.mcp_projected());
    match (old, new) {
        (None, None) => false,
        (Some(a), Some(b)) => {
            a.content != b.content
                || a.args_schema != b.args_schema
                || a.risk != b.risk
                || a.kind != b.kind
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(feed: &mut Feed, index: u64, key: &str) {
        feed.publish(index, ChangeOp::Put, key, true, Listed::default());
    }

    #[test]
    fn catch_up_replays_only_later_changes() {
        let mut feed = Feed::default();
        put(&mut feed, 5, "A");
        put(&mut feed, 7, "B");
        let (backlog, _) = feed.watch(Some(5), 7);
        let Backlog::Changes(changes) = backlog else {
            panic!("expected changes")
        };
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].key, "B");
        // Index 4 is covered: the first change after the reset was at 5.
        assert!(matches!(feed.watch(Some(4), 7).0, Backlog::Changes(c) if c.len() == 2));
        // Index 3 may have had changes this node never saw.
        assert_eq!(feed.watch(Some(3), 7).0, Backlog::Reset);
    }

    #[test]
    fn without_history_only_a_current_subscriber_is_spared_a_reset() {
        let mut feed = Feed::default();
        feed.reset(10);
        assert_eq!(feed.watch(Some(12), 12).0, Backlog::Changes(Vec::new()));
        assert_eq!(feed.watch(Some(9), 12).0, Backlog::Reset);
    }

    #[test]
    fn an_overflowing_ring_moves_the_horizon() {
        let mut feed = Feed::default();
        for i in 1..=(RETAINED as u64 + 10) {
            put(&mut feed, i, "K");
        }
        assert_eq!(feed.watch(Some(5), 0).0, Backlog::Reset);
        assert!(
            matches!(feed.watch(Some(20), 0).0, Backlog::Changes(c) if c.len() == RETAINED - 10)
        );
    }

    #[test]
    fn live_changes_reach_subscribers() {
        let mut feed = Feed::default();
        let (_, mut rx) = feed.watch(None, 0);
        put(&mut feed, 3, "A");
        assert_eq!(rx.try_recv().unwrap().key, "A");
    }
}
