//! Clicks: an ask followed, within [`WINDOW`], by an invocation of one of its candidates by
//! the same caller (the same credential name, or `public`). The invocation's receipt then
//! carries the ask (`Receipt::asked`), and every node, applying the receipt, teaches the
//! resolver that the ask's words lead to that row ([`crate::catalogue::Catalogue::learn`]).
//! Learning thus replicates through the receipts that exist anyway: an ask writes nothing.
//!
//! Asks are remembered here, on the node that answered them, in memory only: an agent
//! usually asks and invokes through the same node; a click whose invocation lands on
//! another node is simply not counted.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long after an ask an invocation of one of its candidates counts as a click.
pub const WINDOW: Duration = Duration::from_secs(120);
/// Asks remembered per caller.
const PER_CALLER: usize = 4;
/// Callers remembered; past this, callers whose asks are all older than the window go.
const CALLERS: usize = 10_000;

struct Asked {
    at: Instant,
    ask: String,
    candidates: Vec<String>,
}

/// Recent asks by caller.
#[derive(Default)]
pub struct RecentAsks {
    callers: Mutex<HashMap<String, VecDeque<Asked>>>,
}

impl std::fmt::Debug for RecentAsks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecentAsks").finish_non_exhaustive()
    }
}

impl RecentAsks {
    /// Remembers that `caller` asked `ask` and was offered `candidates`.
    pub fn asked<'a>(&self, caller: &str, ask: &str, candidates: impl Iterator<Item = &'a str>) {
        let candidates: Vec<String> = candidates.map(str::to_owned).collect();
        if candidates.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut callers = self.callers.lock().unwrap_or_else(|p| p.into_inner());
        if callers.len() >= CALLERS && !callers.contains_key(caller) {
            callers.retain(|_, asks| asks.back().is_some_and(|a| now - a.at < WINDOW));
            if callers.len() >= CALLERS {
                return;
            }
        }
        let asks = callers.entry(caller.to_owned()).or_default();
        if asks.len() == PER_CALLER {
            asks.pop_front();
        }
        asks.push_back(Asked {
            at: now,
            ask: ask.to_owned(),
            candidates,
        });
    }

    /// The latest ask by `caller` within the window that offered `key`, if any. Each ask
    /// counts once per row: a second invocation of the same row is not another click.
    pub fn led_to(&self, caller: &str, key: &str) -> Option<String> {
        let now = Instant::now();
        let mut callers = self.callers.lock().unwrap_or_else(|p| p.into_inner());
        let asks = callers.get_mut(caller)?;
        let asked = asks
            .iter_mut()
            .rev()
            .take_while(|a| now - a.at < WINDOW)
            .find(|a| a.candidates.iter().any(|c| c == key))?;
        asked.candidates.retain(|c| c != key);
        Some(asked.ask.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invocation_of_a_candidate_by_the_asker_is_one_click() {
        let asks = RecentAsks::default();
        asks.asked(
            "ci",
            "track my parcel",
            ["PARCEL_TRACK", "ORDER_STATUS"].into_iter(),
        );
        assert_eq!(asks.led_to("other", "PARCEL_TRACK"), None, "another caller");
        assert_eq!(asks.led_to("ci", "WEATHER_NOW"), None, "not a candidate");
        assert_eq!(
            asks.led_to("ci", "PARCEL_TRACK").as_deref(),
            Some("track my parcel")
        );
        assert_eq!(asks.led_to("ci", "PARCEL_TRACK"), None, "counted once");
        assert_eq!(
            asks.led_to("ci", "ORDER_STATUS").as_deref(),
            Some("track my parcel")
        );
    }

    #[test]
    fn the_latest_ask_wins_and_old_asks_are_dropped() {
        let asks = RecentAsks::default();
        for i in 0..6 {
            asks.asked("ci", &format!("ask {i}"), ["A"].into_iter());
        }
        assert_eq!(asks.led_to("ci", "A").as_deref(), Some("ask 5"));
        assert_eq!(asks.led_to("ci", "A").as_deref(), Some("ask 4"));
        let kept = asks.callers.lock().unwrap()["ci"].len();
        assert_eq!(kept, PER_CALLER);
    }
}
