//! When to hedge a write: soon after it has taken longer than writes of this session
//! usually take, never later than the configured ceiling.
//!
//! A write that a healthy cluster answers in 5 ms and that has waited 50 ms is not slow
//! because the cluster is loaded; it is stuck on a leader that was paused, cut off or
//! lost its answer. Sending it again through another node then (with the same
//! idempotency key, so it applies once) costs one duplicate message, while waiting out a
//! fixed delay costs the caller that whole delay at every leader failure. The delay is a
//! multiple of a high quantile of the latest answered writes:
//!
//! ```text
//!   delay = clamp(FACTOR × p90(last WINDOW answered writes), FLOOR, ceiling)
//!           the ceiling (`write_hedge_after`) until MIN_SAMPLES writes were answered
//! ```
//!
//! so a steady cluster hedges only its slowest few writes, and a cluster whose writes all
//! slow down (a loaded machine, a far region) raises the delay with them.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

/// Answered writes the delay is drawn from.
const WINDOW: usize = 64;
/// Answered writes needed before the delay follows them.
const MIN_SAMPLES: usize = 4;
/// The quantile of those latencies…
const QUANTILE: f64 = 0.9;
/// …and the multiple of it after which a write is hedged.
const FACTOR: u32 = 3;
/// Never sooner than this: below it a hedge would mostly duplicate healthy writes.
const FLOOR: Duration = Duration::from_millis(25);

/// The latencies of a session's latest answered writes.
#[derive(Debug, Default)]
pub(crate) struct WriteLatencies {
    recent: Mutex<VecDeque<Duration>>,
}

impl WriteLatencies {
    /// A write was answered after `latency`.
    pub(crate) fn record(&self, latency: Duration) {
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        if recent.len() == WINDOW {
            recent.pop_front();
        }
        recent.push_back(latency);
    }

    /// How long a write waits for its answer before it is also sent elsewhere.
    pub(crate) fn hedge_after(&self, ceiling: Duration) -> Duration {
        let mut sorted: Vec<Duration> = {
            let recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
            if recent.len() < MIN_SAMPLES {
                return ceiling;
            }
            recent.iter().copied().collect()
        };
        sorted.sort_unstable();
        let at = ((sorted.len() - 1) as f64 * QUANTILE).round() as usize;
        (sorted[at] * FACTOR).clamp(FLOOR.min(ceiling), ceiling)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CEILING: Duration = Duration::from_millis(500);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_new_session_waits_the_ceiling_until_it_has_seen_enough_writes() {
        let latencies = WriteLatencies::default();
        assert_eq!(latencies.hedge_after(CEILING), CEILING);
        for _ in 0..MIN_SAMPLES - 1 {
            latencies.record(ms(10));
        }
        assert_eq!(latencies.hedge_after(CEILING), CEILING);
        latencies.record(ms(10));
        assert_eq!(latencies.hedge_after(CEILING), ms(30));
    }

    #[test]
    fn the_delay_follows_the_slow_tail_of_recent_writes_within_floor_and_ceiling() {
        let latencies = WriteLatencies::default();
        // 90 of 100 writes at 4 ms, the rest at 20 ms: p90 of the last 64 is 20 ms.
        for i in 0..100 {
            latencies.record(if i % 10 == 9 { ms(20) } else { ms(4) });
        }
        assert_eq!(latencies.hedge_after(CEILING), ms(60));
        // Fast writes: never below the floor.
        for _ in 0..WINDOW {
            latencies.record(Duration::from_micros(500));
        }
        assert_eq!(latencies.hedge_after(CEILING), FLOOR);
        // Slow writes everywhere: never above the ceiling.
        for _ in 0..WINDOW {
            latencies.record(ms(400));
        }
        assert_eq!(latencies.hedge_after(CEILING), CEILING);
        // A ceiling under the floor wins.
        assert_eq!(latencies.hedge_after(ms(10)), ms(10));
    }

    #[test]
    fn only_the_latest_writes_count() {
        let latencies = WriteLatencies::default();
        for _ in 0..WINDOW {
            latencies.record(ms(100));
        }
        for _ in 0..WINDOW {
            latencies.record(ms(10));
        }
        assert_eq!(latencies.hedge_after(CEILING), ms(30));
    }
}
