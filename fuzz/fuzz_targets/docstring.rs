//! The docstring parser: any content, as a row's `content` and as the resolver reads it,
//! parses without panicking, and what it returns is made of the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rowcall_node::catalogue::resolver::parse_docstring;
use rowcall_node::catalogue::row::Docstring;

fuzz_target!(|content: &str| {
    let docs = Docstring::parse(content);
    let what = docs.what();
    assert!(what.len() <= content.len());
    assert!(docs.payload.len() <= content.len());
    for (_, value) in &docs.fields {
        assert!(value.len() <= content.len());
    }
    let (what, rest) = parse_docstring(content);
    assert!(what.len() + rest.len() <= content.len() * 2 + 2);
});
