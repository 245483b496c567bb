//! The directory's change feed, for caches and anything else that mirrors the catalogue:
//! from an index, replay what this node retains, then follow live changes. When it cannot
//! replay (the index is older than it retains, or than its last restart or snapshot
//! install), or the follower is too slow to keep up, the feed says `Reset`: read the
//! directory again, then keep following.
//!
//! Every feed holds a stream slot of its subscriber ([`quota::Spending::open_stream`]) for
//! as long as it is open, whichever front end serves it (HTTP's change feed, gRPC's
//! `Watch`), so one client cannot take the node's streams.

use std::collections::VecDeque;
use std::sync::Arc;

use futures_util::Stream;
use tokio::sync::{broadcast, watch};

use super::quota::{self, StreamSlot};
use super::view::Viewer;
use crate::app::App;
use crate::catalogue::feed::{Backlog, Change, ChangeOp};
use crate::catalogue::row::Row;

/// One event of the feed.
#[derive(Debug, Clone)]
pub enum FeedEvent {
    /// A row was put or deleted at `change.index`.
    Change {
        /// What changed.
        change: Change,
        /// The row as it is when the event is sent, for a put (absent if it was deleted
        /// since).
        row: Option<Arc<Row>>,
    },
    /// Changes were missed: read the directory again (it is at least at `index`).
    Reset {
        /// The index this node had applied.
        index: u64,
    },
}

impl FeedEvent {
    /// The log index the event is at: a follower resumes after it.
    pub fn index(&self) -> u64 {
        match self {
            Self::Change { change, .. } => change.index,
            Self::Reset { index } => *index,
        }
    }
}

struct Follow {
    app: Arc<App>,
    viewer: Viewer,
    backlog: VecDeque<Change>,
    reset_first: bool,
    changes: broadcast::Receiver<Change>,
    stop: watch::Receiver<bool>,
    _slot: StreamSlot,
}

/// A stream slot for a feed of `payer`: 429 when the payer holds its share, 503 when the
/// node holds all it allows.
pub fn subscribe(app: &App, payer: &quota::Payer) -> Result<StreamSlot, super::ServiceError> {
    app.spending.open_stream(payer)
}

/// The feed from after index `since` (live changes only without it), as `viewer` may see
/// it ([`Viewer::change`]), until `stop` turns true or the node stops applying; `slot` is
/// given back when the feed is dropped.
pub fn follow(
    app: Arc<App>,
    viewer: Viewer,
    slot: StreamSlot,
    since: Option<u64>,
    stop: watch::Receiver<bool>,
) -> impl Stream<Item = FeedEvent> + Send + 'static {
    let (backlog, changes) = {
        let catalogue = app.catalogue.read();
        catalogue.watch(since, app.applied_index())
    };
    // A subscriber further behind than the replay cap reads the directory instead: a
    // replay costs the node a row read per change.
    let max_replay = app.config.limits.max_feed_replay;
    let (backlog, reset_first) = match backlog {
        Backlog::Changes(changes) if changes.len() <= max_replay => {
            (VecDeque::from(changes), false)
        }
        Backlog::Changes(_) | Backlog::Reset => (VecDeque::new(), true),
    };
    let follow = Follow {
        app,
        viewer,
        backlog,
        reset_first,
        changes,
        stop,
        _slot: slot,
    };
    futures_util::stream::unfold(follow, |mut follow| async move {
        if std::mem::take(&mut follow.reset_first) {
            let index = follow.app.applied_index();
            return Some((FeedEvent::Reset { index }, follow));
        }
        loop {
            let change = match follow.backlog.pop_front() {
                Some(change) => change,
                None => {
                    let received = tokio::select! {
                        received = follow.changes.recv() => received,
                        _ = follow.stop.wait_for(|stopped| *stopped) => return None,
                    };
                    match received {
                        Ok(change) => change,
                        // Dropped changes cannot be replayed from the channel: start over.
                        Err(broadcast::error::RecvError::Lagged(_)) => {
                            let index = follow.app.applied_index();
                            return Some((FeedEvent::Reset { index }, follow));
                        }
                        Err(broadcast::error::RecvError::Closed) => return None,
                    }
                }
            };
            if let Some(event) = event(&follow.app, &follow.viewer, change) {
                return Some((event, follow));
            }
        }
    })
}

/// The event `viewer` is shown for `change`, if any.
fn event(app: &App, viewer: &Viewer, mut change: Change) -> Option<FeedEvent> {
    change.op = viewer.change(&change)?;
    Some(match change.op {
        ChangeOp::Reset => FeedEvent::Reset {
            index: change.index,
        },
        ChangeOp::Put => {
            let row = app.catalogue.read().get(&change.key);
            FeedEvent::Change { change, row }
        }
        ChangeOp::Delete => FeedEvent::Change { change, row: None },
    })
}
