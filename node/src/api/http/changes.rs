//! `GET /api/directory/changes?since=N`: the directory's changes as server-sent events, for
//! caches and anything else that mirrors the catalogue (DESIGN §3). The same feed drives the
//! MCP projection's `list_changed`.
//!
//! Each change is an event `change` with `id` = its log index and data
//! `{"index","op":"put"|"delete","key","projection","row"?}` (`row`: the row as it is when the
//! event is sent, absent if it was deleted since). `since=N` (or `Last-Event-ID: N`) first
//! replays the changes after index N; when this node cannot (N is older than what it retains,
//! or older than its last restart or snapshot install) it sends one event `reset` instead:
//! read `GET /api/directory` again, then follow the stream. A subscriber too slow to keep up
//! also gets `reset`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::{broadcast, watch};
use utoipa::IntoParams;

use super::Http;
use crate::app::App;
use crate::catalogue::feed::{Backlog, Change, ChangeOp};

/// Where to start.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ChangesQuery {
    /// Replay the changes after this log index first (e.g. the `x-rowcall-index` of the
    /// directory read the cache was built from). Without it: live changes only.
    since: Option<u64>,
}

struct Follow {
    app: Arc<App>,
    backlog: VecDeque<Event>,
    changes: broadcast::Receiver<Change>,
    stop: watch::Receiver<bool>,
}

/// Streams the directory's changes.
#[utoipa::path(get, path = "/api/directory/changes", params(ChangesQuery),
    responses((status = 200, description = "`text/event-stream` of `change` and `reset` events")))]
pub async fn changes(
    State(http): State<Http>,
    headers: HeaderMap,
    Query(query): Query<ChangesQuery>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let since = query.since.or(resume);
    let app = http.app.clone();
    let (backlog, changes) = {
        let catalogue = app.catalogue.read();
        catalogue.watch(since, app.applied_index())
    };
    let backlog = match backlog {
        Backlog::Changes(changes) => changes.iter().map(|c| change_event(&app, c)).collect(),
        Backlog::Reset => VecDeque::from([reset_event(app.applied_index())]),
    };
    let follow = Follow {
        app,
        backlog,
        changes,
        stop: http.stop.clone(),
    };
    let stream = futures_util::stream::unfold(follow, |mut follow| async move {
        if let Some(event) = follow.backlog.pop_front() {
            return Some((Ok(event), follow));
        }
        let event = tokio::select! {
            received = follow.changes.recv() => match received {
                Ok(change) => change_event(&follow.app, &change),
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    reset_event(follow.app.applied_index())
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            },
            _ = follow.stop.wait_for(|stopped| *stopped) => return None,
        };
        Some((Ok(event), follow))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

fn change_event(app: &App, change: &Change) -> Event {
    if change.op == ChangeOp::Reset {
        return reset_event(change.index);
    }
    let mut data = json!(change);
    if change.op == ChangeOp::Put {
        if let Some(row) = app.catalogue.read().get(&change.key) {
            data["row"] = json!(row);
        }
    }
    Event::default()
        .event("change")
        .id(change.index.to_string())
        .data(data.to_string())
}

fn reset_event(index: u64) -> Event {
    Event::default()
        .event("reset")
        .id(index.to_string())
        .data(json!({"index": index, "op": "reset"}).to_string())
}
