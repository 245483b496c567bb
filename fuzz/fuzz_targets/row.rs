//! Row validation: any JSON body of `POST /api/directory` decodes or is refused, and a row
//! that decodes is validated without panicking; a valid row's key follows the key rule.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rowcall_node::catalogue::row::RowInput;
use rowcall_node::dispatch::builtins::BUILTINS;

fuzz_target!(|data: &[u8]| {
    let Ok(row) = serde_json::from_slice::<RowInput>(data) else {
        return;
    };
    if row.validate(&BUILTINS).is_ok() {
        let key = row.key.as_bytes();
        assert!(!key.is_empty() && key.len() <= 64);
        assert!(key[0].is_ascii_uppercase() || key[0] == b'_');
        assert!(key
            .iter()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_'));
    }
});
