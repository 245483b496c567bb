//! The clock as rowcall records it: milliseconds since the epoch, shown as RFC 3339 (UTC).
//! Only proposers read the clock; apply takes the times carried in the entry.
//!
//! Every read of the time of day goes through [`now_ms`], so the test-only clock offset
//! ([`set_test_offset`], `[testing] clock_offset_ms` / `ROWCALL_TEST_CLOCK_OFFSET_MS`) moves
//! all of them at once: it plays a node whose clock jumped, for tests and the chaos harness.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

/// Milliseconds since the epoch, now, by this node's clock (shifted by the test offset).
pub fn now_ms() -> u64 {
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(MAX_MS))
        .unwrap_or(0);
    shifted(wall, test_offset_ms())
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
