//! The query analyser and ranker: any ask against the demo catalogue ranks without
//! panicking; candidates are distinct, in score order, finite, and never disabled or hidden.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use rowcall_node::catalogue::row::Row;
use rowcall_node::catalogue::Catalogue;

fn catalogue() -> &'static Catalogue {
    static CATALOGUE: OnceLock<Catalogue> = OnceLock::new();
    CATALOGUE.get_or_init(|| {
        let mut catalogue = Catalogue::default();
        for (i, input) in rowcall_node::catalogue::demo::rows().into_iter().enumerate() {
            let mut value = serde_json::to_value(&input).unwrap();
            let fields = value.as_object_mut().unwrap();
            fields.remove("if_version");
            fields.insert("version".into(), (i as u64 + 1).into());
            fields.insert("created_at".into(), "".into());
            fields.insert("updated_at".into(), "".into());
            // Every third row disabled or hidden: they must never be suggested.
            match i % 3 {
                1 => fields.insert("enabled".into(), false.into()),
                2 => fields.insert("planner_visible".into(), false.into()),
                _ => None,
            };
            catalogue.put(serde_json::from_value::<Row>(value).unwrap());
        }
        catalogue
    })
}

fuzz_target!(|ask: &str| {
    let hits = catalogue().ask(ask, 50);
    let mut seen = std::collections::HashSet::new();
    let mut last = f32::INFINITY;
    for (hit, row) in &hits {
        assert!(hit.score.is_finite(), "{ask:?}: score {}", hit.score);
        assert!(hit.score <= last, "{ask:?}: not in score order");
        last = hit.score;
        assert!(seen.insert(row.key.clone()), "{ask:?}: {} twice", row.key);
        assert!(row.suggestible(), "{ask:?}: {} is not suggestible", row.key);
    }
});
