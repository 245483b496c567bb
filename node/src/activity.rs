//! What this node did over the last minutes: asks, invocations and replicated writes (with
//! their latency) per few seconds, kept in memory for the console's charts
//! (`GET /api/cluster/activity`), so an operator sees the node's load without Prometheus.
//!
//! Counted here, on this node only, beside the Prometheus counters of the same events
//! ([`crate::metrics`]): those are process-wide (in-process test clusters share them) and
//! hold totals, not a recent history. A slot is opened lazily by the first event that falls
//! in it; slots no event fell in read as zeros. Time is the monotonic clock, so a wall-clock
//! jump neither loses nor doubles a slot.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;
use utoipa::ToSchema;

/// The length of one slot.
pub const SLOT: Duration = Duration::from_secs(5);
/// Slots kept: ten minutes.
pub const SLOTS: usize = 120;

/// The node's recent activity.
pub struct Activity {
    started: Instant,
    slots: Mutex<VecDeque<Slot>>,
}

/// What happened within one slot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Slot {
    /// Slot number: whole [`SLOT`]s since the node started.
    number: u64,
    asks: u64,
    invocations: u64,
    writes: u64,
    write_micros: u64,
    write_micros_max: u64,
}

/// One interval of the history, as the console charts it.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct Interval {
    /// Seconds between the interval's end and now (0 for the interval under way).
    pub ended_ago_s: u64,
    /// Asks answered.
    pub asks: u64,
    /// Invocations run (whatever their outcome).
    pub invocations: u64,
    /// Replicated writes that completed here (rows, receipts, membership: every write this
    /// node took from a client or made itself, wherever the leader was).
    pub writes: u64,
    /// Their mean latency in milliseconds (none without writes).
    pub write_ms_mean: Option<f64>,
    /// The slowest of them in milliseconds.
    pub write_ms_max: Option<f64>,
}

/// The history, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct History {
    /// The length of each interval in seconds.
    pub interval_s: u64,
    /// Every interval of the last ten minutes (since the node started, if later), oldest
    /// first; the last one is under way.
    pub intervals: Vec<Interval>,
}

impl Default for Activity {
    fn default() -> Self {
        Self::new(Instant::now())
    }
}

impl Activity {
    /// A history that starts at `started`.
    pub fn new(started: Instant) -> Self {
        Self {
            started,
            slots: Mutex::new(VecDeque::with_capacity(SLOTS)),
        }
    }

    /// An ask was answered.
    pub fn ask(&self) {
        self.record(Instant::now(), |s| s.asks += 1);
    }

    /// An invocation ran.
    pub fn invocation(&self) {
        self.record(Instant::now(), |s| s.invocations += 1);
    }

    /// A replicated write completed after `took`.
    pub fn write(&self, took: Duration) {
        self.record_write(Instant::now(), took);
    }

    fn record_write(&self, at: Instant, took: Duration) {
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.record(at, |s| {
            s.writes += 1;
            s.write_micros = s.write_micros.saturating_add(micros);
            s.write_micros_max = s.write_micros_max.max(micros);
        });
    }

    fn number(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.started);
        (since.as_nanos() / SLOT.as_nanos()) as u64
    }

    fn record(&self, at: Instant, count: impl FnOnce(&mut Slot)) {
        let number = self.number(at);
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        // Events arrive in about time order; one that raced a newer slot's opening counts
        // in the newest (a few microseconds late), never in a slot already closed.
        if slots.back().is_none_or(|last| last.number < number) {
            if slots.len() == SLOTS {
                slots.pop_front();
            }
            slots.push_back(Slot {
                number,
                ..Slot::default()
            });
        }
        if let Some(last) = slots.back_mut() {
            count(last);
        }
    }

    /// The last [`SLOTS`] intervals up to now (fewer while the node is younger), oldest first.
    pub fn history(&self) -> History {
        self.history_at(Instant::now())
    }

    fn history_at(&self, now: Instant) -> History {
        let current = self.number(now);
        let first = current.saturating_sub(SLOTS as u64 - 1);
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let mut kept = slots.iter().filter(|s| s.number >= first).peekable();
        let slot_s = SLOT.as_secs();
        let intervals = (first..=current)
            .map(|number| {
                let slot = match kept.peek() {
                    Some(s) if s.number == number => kept.next().copied(),
                    _ => None,
                }
                .unwrap_or_default();
                let ms = |micros: u64| micros as f64 / 1000.0;
                Interval {
                    ended_ago_s: (current - number) * slot_s,
                    asks: slot.asks,
                    invocations: slot.invocations,
                    writes: slot.writes,
                    write_ms_mean: (slot.writes > 0)
                        .then(|| ms(slot.write_micros) / slot.writes as f64),
                    write_ms_max: (slot.writes > 0).then(|| ms(slot.write_micros_max)),
                }
            })
            .collect();
        History {
            interval_s: slot_s,
            intervals,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_land_in_the_interval_of_their_time_and_quiet_intervals_read_zero() {
        let start = Instant::now();
        let activity = Activity::new(start);
        activity.record(start, |s| s.asks += 1);
        activity.record(start + Duration::from_secs(1), |s| s.asks += 1);
        activity.record(start + Duration::from_secs(12), |s| s.invocations += 1);
        activity.record_write(start + Duration::from_secs(12), Duration::from_millis(3));
        activity.record_write(start + Duration::from_secs(13), Duration::from_millis(5));
        let history = activity.history_at(start + Duration::from_secs(14));
        assert_eq!(history.interval_s, 5);
        // Slots 0 (two asks), 1 (nothing) and 2 (under way): none before the node started.
        let n = history.intervals.len();
        assert_eq!(n, 3);
        let last3: Vec<_> = history.intervals[n - 3..].to_vec();
        assert_eq!(
            last3.iter().map(|i| i.ended_ago_s).collect::<Vec<_>>(),
            [10, 5, 0]
        );
        assert_eq!(
            last3
                .iter()
                .map(|i| (i.asks, i.invocations, i.writes))
                .collect::<Vec<_>>(),
            [(2, 0, 0), (0, 0, 0), (0, 1, 2)]
        );
        assert_eq!(last3[2].write_ms_mean, Some(4.0));
        assert_eq!(last3[2].write_ms_max, Some(5.0));
        // A quiet interval has no latency at all, not a latency of zero.
        assert_eq!(last3[1].write_ms_mean, None);
        assert_eq!(last3[1].write_ms_max, None);
    }

    #[test]
    fn only_the_last_ten_minutes_are_kept() {
        let start = Instant::now();
        let activity = Activity::new(start);
        for slot in 0..(SLOTS as u64 + 30) {
            activity.record(start + SLOT * slot as u32, |s| s.asks += slot + 1);
        }
        assert_eq!(activity.slots.lock().unwrap().len(), SLOTS);
        let now = start + SLOT * (SLOTS as u32 + 29);
        let history = activity.history_at(now);
        assert_eq!(history.intervals.len(), SLOTS);
        // The oldest shown is the slot ten minutes back; the newest is the one under way.
        assert_eq!(history.intervals[0].asks, 31);
        assert_eq!(history.intervals[0].ended_ago_s, (SLOTS as u64 - 1) * 5);
        assert_eq!(history.intervals[SLOTS - 1].asks, SLOTS as u64 + 30);
    }
}
