//! Property tests (proptest) of what every write and every ask relies on: row validation
//! never panics and accepts only rows that follow DESIGN §2.1; the resolver never panics on
//! any catalogue or query, and its answer is sorted, free of duplicates, within the limit,
//! and never names a disabled or hidden row.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::row::{Auth, Risk, Row, RowInput, RowType, MAX_CATEGORY_LEN, MAX_CONTENT_BYTES};
use super::Catalogue;
use crate::dispatch::builtins::BUILTINS;

/// Words the generated rows and queries share, so that asks actually match.
const WORDS: [&str; 16] = [
    "time", "weather", "issue", "create", "github", "echo", "zone", "now", "deploy", "invoice",
    "pay", "search", "docs", "the", "is", "what",
];

fn words() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            prop::sample::select(WORDS.to_vec()).prop_map(str::to_owned),
            "[a-zé0-9]{1,8}",
        ],
        0..12,
    )
    .prop_map(|w| w.join(" "))
}

fn schema() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        Just(None),
        Just(Some(json!({"type": "object"}))),
        Just(Some(
            json!({"type": "object", "properties": {"n": {"type": "integer"}}})
        )),
        Just(Some(json!({"type": 7}))),
        Just(Some(json!("not a schema"))),
        Just(Some(json!({"$ref": "#/nowhere"}))),
    ]
}

prop_compose! {
    fn row_input()(
        key in prop_oneof!["[A-Z_][A-Z0-9_]{0,70}", ".{0,80}"],
        kind in prop::sample::select(vec![RowType::Http, RowType::Mcp, RowType::Static, RowType::Builtin]),
        target in prop_oneof![
            Just(String::new()),
            prop::sample::select(BUILTINS.to_vec()).prop_map(str::to_owned),
            "(GET|POST|PUT|FETCH) https?://[a-z{}.]{1,20}/[a-z{}/?=&]{0,20}",
            "https?://[a-z.]{1,20}/mcp#[a-z_]{0,10}",
            ".{0,40}",
        ],
        category in ".{0,70}",
        content in prop_oneof!["(# (WHAT|ARGS|RISK): [a-z ]{0,30}\n){0,4}.{0,200}", ".{0,300}"],
        args_schema in schema(),
        pins in prop::collection::vec(".{0,30}", 0..4),
    ) -> RowInput {
        RowInput {
            key, kind, target, category, content, args_schema, pins,
            auth: Auth::Public, risk: Risk::Read, enabled: true, planner_visible: true,
            demote: false, if_version: None, ..serde_json::from_value(json!({"key": "K", "type": "static"})).unwrap()
        }
    }
}

fn key_rule(key: &str) -> bool {
    let bytes = key.as_bytes();
    (1..=64).contains(&bytes.len())
        && (bytes[0].is_ascii_uppercase() || bytes[0] == b'_')
        && bytes
            .iter()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_')
}

prop_compose! {
    fn stored_row()(
        index in 0u32..1000,
        text in words(),
        category in prop::sample::select(vec!["", "time", "code", "money"]),
        enabled in prop::bool::weighted(0.8),
        planner_visible in prop::bool::weighted(0.8),
        demote in prop::bool::weighted(0.1),
        pins in prop::collection::vec(words(), 0..2),
    ) -> Row {
        Row {
            category: category.to_owned(),
            enabled,
            planner_visible,
            demote,
            pins: pins.into_iter().filter(|p| !p.trim().is_empty()).collect(),
            ..Row::fixture(&format!("ROW_{index}"), RowType::Static, &format!("# WHAT: {text}\n"))
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn validation_never_panics_and_accepts_only_rows_within_the_rules(row in row_input()) {
        if row.validate(&BUILTINS).is_ok() {
            prop_assert!(key_rule(&row.key), "accepted key {:?}", row.key);
            prop_assert!(row.category.len() <= MAX_CATEGORY_LEN);
            prop_assert!(row.content.len() <= MAX_CONTENT_BYTES);
            if row.kind == RowType::Builtin {
                prop_assert!(BUILTINS.contains(&row.target.trim()));
            }
        }
    }

    #[test]
    fn asks_are_sorted_distinct_bounded_and_suggest_only_suggestible_rows(
        rows in prop::collection::vec(stored_row(), 0..40),
        query in prop_oneof![words(), ".{0,100}"],
        limit in 1usize..20,
    ) {
        let mut catalogue = Catalogue::default();
        for row in rows {
            catalogue.put(row);
        }
        let hits = catalogue.ask(&query, limit);
        prop_assert!(hits.len() <= limit);
        let mut seen = std::collections::HashSet::new();
        for pair in hits.windows(2) {
            prop_assert!(pair[0].0.score >= pair[1].0.score, "not sorted: {:?}", query);
        }
        for (hit, row) in &hits {
            prop_assert!(hit.score.is_finite());
            prop_assert!(seen.insert(row.key.clone()), "{} twice", row.key);
            prop_assert!(row.enabled && row.planner_visible, "{} is not suggestible", row.key);
        }
    }
}
