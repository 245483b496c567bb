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
//!
//! At most `limits.max_feed_subscribers` streams are open on a node (more get 503), one
//! client holds at most `limits.max_feed_subscribers_per_client` of them (more get 429;
//! [`crate::service::quota`]), and a subscriber further behind than
//! `limits.max_feed_replay` changes gets `reset`. Without
//! the admin key, rows come without their `target` and hidden rows' changes without the row.

use std::convert::Infallible;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::{Stream, StreamExt as _};
use serde::Deserialize;
use serde_json::json;
use utoipa::IntoParams;

use super::{credential, Http, Peer};
use crate::service::feed::{self, FeedEvent};
use crate::service::quota::Payer;
use crate::service::view::Viewer;
use crate::service::ServiceError;

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
    responses((status = 200, description = "`text/event-stream` of `change` and `reset` events"),
              (status = 429, description = "this client holds as many streams as it may"),
              (status = 503, description = "this node has as many streams open as it allows")))]
pub async fn changes(
    State(http): State<Http>,
    Peer(peer): Peer,
    headers: HeaderMap,
    Query(query): Query<ChangesQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ServiceError> {
    let payer = Payer::of(&http.app.credentials, credential(&headers), peer);
    let slot = feed::subscribe(&http.app, &payer)?;
    let viewer = Viewer::of(&http.app, credential(&headers));
    let resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let since = query.since.or(resume);
    let events = feed::follow(
        http.app.clone(),
        viewer.clone(),
        slot,
        since,
        http.stop.clone(),
    )
    .map(move |e| Ok(sse(e, &viewer)));
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}

/// `change` (data: the change, with the row for a put) or `reset`, with the index as id.
fn sse(event: FeedEvent, viewer: &Viewer) -> Event {
    match event {
        FeedEvent::Change { change, row } => {
            let mut data = json!(change);
            if let Some(row) = row.as_deref().and_then(|r| viewer.row_json(r)) {
                data["row"] = row;
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
