//! MCP session ids: minted by rowcall with the owner's tag at their end, and recognised by
//! the endpoint (mode) that issued them.

use rmcp::transport::streamable_http_server::session::SessionId;

use super::Mode;
use crate::auth::OWNER_TAG_BYTES;

/// Hex characters of the random part of a session id.
const RANDOM_HEX: usize = 32;
/// Hex characters of the owner tag at its end.
const TAG_HEX: usize = 2 * OWNER_TAG_BYTES;

fn prefix(mode: Mode) -> &'static str {
    match mode {
        Mode::Rows => "rowcall-rows-",
        Mode::Compact => "rowcall-compact-",
    }
}

/// A fresh session id of `mode` owned by the principal whose tag is `owner`.
pub(crate) fn mint(mode: Mode, owner: &str) -> SessionId {
    let bytes: [u8; RANDOM_HEX / 2] = rand::random();
    format!("{}{}{owner}", prefix(mode), hex::encode(bytes)).into()
}

/// Whether `id` is a session id this mode's endpoint issues.
pub fn well_formed(mode: Mode, id: &str) -> bool {
    id.strip_prefix(prefix(mode)).is_some_and(|rest| {
        rest.len() == RANDOM_HEX + TAG_HEX
            && rest
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// The owner tag of session `id`, if it is a session id of either endpoint.
pub fn owner(id: &str) -> Option<&str> {
    [Mode::Rows, Mode::Compact]
        .into_iter()
        .any(|mode| well_formed(mode, id))
        .then(|| &id[id.len() - TAG_HEX..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_recognised_by_their_own_mode_only_and_name_their_owner() {
        let tag = "0123456789abcdef";
        let id = mint(Mode::Rows, tag);
        assert!(well_formed(Mode::Rows, &id));
        assert!(!well_formed(Mode::Compact, &id));
        assert_eq!(owner(&id), Some(tag));
        let compact = mint(Mode::Compact, tag);
        assert!(well_formed(Mode::Compact, &compact));
        assert_eq!(owner(&compact), Some(tag));
        assert_eq!(owner("rowcall-rows-0123"), None);
        assert!(!well_formed(Mode::Rows, "rowcall-rows-XYZ"));
        assert!(!well_formed(Mode::Rows, "0f9c3b1e-uuid"));
    }
}
