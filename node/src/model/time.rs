//! The clock as rowcall records it: milliseconds since the epoch, shown as RFC 3339 (UTC).
//! Only proposers read the clock; apply takes the times carried in the entry.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

/// Milliseconds since the epoch, now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
