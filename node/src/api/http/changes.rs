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
//! also gets `reset`. The feed itself is [`crate::service::feed`].

use std::convert::Infallible;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::{Stream, StreamExt as _};
use serde::Deserialize;
use serde_json::json;
use utoipa::IntoParams;

use super::Http;
use crate::service::feed::{self, FeedEvent};

/// Where to start.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ChangesQuery {
    /// Replay the changes after this log index first (e.g. the `x-rowcall-index` of the
    /// directory read the cache was built from). Without it: live changes only.
    since: Option<u64>,
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
    let events = feed::follow(http.app.clone(), since, http.stop.clone()).map(|e| Ok(sse(e)));
    Sse::new(events).keep_alive(KeepAlive::default())
}

/// `change` (data: the change, with the row for a put) or `reset`, with the index as id.
fn sse(event: FeedEvent) -> Event {
    match event {
        FeedEvent::Change { change, row } => {
            let mut data = json!(change);
            if let Some(row) = row {
                data["row"] = json!(row);
            }
            Event::default()
                .event("change")
                .id(change.index.to_string())
                .data(data.to_string())
        }
        FeedEvent::Reset { index } => Event::default()
            .event("reset")
            .id(index.to_string())
            .data(json!({"index": index, "op": "reset"}).to_string()),
    }
}
