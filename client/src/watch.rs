//! [`Watch`]: the directory's change feed as a stream that outlives the node it reads from.
//!
//! When the stream from one node ends or breaks (the node stopped, the network failed), the
//! watch opens another on the next node that answers, asking it to replay from where this
//! one was. Events carry their log index, and all rows of one bulk write share an index, so
//! the watch remembers the last index and how many events of it were delivered: it resumes
//! from the index before, and skips what it already delivered. Nothing is missed, nothing is
//! repeated. A node that cannot replay that far answers `Reset`, which is passed on.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::stream::{self, BoxStream};
use futures_util::Stream;
use rowcall_proto::v1::{watch_event, WatchEvent};

use crate::client::{Client, INDEX};
use crate::error::Error;

/// A resumable stream of the directory's changes; see [`Client::watch`].
pub struct Watch {
    events: BoxStream<'static, Result<WatchEvent, Error>>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Watch { .. }")
    }
}

/// Where the watch is, across connections.
struct Position {
    client: Client,
    /// What the caller asked to start after.
    since: Option<u64>,
    /// The index of the last event delivered (or the index a live-only watch started at).
    last: Option<u64>,
    /// How many change events at `last` were delivered.
    delivered_at_last: u32,
    /// How many events at `last` the current connection has sent.
    sent_at_last: u32,
    stream: Option<tonic::Streaming<WatchEvent>>,
    /// Set once an error ended the watch.
    done: bool,
}

impl Position {
    /// Where the next connection starts: before the last index when some of its events were
    /// delivered (to get the rest), at it otherwise.
    fn resume_from(&self) -> Option<u64> {
        match self.last {
            Some(last) if self.delivered_at_last > 0 => Some(last.saturating_sub(1)),
            Some(last) => Some(last),
            None => self.since,
        }
    }

    /// Whether `event` is new to the caller, noting it if so.
    fn admit(&mut self, event: &WatchEvent) -> bool {
        if let Some(watch_event::Event::Reset(_)) = event.event {
            self.last = Some(event.index);
            self.delivered_at_last = 0;
            self.sent_at_last = 0;
            return true;
        }
        match self.last {
            Some(last) if event.index < last => false,
            Some(last) if event.index == last => {
                self.sent_at_last += 1;
                if self.sent_at_last <= self.delivered_at_last {
                    return false;
                }
                self.delivered_at_last += 1;
                true
            }
            _ => {
                self.last = Some(event.index);
                self.delivered_at_last = 1;
                self.sent_at_last = 1;
                true
            }
        }
    }
}

impl Client {
    /// The directory's changes after index `since` (live changes only without it), as a
    /// stream that reconnects to another node when its node goes away and resumes where it
    /// was, with no change missed or repeated. A `Reset` event means changes could not be
    /// replayed: list the directory again, then keep reading.
    ///
    /// ```no_run
    /// # async fn demo(client: rowcall_client::Client) -> Result<(), rowcall_client::Error> {
    /// use futures_util::StreamExt as _;
    /// let mut changes = client.watch(Some(0));
    /// while let Some(event) = changes.next().await {
    ///     let event = event?;
    ///     println!("index {}: {:?}", event.index, event.event);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn watch(&self, since: Option<u64>) -> Watch {
        Watch::new(self.clone(), since)
    }
}

impl Watch {
    pub(crate) fn new(client: Client, since: Option<u64>) -> Self {
        let position = Position {
            client,
            since,
            last: None,
            delivered_at_last: 0,
            sent_at_last: 0,
            stream: None,
            done: false,
        };
        let events = stream::unfold(position, |mut at| async move {
            if at.done {
                return None;
            }
            loop {
                let Some(stream) = at.stream.as_mut() else {
                    match at.client.open_watch(at.resume_from()).await {
                        Ok(response) => {
                            // A live-only watch starts at the index the node had applied.
                            if at.last.is_none() && at.since.is_none() {
                                at.last = response
                                    .metadata()
                                    .get(INDEX)
                                    .and_then(|v| v.to_str().ok())
                                    .and_then(|v| v.parse().ok());
                            }
                            at.sent_at_last = 0;
                            at.stream = Some(response.into_inner());
                        }
                        Err(e) => {
                            at.done = true;
                            return Some((Err(e), at));
                        }
                    }
                    continue;
                };
                match stream.message().await {
                    Ok(Some(event)) => {
                        if at.admit(&event) {
                            return Some((Ok(event), at));
                        }
                    }
                    // The node went away: read on from another.
                    Ok(None) | Err(_) => {
                        at.stream = None;
                        at.client.rotate();
                    }
                }
            }
        });
        Self {
            events: Box::pin(events),
        }
    }
}

impl Stream for Watch {
    type Item = Result<WatchEvent, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.events.as_mut().poll_next(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rowcall_proto::v1::{Change, Reset};

    fn change(index: u64, key: &str) -> WatchEvent {
        WatchEvent {
            index,
            event: Some(watch_event::Event::Change(Change {
                op: "put".into(),
                key: key.into(),
                projection: true,
                row: None,
            })),
        }
    }

    fn position() -> Position {
        Position {
            client: Client::connect(["127.0.0.1:1"]).unwrap(),
            since: Some(0),
            last: None,
            delivered_at_last: 0,
            sent_at_last: 0,
            stream: None,
            done: false,
        }
    }

    // A runtime, because a client (lazily connecting) is built inside one.
    #[tokio::test]
    async fn a_bulk_write_cut_in_the_middle_resumes_without_gaps_or_repeats() {
        let mut at = position();
        // Index 7 is a bulk write of three rows; the stream breaks after two.
        assert!(at.admit(&change(5, "A")));
        assert!(at.admit(&change(7, "B")));
        assert!(at.admit(&change(7, "C")));
        assert_eq!(at.resume_from(), Some(6));
        // The new node replays from index 6: 7 B, 7 C again, then 7 D, then 8.
        at.sent_at_last = 0;
        assert!(!at.admit(&change(7, "B")));
        assert!(!at.admit(&change(7, "C")));
        assert!(at.admit(&change(7, "D")));
        assert!(at.admit(&change(8, "E")));
        assert!(!at.admit(&change(6, "old")));
        // A reset is passed on and moves the position.
        let reset = WatchEvent {
            index: 20,
            event: Some(watch_event::Event::Reset(Reset {})),
        };
        assert!(at.admit(&reset));
        assert_eq!(at.resume_from(), Some(20));
    }
}
