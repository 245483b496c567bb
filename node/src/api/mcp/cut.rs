//! Server-initiated disconnection of a POST stream (SEP-1699 "polling"): a tool handler may
//! end the SSE stream its own request is answered on while it keeps working; the client
//! reconnects with `GET` and `Last-Event-ID`, and the events the closed stream did not carry
//! — the response included — come from the event store (`replay`). A server uses it to keep
//! no connection open through a long call (proxies and load balancers cut idle ones).
//!
//! Every request's POST stream is [`Cuttable`], and its handler finds the matching
//! [`StreamCut`] in the request's extensions. Cutting ends the stream once the events
//! already sent into it are delivered (the priming event that carries the id to resume
//! from is sent before the handler runs), so nothing reaches the client twice or not at all.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use futures_util::Stream;
use tokio::sync::Notify;

/// The handle a request's handler holds to end its POST stream early.
#[derive(Debug, Clone, Default)]
pub struct StreamCut(Arc<Shared>);

#[derive(Debug, Default)]
struct Shared {
    requested: AtomicBool,
    /// Wakes the stream when a cut is requested.
    stream: AtomicWaker,
    /// Told once the stream has ended.
    ended: Notify,
}

impl StreamCut {
    /// Ends the stream after what was sent into it so far, and waits until it has ended (at
    /// most `bound`: a stream nobody reads any more ends only when it is dropped). Returns
    /// whether it ended within the bound; whatever the handler sends afterwards reaches the
    /// client only through a reconnection.
    pub async fn cut(&self, bound: Duration) -> bool {
        let ended = self.0.ended.notified();
        self.0.requested.store(true, Ordering::Release);
        self.0.stream.wake();
        tokio::time::timeout(bound, ended).await.is_ok()
    }
}

/// A POST stream that ends when its [`StreamCut`] asks, after the events already in it.
pub struct Cuttable<S> {
    inner: Pin<Box<S>>,
    cut: StreamCut,
    ended: bool,
}

impl<S> Cuttable<S> {
    /// `inner`, ended early by `cut`.
    pub fn new(inner: S, cut: StreamCut) -> Self {
        Self {
            inner: Box::pin(inner),
            cut,
            ended: false,
        }
    }
}

impl<S: Stream> Stream for Cuttable<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        if self.ended {
            return Poll::Ready(None);
        }
        // What is ready in the stream goes first: a cut never drops a sent event.
        if let Poll::Ready(item) = self.inner.as_mut().poll_next(cx) {
            if item.is_none() {
                self.ended = true;
            }
            return Poll::Ready(item);
        }
        self.cut.0.stream.register(cx.waker());
        if !self.cut.0.requested.load(Ordering::Acquire) {
            return Poll::Pending;
        }
        self.ended = true;
        self.cut.0.ended.notify_one();
        Poll::Ready(None)
    }
}

#[cfg(test)]
mod tests {
    use futures_util::stream::{self, StreamExt};
    use tokio::sync::mpsc;

    use super::*;

    fn receiver(mut rx: mpsc::Receiver<u32>) -> impl Stream<Item = u32> {
        stream::poll_fn(move |cx| rx.poll_recv(cx))
    }

    #[tokio::test]
    async fn a_cut_ends_the_stream_after_the_events_already_sent() {
        let (tx, rx) = mpsc::channel(8);
        let cut = StreamCut::default();
        let mut stream = Cuttable::new(receiver(rx), cut.clone());
        tx.send(1).await.unwrap();
        tx.send(2).await.unwrap();
        let reader = tokio::spawn(async move { stream.by_ref().collect::<Vec<_>>().await });
        assert!(cut.cut(Duration::from_secs(5)).await, "the stream ended");
        // Sent after the cut: not on this stream.
        let _ = tx.send(3).await;
        assert_eq!(reader.await.unwrap(), [1, 2]);
    }

    #[tokio::test]
    async fn an_uncut_stream_runs_to_its_end() {
        let (tx, rx) = mpsc::channel(8);
        let stream = Cuttable::new(receiver(rx), StreamCut::default());
        tx.send(1).await.unwrap();
        drop(tx);
        assert_eq!(stream.collect::<Vec<_>>().await, [1]);
    }
}
