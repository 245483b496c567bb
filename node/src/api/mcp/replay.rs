//! Resumable SSE streams: an id on every event of every stream, and replay of what a client
//! missed when it reconnects with `Last-Event-ID`, from a bounded buffer per stream.
//!
//! rmcp hands every SSE event to an [`EventStore`] before sending it, and answers a GET with
//! `Last-Event-ID` from [`EventStore::replay_events_after`]. Event ids are
//! `<stream id>/<sequence number>`, where rmcp names a session's standalone (GET) stream
//! `<session id>:common` and each POST stream by a fresh UUID. A replay sends the buffered
//! events after the given one, then follows the stream live: the GET stream until the session
//! ends, a POST stream until its response.
//!
//! An id this node cannot serve — the session was on another node, the node restarted, or
//! the event fell out of the buffer — means different things per stream. The GET stream only
//! ever carries `notifications/tools/list_changed`, which has no payload, so whatever was
//! missed is answered by one fresh `list_changed` (the client re-lists from the shared,
//! replicated catalogue). A POST stream's response cannot be rebuilt: the replay fails, which
//! rmcp answers with an empty stream (and a log line) rather than a retry loop.
//!
//! A stream belongs to the credential it was sent to, and only that credential may resume
//! it ([`Replay::resumable_by`]): a session's GET stream is its session's (whose id ends in
//! the owner's tag), and a POST stream is claimed by the tag of the credential the first of
//! its event ids is sent to ([`IdScanner`] reads them off the response on its way out, so
//! the claim is made before any id of the stream can be known outside the node).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

use futures_util::stream::{self, StreamExt};
use rmcp::model::{ServerJsonRpcMessage, ServerNotification, ToolListChangedNotification};
use rmcp::transport::common::server_side_http::ServerSseMessage;
use rmcp::transport::streamable_http_server::session::{
    EventId, EventStore, EventStoreError, EventStream,
};
use tokio::sync::broadcast;

/// Events kept per stream for replay. A POST stream holds a priming event, progress
/// notifications and its response; the GET stream holds `list_changed` notifications, of
/// which any number missed are worth one.
pub const EVENTS_PER_STREAM: usize = 64;
/// Streams kept on one endpoint; past this the oldest stream is forgotten first.
pub const MAX_STREAMS: usize = 4096;

/// Why a replay cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The id is not one this server hands out.
    #[error("Last-Event-ID {0:?} is not an event id of this server")]
    Malformed(String),
    /// The event's stream is not here (another node, a restart) or it left the buffer.
    #[error(
        "event {0:?} is gone: its stream is not buffered on this node (another node, a \
         restart, or more than {EVENTS_PER_STREAM} events ago); send the request again"
    )]
    Gone(String),
}

/// The buffered events of one stream.
struct Log {
    /// Sequence number of the next event.
    next: u64,
    /// The last [`EVENTS_PER_STREAM`] events, with their ids.
    events: VecDeque<(u64, ServerSseMessage)>,
    /// Every new event, for replays following the stream live.
    live: broadcast::Sender<ServerSseMessage>,
    /// A POST stream that sent its response: nothing follows.
    finished: bool,
    /// The owner tag of the credential its events were first sent to.
    owner: Option<String>,
}

impl Log {
    fn new() -> Self {
        Self {
            next: 0,
            events: VecDeque::new(),
            live: broadcast::channel(EVENTS_PER_STREAM).0,
            finished: false,
            owner: None,
        }
    }

    /// Numbers `event`, buffers it and hands it to live replays; returns its id.
    fn append(&mut self, stream_id: &str, event: &ServerSseMessage) -> EventId {
        let seq = self.next;
        self.next += 1;
        let id = format!("{stream_id}/{seq}");
        let mut stored = event.clone();
        stored.event_id = Some(id.clone());
        if self.events.len() == EVENTS_PER_STREAM {
            self.events.pop_front();
        }
        self.events.push_back((seq, stored.clone()));
        self.finished |= is_response(&stored);
        // No live replay listening is the common case, not an error.
        let _ = self.live.send(stored);
        id
    }

    /// Whether the events after `seq` are all still buffered.
    fn holds_after(&self, seq: u64) -> bool {
        seq < self.next
            && self
                .events
                .front()
                .is_none_or(|(first, _)| *first <= seq + 1)
    }
}

/// Whether `event` answers its POST stream's request (the stream's last event).
fn is_response(event: &ServerSseMessage) -> bool {
    event.message.as_deref().is_some_and(|message| {
        matches!(
            message,
            ServerJsonRpcMessage::Response(_) | ServerJsonRpcMessage::Error(_)
        )
    })
}

/// A `notifications/tools/list_changed` event, not yet numbered.
fn list_changed() -> ServerSseMessage {
    ServerSseMessage::from_message(ServerJsonRpcMessage::notification(
        ServerNotification::ToolListChangedNotification(ToolListChangedNotification::default()),
    ))
}

/// Whether `stream_id` is a session's standalone GET stream (rmcp's naming).
fn is_standalone(stream_id: &str) -> bool {
    stream_id.ends_with(":common")
}

/// The stream an event id of this server names, if it is one.
fn stream_of(event_id: &str) -> Option<&str> {
    let (stream, seq) = event_id.rsplit_once('/')?;
    seq.parse::<u64>().ok().map(|_| stream)
}

#[derive(Default)]
struct Streams {
    by_id: HashMap<String, Log>,
    /// Stream ids, oldest first, for forgetting past [`MAX_STREAMS`].
    order: VecDeque<String>,
}

impl Streams {
    fn log(&mut self, stream_id: &str) -> &mut Log {
        if !self.by_id.contains_key(stream_id) {
            if self.by_id.len() >= MAX_STREAMS {
                while let Some(oldest) = self.order.pop_front() {
                    if self.by_id.remove(&oldest).is_some() {
                        break;
                    }
                }
            }
            self.order.push_back(stream_id.to_owned());
        }
        self.by_id
            .entry(stream_id.to_owned())
            .or_insert_with(Log::new)
    }
}

/// The event buffers of one MCP endpoint.
#[derive(Default)]
pub struct Replay {
    streams: Mutex<Streams>,
}

impl Replay {
    /// Numbers and buffers one event of `stream_id`; returns its id.
    fn append(&self, stream_id: &str, event: &ServerSseMessage) -> EventId {
        let mut streams = self.streams.lock().expect("replay lock");
        streams.log(stream_id).append(stream_id, event)
    }

    /// Marks the stream of `event_id` as `owner`'s, if nobody claimed it before (the first
    /// credential its ids are sent to is the one it was opened for).
    pub fn claim(&self, event_id: &str, owner: &str) {
        let Some(stream_id) = stream_of(event_id) else {
            return;
        };
        let mut streams = self.streams.lock().expect("replay lock");
        if let Some(log) = streams.by_id.get_mut(stream_id) {
            log.owner.get_or_insert_with(|| owner.to_owned());
        }
    }

    /// Whether the credential tagged `owner` may resume after `last_event_id`: a session's
    /// GET stream only by its session's owner, a POST stream held here only by the one it
    /// was claimed by. An id of a stream not held here names nothing to replay, and is left
    /// to the replay (one `list_changed`, or nothing) — for a GET stream, still only to
    /// the session's owner.
    pub fn resumable_by(&self, last_event_id: &str, owner: &str) -> bool {
        let Some(stream_id) = stream_of(last_event_id) else {
            // Not an id of this server: the replay refuses it.
            return true;
        };
        if let Some(session) = stream_id.strip_suffix(":common") {
            return super::session_id::owner(session) == Some(owner);
        }
        let streams = self.streams.lock().expect("replay lock");
        streams
            .by_id
            .get(stream_id)
            .is_none_or(|log| log.owner.as_deref() == Some(owner))
    }

    /// Forgets a session's GET stream (the session ended); live replays of it end too.
    pub fn forget_session(&self, session_id: &str) {
        let mut streams = self.streams.lock().expect("replay lock");
        streams.by_id.remove(&format!("{session_id}:common"));
    }

    /// The events after `last_event_id`, then the stream live (see the module docs).
    pub fn replay(&self, last_event_id: &str) -> Result<EventStream, ReplayError> {
        let (stream_id, seq) = last_event_id
            .rsplit_once('/')
            .and_then(|(stream, seq)| Some((stream, seq.parse::<u64>().ok()?)))
            .ok_or_else(|| ReplayError::Malformed(last_event_id.to_owned()))?;
        let mut streams = self.streams.lock().expect("replay lock");
        let held = streams
            .by_id
            .get(stream_id)
            .is_some_and(|log| log.holds_after(seq));
        let (backlog, live) = if held {
            let log = &streams.by_id[stream_id];
            let backlog: Vec<_> = log
                .events
                .iter()
                .filter(|(n, _)| *n > seq)
                .map(|(_, event)| event.clone())
                .collect();
            (backlog, (!log.finished).then(|| log.live.subscribe()))
        } else if is_standalone(stream_id) {
            // Whatever was missed, one list_changed says all of it; it is buffered like any
            // event, so a client that drops again resumes after it.
            let log = streams.log(stream_id);
            log.append(stream_id, &list_changed());
            let backlog = log.events.back().map(|(_, event)| event.clone());
            (backlog.into_iter().collect(), Some(log.live.subscribe()))
        } else {
            return Err(ReplayError::Gone(last_event_id.to_owned()));
        };
        drop(streams);
        let live = stream::unfold(live, |live| async move {
            let mut rx = live?;
            // A lagging receiver ends the stream: the client resumes from its last id.
            let event = rx.recv().await.ok()?;
            let more = !is_response(&event);
            Some((event, more.then_some(rx)))
        });
        Ok(Box::pin(stream::iter(backlog).chain(live)))
    }
}

/// Longest SSE line read for an event id; longer lines are data, skipped unread.
const MAX_ID_LINE: usize = 512;

/// Reads the `id:` lines of an SSE body as it goes out, whatever the chunking.
#[derive(Debug, Default)]
pub struct IdScanner {
    /// The start of a line not yet ended.
    partial: Vec<u8>,
    /// The line under way is too long to be an id line: skip to its end.
    skipping: bool,
}

impl IdScanner {
    /// Feeds the next piece of the body; calls `found` with each event id completed in it.
    pub fn feed(&mut self, bytes: &[u8], mut found: impl FnMut(&str)) {
        for piece in bytes.split_inclusive(|b| *b == b'\n') {
            let ended = piece.ends_with(b"\n");
            if !self.skipping {
                self.partial.extend_from_slice(piece);
                if !ended && self.partial.len() > MAX_ID_LINE {
                    self.partial.clear();
                    self.skipping = true;
                }
            }
            if ended {
                if !self.skipping {
                    let line = String::from_utf8_lossy(&self.partial);
                    if let Some(id) = line.trim_end().strip_prefix("id:") {
                        found(id.trim());
                    }
                }
                self.partial.clear();
                self.skipping = false;
            }
        }
    }
}

type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, EventStoreError>> + Send + 'a>>;

// rmcp declares this trait with `async_trait`; these are its desugared signatures.
impl EventStore for Replay {
    fn store_event<'a, 'b, 'c, 'd>(
        &'a self,
        stream_id: &'b str,
        event: &'c ServerSseMessage,
    ) -> StoreFuture<'d, EventId>
    where
        'a: 'd,
        'b: 'd,
        'c: 'd,
        Self: 'd,
    {
        let id = self.append(stream_id, event);
        Box::pin(async move { Ok(id) })
    }

    fn replay_events_after<'a, 'b, 'c>(
        &'a self,
        last_event_id: &'b str,
    ) -> StoreFuture<'c, EventStream>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        let replay = self.replay(last_event_id).map_err(EventStoreError::from);
        Box::pin(async move { replay })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{CallToolResult, RequestId, ServerResult};

    fn response() -> ServerSseMessage {
        ServerSseMessage::from_message(ServerJsonRpcMessage::response(
            ServerResult::CallToolResult(CallToolResult::success(vec![])),
            RequestId::Number(1),
        ))
    }

    async fn ids(stream: EventStream, take: usize) -> Vec<String> {
        stream
            .take(take)
            .map(|event| event.event_id.unwrap())
            .collect()
            .await
    }

    #[tokio::test]
    async fn a_replay_sends_what_follows_the_last_id_once_then_follows_live() {
        let replay = Replay::default();
        let first = replay.append("s:common", &list_changed());
        for _ in 0..2 {
            replay.append("s:common", &list_changed());
        }
        let stream = replay.replay(&first).unwrap();
        replay.append("s:common", &list_changed());
        assert_eq!(
            ids(stream, 3).await,
            ["s:common/1", "s:common/2", "s:common/3"]
        );
    }

    #[tokio::test]
    async fn a_post_stream_ends_with_its_response_and_a_lost_one_is_gone() {
        let replay = Replay::default();
        let log = |event: &ServerSseMessage| replay.append("p", event);
        let priming = log(&list_changed());
        log(&response());
        let all: Vec<_> = replay.replay(&priming).unwrap().collect().await;
        assert_eq!(all.len(), 1, "the response, then the end");
        assert!(matches!(replay.replay("q/0"), Err(ReplayError::Gone(_))));
        assert!(matches!(
            replay.replay("no-number"),
            Err(ReplayError::Malformed(_))
        ));
    }

    #[tokio::test]
    async fn a_stream_is_resumable_by_the_credential_it_was_sent_to_only() {
        let replay = Replay::default();
        let first = replay.append("p", &list_changed());
        assert!(!replay.resumable_by(&first, "aaaa"), "unclaimed: nobody's");
        let mut scanner = IdScanner::default();
        // The id arrives split across chunks, among data and keep-alive lines.
        let body = format!("data: {{\"x\":1}}\n:\nid: {first}\n\n");
        let (head, tail) = body.split_at(body.len() - 6);
        for chunk in [head, tail] {
            scanner.feed(chunk.as_bytes(), |id| replay.claim(id, "aaaa"));
        }
        replay.claim(&first, "bbbb");
        assert!(replay.resumable_by(&first, "aaaa"));
        assert!(
            !replay.resumable_by(&first, "bbbb"),
            "the first claim holds"
        );
        // A GET stream is its session's owner's; an id naming nothing held is left alone.
        let session = format!("rowcall-rows-{}{}", "0".repeat(32), "aaaabbbbccccdddd");
        let common = format!("{session}:common/3");
        assert!(replay.resumable_by(&common, "aaaabbbbccccdddd"));
        assert!(!replay.resumable_by(&common, "aaaa"));
        assert!(replay.resumable_by("elsewhere/9", "bbbb"));
    }

    #[tokio::test]
    async fn a_standalone_stream_not_held_here_answers_one_list_changed() {
        let replay = Replay::default();
        // Another node's id, and one that left the buffer, are both answered by a notice.
        let stream = replay.replay("elsewhere:common/7").unwrap();
        assert_eq!(ids(stream, 1).await, ["elsewhere:common/0"]);
        for _ in 0..EVENTS_PER_STREAM + 2 {
            replay.append("s:common", &list_changed());
        }
        let event = replay.replay("s:common/0").unwrap().next().await.unwrap();
        assert!(matches!(
            event.message.as_deref(),
            Some(ServerJsonRpcMessage::Notification(_))
        ));
        assert_eq!(
            event.event_id.as_deref(),
            Some(&*format!("s:common/{}", EVENTS_PER_STREAM + 2))
        );
    }
}
