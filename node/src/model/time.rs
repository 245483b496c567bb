//! The clock as rowcall records it: milliseconds since the epoch, shown as RFC 3339 (UTC).
//! Only proposers read the clock; apply takes the times carried in the entry.
//!
//! Every read of the time of day goes through [`now_ms`], so the test-only clock offset
//! ([`set_test_offset`], `[testing] clock_offset_ms` / `ROWCALL_TEST_CLOCK_OFFSET_MS`) moves
//! all of them at once: it plays a node whose clock jumped, for tests and the chaos harness.
//!
//! ## A clock checked against the other members'
//!
//! The times a node stamps (a write's `updated_at`, a receipt's `started_at`) go into the
//! log for good, so one node whose clock jumped ahead would pin them in the future. Each
//! node therefore compares its clock with its peers' ([`PeerClocks`]): every `Hello` a
//! member answers carries its wall clock, read between the asking node's send and receipt,
//! so the peer's time is known to within half the round trip (samples with a round trip
//! over [`MAX_SAMPLE_RTT_MS`] are not used). A sample is kept against this node's monotonic
//! clock and follows real time from there, so a later jump of this node's wall clock moves
//! its own reading only. The median of the members' times, this node's included, is where
//! a majority of clocks stand ([`PeerClocks::majority`]). What holds:
//!
//! - **Stamps.** [`now_ms`] is this node's clock, but never more than [`CLOCK_LEAD_MS`]
//!   ahead of the majority: a clock a day fast stamps at most that lead (plus half a round
//!   trip) ahead of the other members, from its first sample on. A clock behind is never
//!   moved forward, a minority of fast peers moves nothing, with one peer the median is
//!   this node's own clock (two clocks cannot outvote each other), and a node alone has
//!   nothing to check against.
//! - **The leader's hold.** Whatever a proposer stamped, the leader holds a write's time to
//!   the majority's time plus the lead ([`latest_stamp_ms`], applied in
//!   [`crate::app::App::propose`] through [`crate::raft::validate::hold_times`]) instead of
//!   refusing it: so the time of a write in the log is never later than a majority of
//!   clocks allowed when it was proposed, even from a proposer not yet checked.
//! - **Deletions** do not rest on any of this: retention takes its time from the log alone
//!   ([`crate::dispatch::retention`]).
//!
//! Samples come from the members' `Hello` answers: once before a restarted member serves
//! anything ([`crate::cluster::ranking::check_clock`]), then with every ranking round. Not
//! covered: a member that gets no answer at restart stamps by its own clock until one comes;
//! a receipt stamped then keeps its start (receipts are never changed) and, if that is
//! beyond the leader's [`crate::raft::validate::CLOCK_SKEW_MS`], is refused.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The test-only shift of this process's wall clock, in milliseconds (0: none).
static TEST_OFFSET_MS: AtomicI64 = AtomicI64::new(0);

/// Shifts every later [`now_ms`] of this process by `offset_ms` (positive: the clock is
/// fast). For tests and the chaos harness only; the node logs a warning when it is set.
pub fn set_test_offset(offset_ms: i64) {
    TEST_OFFSET_MS.store(offset_ms, Ordering::Relaxed);
}

/// The test-only shift in force (0: none).
pub fn test_offset_ms() -> i64 {
    TEST_OFFSET_MS.load(Ordering::Relaxed)
}

/// The last millisecond RFC 3339 can write (9999-12-31T23:59:59.999Z); later times a
/// proposer stamps are held at it.
pub const MAX_MS: u64 = 253_402_300_799_999;

/// RFC 3339 (UTC, milliseconds) of a time decided by a proposer. Never panics: times past
/// year 9999 are written as its last millisecond.
pub fn format_ms(at_ms: u64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(at_ms.min(MAX_MS));
    humantime::format_rfc3339_millis(at).to_string()
}

/// Milliseconds since the epoch of an RFC 3339 time written by [`format_ms`].
pub fn parse_ms(text: &str) -> Option<u64> {
    let at = humantime::parse_rfc3339_weak(text).ok()?;
    let ms = at.duration_since(UNIX_EPOCH).ok()?.as_millis();
    u64::try_from(ms).ok()
}

/// A time as a row carries it (`created_at`, `updated_at`): RFC 3339 text, held as its
/// milliseconds when the text is exactly what [`format_ms`] writes for them (every time a
/// node stamps), else as the text itself (a row restored from older or foreign data, kept
/// byte for byte). Eight bytes of milliseconds instead of a 24-character string's heap
/// block: at a million rows, about 60 bytes a row less for the two.
#[derive(Clone, PartialEq, Eq)]
pub enum Stamp {
    /// The time [`format_ms`] writes for these milliseconds.
    Ms(u64),
    /// Any other text, as it came.
    Text(Box<str>),
}

impl Stamp {
    /// The stamp for `ms` milliseconds since the epoch (clamped as [`format_ms`] clamps).
    pub fn from_ms(ms: u64) -> Stamp {
        Stamp::Ms(ms.min(MAX_MS))
    }

    /// Milliseconds since the epoch, if the text is a time [`parse_ms`] reads.
    pub fn ms(&self) -> Option<u64> {
        match self {
            Stamp::Ms(ms) => Some(*ms),
            Stamp::Text(text) => parse_ms(text),
        }
    }

    /// Bytes held on the heap.
    pub fn heap_bytes(&self) -> usize {
        match self {
            Stamp::Ms(_) => 0,
            Stamp::Text(text) => text.len(),
        }
    }
}

impl From<&str> for Stamp {
    fn from(text: &str) -> Stamp {
        match parse_ms(text) {
            Some(ms) if ms <= MAX_MS && format_ms(ms) == text => Stamp::Ms(ms),
            _ => Stamp::Text(text.into()),
        }
    }
}

impl From<String> for Stamp {
    fn from(text: String) -> Stamp {
        Stamp::from(text.as_str())
    }
}

impl std::fmt::Display for Stamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stamp::Ms(ms) => f.write_str(&format_ms(*ms)),
            Stamp::Text(text) => f.write_str(text),
        }
    }
}

impl std::fmt::Debug for Stamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.to_string())
    }
}

impl PartialEq<str> for Stamp {
    fn eq(&self, other: &str) -> bool {
        match self {
            Stamp::Ms(ms) => format_ms(*ms) == other,
            Stamp::Text(text) => &**text == other,
        }
    }
}

impl PartialEq<&str> for Stamp {
    fn eq(&self, other: &&str) -> bool {
        *self == **other
    }
}

impl PartialEq<String> for Stamp {
    fn eq(&self, other: &String) -> bool {
        *self == **other
    }
}

impl serde::Serialize for Stamp {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Stamp::Ms(ms) => serializer.serialize_str(&format_ms(*ms)),
            Stamp::Text(text) => serializer.serialize_str(text),
        }
    }
}

impl<'de> serde::Deserialize<'de> for Stamp {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Stamp, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Stamp;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an RFC 3339 time")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Stamp, E> {
                Ok(Stamp::from(text))
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

/// How far ahead of the majority of members' clocks this node's clock may stamp.
pub const CLOCK_LEAD_MS: i64 = 2_000;
/// A peer's clock read over a round trip longer than this is not used.
pub const MAX_SAMPLE_RTT_MS: u64 = 500;
/// A peer's sample older than this no longer counts (a member gone, or not answering).
const SAMPLE_TTL: Duration = Duration::from_secs(600);

/// This process's samples of its peers' clocks.
static PEERS: Mutex<PeerClocks> = Mutex::new(PeerClocks::new());

/// Milliseconds since the epoch, now: this node's clock (shifted by the test offset),
/// held back when it runs ahead of the other members' (see the module documentation).
pub fn now_ms() -> u64 {
    let raw = raw_now_ms();
    let peers = PEERS.lock().unwrap_or_else(|p| p.into_inner());
    peers.checked(raw, Instant::now())
}

/// This node's clock as it reads (shifted by the test offset), unchecked: what it tells
/// peers, and what their clocks are compared with.
pub fn raw_now_ms() -> u64 {
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(MAX_MS))
        .unwrap_or(0);
    shifted(wall, test_offset_ms())
}

/// The latest time a write may carry: where the majority of members' clocks stand (this
/// node's, without samples) plus [`CLOCK_LEAD_MS`]. The leader holds every write's time to
/// it, whichever node stamped it.
pub fn latest_stamp_ms() -> u64 {
    let raw = raw_now_ms();
    let peers = PEERS.lock().unwrap_or_else(|p| p.into_inner());
    peers
        .majority(raw, Instant::now())
        .saturating_add(CLOCK_LEAD_MS.unsigned_abs())
        .min(MAX_MS)
}

/// Records peer `peer`'s clock `peer_ms`, read between `sent_ms` and `received_ms` of this
/// node's [`raw_now_ms`] (received just now).
pub fn observe_peer(peer: u64, sent_ms: u64, peer_ms: u64, received_ms: u64) {
    let now = Instant::now();
    let mut peers = PEERS.lock().unwrap_or_else(|p| p.into_inner());
    let ahead_before = peers.checked(received_ms, now) < received_ms;
    peers.observe(peer, sent_ms, peer_ms, received_ms, now);
    let checked = peers.checked(received_ms, now);
    if (checked < received_ms) != ahead_before {
        tracing::warn!(
            held_back_ms = received_ms - checked,
            "this node's clock is {} the majority of members' clocks: the times it stamps \
             are {}",
            if ahead_before {
                "back with"
            } else {
                "ahead of"
            },
            if ahead_before {
                "its own again"
            } else {
                "held back to theirs"
            }
        );
    }
}

/// Samples of the peers' clocks. Each is kept as the peer's time at a moment of this
/// node's monotonic clock, so it follows real time from there: a jump of this node's wall
/// clock after the sample moves this node's reading, not the peers' estimates.
#[derive(Debug, Default)]
pub struct PeerClocks {
    samples: BTreeMap<u64, (u64, Instant)>,
}

impl PeerClocks {
    /// No samples.
    pub const fn new() -> Self {
        Self {
            samples: BTreeMap::new(),
        }
    }

    /// Peer `peer` read `peer_ms` between this node's `sent_ms` and `received_ms`, the
    /// latter at `at`.
    pub fn observe(
        &mut self,
        peer: u64,
        sent_ms: u64,
        peer_ms: u64,
        received_ms: u64,
        at: Instant,
    ) {
        let Some(rtt) = received_ms.checked_sub(sent_ms) else {
            return;
        };
        if rtt > MAX_SAMPLE_RTT_MS || peer_ms == 0 {
            return;
        }
        // Read about half a round trip before it arrived.
        self.samples
            .insert(peer, (peer_ms.saturating_add(rtt / 2), at));
    }

    /// Where the majority of clocks stand at `now`, this node's reading `raw_ms` included:
    /// the upper median, so that with an even count the one nearer this node's own clock
    /// wins when it is ahead (two clocks cannot outvote each other).
    pub fn majority(&self, raw_ms: u64, now: Instant) -> u64 {
        let mut clocks: Vec<u64> = self
            .samples
            .values()
            .filter(|(_, at)| now.saturating_duration_since(*at) <= SAMPLE_TTL)
            .map(|(peer_ms, at)| {
                let since = now.saturating_duration_since(*at).as_millis();
                peer_ms.saturating_add(u64::try_from(since).unwrap_or(u64::MAX))
            })
            .collect();
        clocks.push(raw_ms);
        clocks.sort_unstable();
        clocks[clocks.len() / 2]
    }

    /// This node's reading `raw_ms` at `now`, held back to the majority plus
    /// [`CLOCK_LEAD_MS`] when it runs further ahead; never moved forward.
    pub fn checked(&self, raw_ms: u64, now: Instant) -> u64 {
        let latest = self
            .majority(raw_ms, now)
            .saturating_add(CLOCK_LEAD_MS.unsigned_abs());
        raw_ms.min(latest)
    }
}

/// `wall` moved by `offset_ms`, held between the epoch and [`MAX_MS`].
fn shifted(wall: u64, offset_ms: i64) -> u64 {
    let moved = if offset_ms >= 0 {
        wall.saturating_add(offset_ms.unsigned_abs())
    } else {
        wall.saturating_sub(offset_ms.unsigned_abs())
    };
    moved.min(MAX_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: u64 = 86_400_000;

    #[test]
    fn a_stamp_gives_back_its_text_byte_for_byte_and_holds_a_node_s_own_as_milliseconds() {
        let own = format_ms(1_764_000_000_123);
        let texts = [
            own.as_str(),
            // Not what format_ms writes (no milliseconds, an offset, nothing): kept as text.
            "2026-01-01T00:00:00Z",
            "2026-01-01T01:00:00.000+01:00",
            "",
            "not a time",
        ];
        for text in texts {
            let stamp = Stamp::from(text);
            assert_eq!(stamp.to_string(), text);
            assert_eq!(stamp, text);
            let json = serde_json::to_string(&stamp).unwrap();
            assert_eq!(json, serde_json::to_string(text).unwrap());
            let back: Stamp = serde_json::from_str(&json).unwrap();
            assert_eq!(back, stamp);
            assert_eq!(back.ms(), parse_ms(text));
        }
        assert_eq!(Stamp::from(own.as_str()), Stamp::Ms(1_764_000_000_123));
        assert_eq!(Stamp::from(own.as_str()).heap_bytes(), 0);
        assert_eq!(
            Stamp::from("2026-01-01T00:00:00Z"),
            Stamp::Text("2026-01-01T00:00:00Z".into())
        );
        assert_eq!(Stamp::from_ms(u64::MAX), format_ms(u64::MAX));
        assert_eq!(Stamp::from_ms(u64::MAX).ms(), Some(MAX_MS));
        assert!(
            serde_json::from_str::<Stamp>("17").is_err(),
            "a number is not a time"
        );
    }

    #[test]
    fn a_clock_a_day_ahead_of_the_majority_is_held_back_to_it_and_no_other_is_moved() {
        let at = Instant::now();
        let me = 100 * DAY;
        let lead = CLOCK_LEAD_MS.unsigned_abs();
        // Two peers read a day behind this node: it is the one that is off.
        let mut peers = PeerClocks::new();
        peers.observe(2, me, me - DAY + 5, me + 10, at);
        peers.observe(3, me, me - DAY + 4, me + 8, at);
        let checked = peers.checked(me + 10, at);
        assert!(
            (me - DAY..=me - DAY + lead + 20).contains(&checked),
            "{checked}"
        );
        // ... also when this node's clock jumps later: the peers' times follow real time.
        let later = at + Duration::from_secs(60);
        let checked = peers.checked(me + 7 * DAY, later);
        assert!(
            (me - DAY + 60_000..=me - DAY + 60_000 + lead + 20).contains(&checked),
            "{checked}"
        );
        // One peer a day ahead of two that agree with this node: nothing moves, and the
        // latest time a write may carry is this node's.
        let mut peers = PeerClocks::new();
        peers.observe(2, me, me + DAY, me + 2, at);
        peers.observe(3, me, me + 1, me + 2, at);
        assert_eq!(peers.checked(me + 2, at), me + 2);
        assert!(peers.majority(me + 2, at) <= me + 3);
        // A slow node is not moved forward, but may let writes carry the majority's time.
        let mut peers = PeerClocks::new();
        peers.observe(2, me, me + DAY, me, at);
        peers.observe(3, me, me + DAY, me, at);
        assert_eq!(peers.checked(me, at), me);
        assert_eq!(peers.majority(me, at), me + DAY);
        // One peer only: two clocks cannot outvote each other.
        let mut peers = PeerClocks::new();
        peers.observe(2, me, me - DAY, me + 2, at);
        assert_eq!(peers.checked(me + 2, at), me + 2);
        // Ahead by less than the lead: left alone.
        let mut peers = PeerClocks::new();
        peers.observe(2, me, me - 1_000, me, at);
        peers.observe(3, me, me - 1_500, me, at);
        assert_eq!(peers.checked(me, at), me);
        // Samples over a slow round trip, or from a peer that does not say, are not used.
        let mut peers = PeerClocks::new();
        peers.observe(2, me, me - DAY, me + MAX_SAMPLE_RTT_MS + 1, at);
        peers.observe(3, me, 0, me + 1, at);
        assert_eq!(peers.checked(me + 1, at), me + 1);
        // Old samples stop counting.
        let mut peers = PeerClocks::new();
        peers.observe(2, me, me - DAY, me, at);
        peers.observe(3, me, me - DAY, me, at);
        assert!(peers.checked(me, at) < me);
        let expired = at + SAMPLE_TTL + Duration::from_secs(1);
        assert_eq!(peers.checked(me, expired), me);
    }

    #[test]
    fn the_test_offset_moves_the_clock_either_way_within_the_writable_range() {
        assert_eq!(shifted(1_000, 0), 1_000);
        assert_eq!(shifted(1_000, 86_400_000), 86_401_000);
        assert_eq!(shifted(1_000, -400), 600);
        assert_eq!(shifted(1_000, -5_000), 0, "never before the epoch");
        assert_eq!(
            shifted(MAX_MS - 1, i64::MAX),
            MAX_MS,
            "never past year 9999"
        );
        assert_eq!(shifted(0, i64::MIN), 0);
    }
}
