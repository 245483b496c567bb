//! One TCP proxy per directed link i→j: node i dials peer j's gRPC address through it
//! (`--peer-route`), so the harness can hold, delay, slow or refuse that link without
//! privileges.
//!
//! A gRPC connection from i to j carries i's requests *and* j's answers, so each link has
//! two byte flows: `requests` (i→j) and `responses` (j→i on i's connection). Holding only
//! `responses` is one-way loss at the message level: j receives and applies, i never hears.
//! Holding every link out of i is a one-way partition: i cannot reach anyone, everyone can
//! still reach i.
//!
//! TCP never loses bytes, so faults are what TCP would show: a held flow stops moving (a
//! blackhole; bytes are delivered if it heals, as retransmission would), a lossy flow
//! stalls a chunk now and then for a retransmission timeout, a refused link closes its
//! connections and accepts no new ones.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::error::ChaosError;
use crate::rng::Rng;

/// How long a "lost" chunk waits: Linux's minimum TCP retransmission timeout.
const RETRANSMIT: Duration = Duration::from_millis(200);
/// Chunks queued per flow before the reader stops reading (backpressure).
const QUEUE: usize = 64;

/// What happens to the bytes of one direction of a link.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Flow {
    /// Nothing moves until this is cleared (a blackhole).
    pub hold: bool,
    /// Added one-way delay.
    pub delay_ms: u32,
    /// Up to this much more delay, uniformly, per chunk (order is kept).
    pub jitter_ms: u32,
    /// Probability that a chunk is "lost" and retransmitted after [`RETRANSMIT`].
    pub loss: f64,
}

impl Flow {
    /// A blackhole.
    pub fn held() -> Self {
        Self {
            hold: true,
            ..Self::default()
        }
    }
}

/// The state of one directed link.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct LinkState {
    /// Bytes from the dialing node to the peer.
    pub requests: Flow,
    /// Bytes from the peer back to the dialing node.
    pub responses: Flow,
    /// Close every connection and accept none (connection refused).
    pub refuse: bool,
}

impl LinkState {
    /// Everything passes untouched.
    pub fn pass() -> Self {
        Self::default()
    }

    /// Nothing passes either way (both flows held).
    pub fn blackhole() -> Self {
        Self {
            requests: Flow::held(),
            responses: Flow::held(),
            refuse: false,
        }
    }

    /// The same shaping both ways.
    pub fn shaped(flow: Flow) -> Self {
        Self {
            requests: flow,
            responses: flow,
            refuse: false,
        }
    }

    /// Whether this is the untouched state.
    pub fn is_pass(&self) -> bool {
        *self == Self::pass()
    }
}

/// Which flow of a link a pump moves.
#[derive(Debug, Clone, Copy)]
enum Direction {
    Requests,
    Responses,
}

impl Direction {
    fn flow(self, state: &Control) -> Flow {
        match self {
            Self::Requests => state.link.requests,
            Self::Responses => state.link.responses,
        }
    }
}

/// The link state plus the proxy's own shutdown.
#[derive(Debug, Clone, Copy, Default)]
struct Control {
    link: LinkState,
    closed: bool,
}

impl Control {
    fn cut(&self) -> bool {
        self.closed || self.link.refuse
    }
}

/// A proxy for the directed link `from → to`, listening on `addr`.
#[derive(Debug)]
pub struct Link {
    /// The dialing node.
    pub from: u64,
    /// The peer it dials.
    pub to: u64,
    /// Where the dialing node connects (its `--peer-route` target).
    pub addr: SocketAddr,
    control: watch::Sender<Control>,
    /// Flows of live connections stopped by a hold right now.
    held: Arc<AtomicUsize>,
    accept: JoinHandle<()>,
}

impl Link {
    /// Binds a proxy on a free loopback port that forwards to `upstream`.
    pub async fn bind(
        from: u64,
        to: u64,
        upstream: SocketAddr,
        seed: u64,
    ) -> Result<Link, ChaosError> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| ChaosError::io(format!("bind proxy {from}->{to}"), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| ChaosError::io("proxy address", e))?;
        let (control, _) = watch::channel(Control::default());
        let held = Arc::new(AtomicUsize::new(0));
        let accept = tokio::spawn(accept_loop(
            listener,
            upstream,
            control.clone(),
            held.clone(),
            Rng::new(seed ^ (from << 32) ^ to),
        ));
        Ok(Link {
            from,
            to,
            addr,
            control,
            held,
            accept,
        })
    }

    /// Changes what the link does, for live connections too.
    pub fn set(&self, link: LinkState) {
        self.control.send_modify(|c| c.link = link);
    }

    /// What the link does now.
    pub fn state(&self) -> LinkState {
        self.control.borrow().link
    }

    /// How many flows of live connections a hold has stopped right now: once a held flow
    /// counts here, no byte of it moves until the hold is lifted.
    pub fn held_flows(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.control.send_modify(|c| c.closed = true);
        self.accept.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    control: watch::Sender<Control>,
    held: Arc<AtomicUsize>,
    mut rng: Rng,
) {
    loop {
        let Ok((down, _)) = listener.accept().await else {
            // Out of descriptors or similar: do not spin.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        if control.borrow().cut() {
            drop(down);
            continue;
        }
        let seed = rng.next_u64();
        tokio::spawn(connection(
            down,
            upstream,
            control.subscribe(),
            held.clone(),
            seed,
        ));
    }
}

async fn connection(
    down: TcpStream,
    upstream: SocketAddr,
    control: watch::Receiver<Control>,
    held: Arc<AtomicUsize>,
    seed: u64,
) {
    // A dead peer refuses the upstream connection: close ours too, as the peer would.
    let up = match tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(upstream)).await
    {
        Ok(Ok(up)) => up,
        _ => return,
    };
    let _ = down.set_nodelay(true);
    let _ = up.set_nodelay(true);
    let (down_read, down_write) = down.into_split();
    let (up_read, up_write) = up.into_split();
    let mut rng = Rng::new(seed);
    tokio::join!(
        pump(
            down_read,
            up_write,
            control.clone(),
            &held,
            Direction::Requests,
            rng.fork(1)
        ),
        pump(
            up_read,
            down_write,
            control,
            &held,
            Direction::Responses,
            rng.fork(2)
        ),
    );
}

/// Waits while the flow is held, counted in `held` meanwhile. False when the link is cut
/// or the proxy closed.
async fn wait_flowing(
    control: &mut watch::Receiver<Control>,
    held: &AtomicUsize,
    direction: Direction,
) -> bool {
    let mut counted = false;
    let flowing = loop {
        let state = *control.borrow_and_update();
        if state.cut() {
            break false;
        }
        if !direction.flow(&state).hold {
            break true;
        }
        if !counted {
            counted = true;
            held.fetch_add(1, Ordering::SeqCst);
        }
        if control.changed().await.is_err() {
            break false;
        }
    };
    if counted {
        held.fetch_sub(1, Ordering::SeqCst);
    }
    flowing
}

/// Moves one flow: a reader stamps each chunk with its delivery time, a writer delivers
/// in order at that time. Either ends the flow when the link is cut.
async fn pump(
    mut source: OwnedReadHalf,
    mut sink: OwnedWriteHalf,
    mut control: watch::Receiver<Control>,
    held: &AtomicUsize,
    direction: Direction,
    mut rng: Rng,
) {
    let (queue, mut queued) = mpsc::channel::<(Instant, Vec<u8>)>(QUEUE);
    let mut writer_control = control.clone();
    let writer = async move {
        while let Some((at, bytes)) = queued.recv().await {
            tokio::time::sleep_until(at).await;
            if !wait_flowing(&mut writer_control, held, direction).await {
                return;
            }
            if sink.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = sink.shutdown().await;
    };
    let reader = async move {
        let mut buf = vec![0u8; 32 * 1024];
        let mut last = Instant::now();
        loop {
            if !wait_flowing(&mut control, held, direction).await {
                return;
            }
            let n = tokio::select! {
                read = source.read(&mut buf) => match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                },
                changed = control.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    continue;
                }
            };
            let flow = direction.flow(&control.borrow());
            let mut delay = Duration::from_millis(u64::from(flow.delay_ms));
            if flow.jitter_ms > 0 {
                delay += Duration::from_millis(rng.below(u64::from(flow.jitter_ms) + 1));
            }
            if flow.loss > 0.0 && rng.chance(flow.loss) {
                delay += RETRANSMIT;
            }
            // Keep order: a chunk never overtakes the one before it.
            let at = (Instant::now() + delay).max(last);
            last = at;
            if queue.send((at, buf[..n].to_vec())).await.is_err() {
                return;
            }
        }
    };
    tokio::join!(reader, writer);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server that reports each reply it has written.
    async fn echo_server() -> (SocketAddr, mpsc::UnboundedReceiver<usize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (replied, replies) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let replied = replied.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                        let _ = replied.send(n);
                    }
                });
            }
        });
        (addr, replies)
    }

    /// Failure bound of every wait below (not a timing assertion).
    const WITHIN: Duration = Duration::from_secs(5);

    async fn read_ping(stream: &mut TcpStream) -> [u8; 4] {
        let mut buf = [0u8; 4];
        tokio::time::timeout(WITHIN, stream.read_exact(&mut buf))
            .await
            .expect("the reply arrives")
            .unwrap();
        buf
    }

    /// Polls (bounded) until `done` holds.
    async fn until(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + WITHIN;
        while !done() {
            assert!(Instant::now() < deadline, "never: {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_held_link_delivers_nothing_until_healed_and_a_refused_one_closes() {
        let (upstream, mut replies) = echo_server().await;
        let link = Link::bind(1, 2, upstream, 7).await.unwrap();
        let mut stream = TcpStream::connect(link.addr).await.unwrap();
        stream.write_all(b"ping").await.unwrap();
        assert_eq!(&read_ping(&mut stream).await, b"ping");
        assert_eq!(replies.recv().await, Some(4));

        // Only the answers are held. Once the answer flow has stopped, the request still
        // reaches the server, which replies, and not a byte of the reply gets through: the
        // only reader of the server's side is the stopped flow.
        link.set(LinkState {
            responses: Flow::held(),
            ..LinkState::pass()
        });
        until("the answer flow stops", || link.held_flows() == 1).await;
        stream.write_all(b"ping").await.unwrap();
        let replied = tokio::time::timeout(WITHIN, replies.recv()).await;
        assert_eq!(replied.expect("the request got through"), Some(4));
        let mut buf = [0u8; 4];
        let read = stream.try_read(&mut buf);
        assert!(
            matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "{read:?}"
        );
        // Healed: the held reply arrives (TCP retransmits; nothing is lost).
        link.set(LinkState::pass());
        assert_eq!(&read_ping(&mut stream).await, b"ping");
        until("no flow is held", || link.held_flows() == 0).await;

        link.set(LinkState {
            refuse: true,
            ..LinkState::pass()
        });
        let mut buf = [0u8; 4];
        let read = tokio::time::timeout(WITHIN, stream.read(&mut buf))
            .await
            .unwrap();
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    }
}
