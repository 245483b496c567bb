//! Behaviour of the resolver as a caller sees it: which keys come back, in which order.

use super::*;

/// A row with a WHAT line only.
fn row(key: &str, category: &str, what: &str) -> (String, String, String) {
    (key.to_string(), category.to_string(), what.to_string())
}

fn build(rows: &[(String, String, String)]) -> Resolver {
    let mut r = Resolver::new();
    for (key, category, what) in rows {
        r.insert(&Document {
            key,
            category,
            what,
            doc: "",
            args: vec![],
            pins: &[],
            demote: false,
        })
        .unwrap();
    }
    r
}

fn keys(r: &Resolver, q: &str) -> Vec<String> {
    r.search(q, 10)
        .into_iter()
        .map(|h| h.key.to_string())
        .collect()
}

fn small_catalogue() -> Vec<(String, String, String)> {
    vec![
        row("TIME_NOW", "Utility", "Current time, date and zone"),
        row("NOW", "Utility", "Alias of TIME_NOW"),
        row(
            "GITHUB_ISSUE_LIST",
            "Developer",
            "List the issues of a GitHub repository",
        ),
        row(
            "GITHUB_ISSUE_CREATE",
            "Developer",
            "Open a new issue in a GitHub repository",
        ),
        row("WEATHER_FORECAST", "Weather", "Weather forecast for a city"),
        row(
            "SEARCH_WEB",
            "Discovery",
            "Search the web for pages matching a query",
        ),
        row(
            "SEND_EMAIL",
            "Communication",
            "Send an email message to a recipient",
        ),
        row(
            "CONVERT_CURRENCY",
            "Finance",
            "Convert an amount between currencies",
        ),
    ]
}

#[test]
fn what_time_is_it_answers_time_now_and_no_issue_row() {
    let r = build(&small_catalogue());
    let got = keys(&r, "what time is it");
    assert_eq!(got.first().map(String::as_str), Some("TIME_NOW"));
    assert!(got.iter().all(|k| !k.contains("ISSUE")), "{got:?}");
}

#[test]
fn only_stop_words_or_nothing_returns_nothing() {
    let r = build(&small_catalogue());
    assert!(r.search("is it the", 10).is_empty());
    assert!(r.search("", 10).is_empty());
    assert!(r.search("  ?! ", 10).is_empty());
}

#[test]
fn stemming_matches_inflections() {
    let r = build(&small_catalogue());
    assert_eq!(keys(&r, "searching")[0], "SEARCH_WEB");
    assert_eq!(keys(&r, "currencies converted")[0], "CONVERT_CURRENCY");
}

#[test]
fn chinese_query_finds_chinese_row() {
    let mut rows = small_catalogue();
    rows.push(row(
        "BING_SEARCH",
        "Discovery",
        "使用必应搜索指定的关键词，并返回搜索结果列表",
    ));
    rows.push(row(
        "FETCH_WEBPAGE",
        "Discovery",
        "根据提供的ID获取对应网页的内容",
    ));
    let r = build(&rows);
    assert_eq!(keys(&r, "获取网页内容")[0], "FETCH_WEBPAGE");
    assert_eq!(keys(&r, "必应搜索")[0], "BING_SEARCH");
}

#[test]
fn typos_are_tolerated() {
    let r = build(&small_catalogue());
    let hits = r.search("wether", 10);
    assert_eq!(hits[0].key.as_ref(), "WEATHER_FORECAST");
    assert_eq!(hits[0].matched, ["wether"]);
    // two edits for long words
    assert_eq!(keys(&r, "currenceis convertr")[0], "CONVERT_CURRENCY");
    // short words get no tolerance: "emal" is 4 letters, one edit is allowed, "ema" is not
    assert_eq!(keys(&r, "emal")[0], "SEND_EMAIL");
    assert!(r.search("ema", 10).is_empty());
}

#[test]
fn prefixes_complete_known_terms() {
    let r = build(&small_catalogue());
    assert_eq!(keys(&r, "forec")[0], "WEATHER_FORECAST");
    assert_eq!(
        keys(&r, "repos")[0..2]
            .iter()
            .filter(|k| k.contains("GITHUB"))
            .count(),
        2
    );
}

#[test]
fn exact_match_outranks_tolerant_match() {
    let r = build(&[
        row("TIDE_TABLE", "Sea", "Tide table"),
        row("TIDEWATER_MAP", "Sea", "Map of the tidewater"),
    ]);
    // "tide" is indexed, so no prefix alternative ("tidewater") is added at all.
    assert_eq!(keys(&r, "tide"), ["TIDE_TABLE"]);
    // an unknown word does get prefix completions
    assert_eq!(keys(&r, "tidewa"), ["TIDEWATER_MAP"]);
}

#[test]
fn built_in_synonyms_expand_the_query() {
    let r = build(&small_catalogue());
    assert_eq!(keys(&r, "mail a note")[0], "SEND_EMAIL");
    assert_eq!(keys(&r, "clock")[0], "TIME_NOW");
}

#[test]
fn operator_synonyms_replace_earlier_operator_groups() {
    let mut r = build(&small_catalogue());
    assert!(r.search("meteo", 10).is_empty());
    r.set_synonyms(&[vec!["meteo".to_string(), "weather".to_string()]]);
    assert_eq!(keys(&r, "meteo")[0], "WEATHER_FORECAST");
    r.set_synonyms(&[vec!["fx".to_string(), "currency".to_string()]]);
    assert!(r.search("meteo", 10).is_empty());
    assert_eq!(keys(&r, "fx")[0], "CONVERT_CURRENCY");
    // built-ins survive operator changes
    assert_eq!(keys(&r, "clock")[0], "TIME_NOW");
}

#[test]
fn synonyms_weigh_less_than_typed_words() {
    let r = build(&[
        row("FETCH_PAGE", "Web", "Fetch a page"),
        row("GET_PAGE", "Web", "Get a page"),
    ]);
    let hits = r.search("get page", 10);
    assert_eq!(hits[0].key.as_ref(), "GET_PAGE");
    assert!(hits[1].score < hits[0].score);
}

#[test]
fn pins_rank_their_row_first() {
    let mut r = build(&small_catalogue());
    let pins = vec!["what's the time".to_string(), "who am i".to_string()];
    r.insert(&Document {
        key: "CLOCK_READ",
        category: "Utility",
        what: "Read the wall clock",
        doc: "",
        args: vec![],
        pins: &pins,
        demote: false,
    })
    .unwrap();
    assert_eq!(keys(&r, "What is the time?")[0], "CLOCK_READ");
    // a pin made only of stop words matches on its words
    assert_eq!(keys(&r, "Who am I")[0], "CLOCK_READ");
    // a different query is ranked normally
    assert_eq!(keys(&r, "current date and zone")[0], "TIME_NOW");
}

#[test]
fn demoted_rows_rank_below_peers() {
    let rows = [
        row("LIST_USERS_V1", "Admin", "List users"),
        row("LIST_USERS_V2", "Admin", "List users"),
    ];
    let mut r = Resolver::new();
    for (i, (key, category, what)) in rows.iter().enumerate() {
        r.insert(&Document {
            key,
            category,
            what,
            doc: "",
            args: vec![],
            pins: &[],
            demote: i == 0,
        })
        .unwrap();
    }
    let hits = r.search("list users", 10);
    assert_eq!(hits[0].key.as_ref(), "LIST_USERS_V2");
    assert_eq!(hits[1].key.as_ref(), "LIST_USERS_V1");
}

#[test]
fn weak_tail_is_cut() {
    let mut rows = small_catalogue();
    rows.push(row(
        "CITY_WEATHER_ALERTS",
        "Weather",
        "Severe weather alerts for a city",
    ));
    let r = build(&rows);
    let got = keys(&r, "weather forecast for a city");
    assert_eq!(got[0], "WEATHER_FORECAST");
    // Rows that share nothing with the query never appear, and nothing is padded.
    assert!(got.iter().all(|k| k.contains("WEATHER")), "{got:?}");
    // A row matching one common word of a long query is below the cut-off.
    let r = build(&[
        row(
            "A_WEATHER_CITY_FORECAST",
            "X",
            "weather city forecast daily",
        ),
        row("B_DAILY", "X", "daily digest"),
        row("C", "X", "unrelated"),
        row("D", "X", "unrelated"),
    ]);
    assert_eq!(
        keys(&r, "weather city forecast daily"),
        ["A_WEATHER_CITY_FORECAST"]
    );
}

#[test]
fn limit_is_respected() {
    let r = build(&small_catalogue());
    assert_eq!(r.search("github issue", 1).len(), 1);
    assert!(r.search("github issue", 0).is_empty());
}

#[test]
fn insert_then_remove_and_replace() {
    let mut r = build(&small_catalogue());
    let n = r.len();
    r.insert(&Document {
        key: "PIZZA_ORDER",
        category: "Food",
        what: "Order a pizza",
        doc: "",
        args: vec![("topping", "Pizza topping")],
        pins: &[],
        demote: false,
    })
    .unwrap();
    assert_eq!(r.len(), n + 1);
    assert_eq!(keys(&r, "pizza"), ["PIZZA_ORDER"]);
    // replacing by key drops the old text
    r.insert(&Document {
        key: "PIZZA_ORDER",
        category: "Food",
        what: "Order a burrito",
        doc: "",
        args: vec![],
        pins: &[],
        demote: false,
    })
    .unwrap();
    assert_eq!(r.len(), n + 1);
    assert!(keys(&r, "topping").is_empty());
    assert_eq!(keys(&r, "burrito"), ["PIZZA_ORDER"]);
    r.remove("PIZZA_ORDER").unwrap();
    assert_eq!(r.len(), n);
    assert!(keys(&r, "burrito").is_empty());
    assert!(
        keys(&r, "order").is_empty() || !keys(&r, "order").contains(&"PIZZA_ORDER".to_string())
    );
    // removing a missing key is a no-op
    r.remove("PIZZA_ORDER").unwrap();
    assert_eq!(r.len(), n);
}

#[test]
fn remove_everything_leaves_an_empty_index() {
    let rows = small_catalogue();
    let mut r = build(&rows);
    let before = r.memory_bytes();
    for (k, _, _) in &rows {
        r.remove(k).unwrap();
    }
    assert!(r.is_empty());
    assert!(r.search("time", 10).is_empty());
    assert!(r.memory_bytes() < before);
    // the freed slots are reused
    let r2 = build(&rows);
    assert_eq!(keys(&r2, "time")[0], "TIME_NOW");
}

#[test]
fn args_and_doc_fields_are_searched_with_key_first() {
    let mut r = Resolver::new();
    r.insert(&Document {
        key: "TRANSLATE_TEXT",
        category: "Language",
        what: "Translate text",
        doc: "RETURNS: the translation",
        args: vec![("target_language", "ISO code of the target language")],
        pins: &[],
        demote: false,
    })
    .unwrap();
    r.insert(&Document {
        key: "DETECT_LANGUAGE",
        category: "Language",
        what: "Detect the language of a text",
        doc: "",
        args: vec![],
        pins: &[],
        demote: false,
    })
    .unwrap();
    assert_eq!(keys(&r, "iso code")[0], "TRANSLATE_TEXT");
    assert_eq!(keys(&r, "language")[0], "DETECT_LANGUAGE");
}

#[test]
fn matched_lists_the_contributing_words() {
    let r = build(&small_catalogue());
    let hits = r.search("send an email to Bob", 10);
    assert_eq!(hits[0].key.as_ref(), "SEND_EMAIL");
    assert_eq!(hits[0].matched, ["send", "email"]);
}

#[test]
fn parse_docstring_reads_leading_field_lines() {
    let content =
        "# WHAT: Current time\n# args: tz\n# RETURNS: ISO time\nsome body\n# SEE: not docs\n";
    let (what, doc) = parse_docstring(content);
    assert_eq!(what, "Current time");
    assert_eq!(doc, "tz\nISO time");
    let (what, doc) = parse_docstring("#!/bin/sh\n# WHAT: late");
    assert!(what.is_empty() && doc.is_empty());
}

#[test]
fn resolver_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Resolver>();
}

#[test]
fn baselines_rank_obvious_matches() {
    let rows: Vec<(String, String, String)> = small_catalogue()
        .into_iter()
        .map(|(k, c, w)| (k, c, format!("# WHAT: {w}\n")))
        .collect();
    let bm25 = baseline::PlainBm25::build(&rows);
    assert_eq!(bm25.search("weather forecast", 5)[0].0, "WEATHER_FORECAST");
    let sub = baseline::SubstringScorer::build(&rows);
    // the seed's flaw, kept for comparison: "is" is a substring of "issue"
    let got = sub.search("what time is it", 10);
    assert!(got.iter().any(|(k, _)| k.contains("ISSUE")));
}

#[test]
fn compounds_match_across_spellings() {
    let r = build(&[
        row(
            "PERFORM_COPY_EDITING",
            "Publishing",
            "Copy editing of a manuscript",
        ),
        row("GENERATE_CADPREVIEW", "Design", "Render a design"),
        row("EDIT_IMAGE", "Media", "Edit an image"),
    ]);
    let hits = r.search("copyediting", 10);
    assert_eq!(hits[0].key.as_ref(), "PERFORM_COPY_EDITING");
    assert_eq!(hits[0].matched, ["copyediting"]);
    assert_eq!(keys(&r, "cad preview")[0], "GENERATE_CADPREVIEW");
}

#[test]
fn huge_tokens_are_harmless() {
    let blob = "x".repeat(20_000);
    let mut r = build(&small_catalogue());
    r.insert(&Document {
        key: "BLOB",
        category: "X",
        what: &blob,
        doc: "",
        args: vec![],
        pins: &[],
        demote: false,
    })
    .unwrap();
    assert!(r.search(&"y".repeat(20_000), 10).is_empty());
    assert_eq!(keys(&r, &blob), ["BLOB"]);
}

#[test]
fn a_short_limit_returns_the_head_of_the_full_ranking() {
    // Many rows match, at scores that do not follow the order they were inserted in (the
    // shorter the row, the higher its score), with ties between rows of the same length.
    let rows: Vec<_> = (0..60)
        .map(|i| {
            let filler = " padding".repeat((i * 7) % 11);
            row(
                &format!("PARCEL_{i:02}"),
                "Shipping",
                &format!("Track a parcel{filler}"),
            )
        })
        .collect();
    let r = build(&rows);
    let all: Vec<String> = r
        .search("track parcel", 100)
        .into_iter()
        .map(|h| h.key.to_string())
        .collect();
    assert!(all.len() > 20, "{all:?}");
    for limit in [1, 3, 10] {
        let head: Vec<String> = r
            .search("track parcel", limit)
            .into_iter()
            .map(|h| h.key.to_string())
            .collect();
        assert_eq!(head, all[..limit], "limit {limit}");
    }
}

/// SplitMix64, so every run builds the same random catalogues.
pub(super) struct Mix(pub(super) u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// Skewed toward the first items, as words are: a few in most rows, most in few.
    fn skewed<'a>(&mut self, items: &'a [String]) -> &'a str {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        &items[((u * u * u) * items.len() as f64) as usize]
    }

    /// `least` words, and up to `more` others.
    fn words(&mut self, vocab: &[String], least: usize, more: usize) -> String {
        let n = least + self.below(more + 1);
        (0..n)
            .map(|_| self.skewed(vocab))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Made-up words of two or three syllables: no stop words, and stems that rarely collide.
fn vocabulary(mix: &mut Mix, size: usize) -> Vec<String> {
    const SYLLABLES: [&str; 16] = [
        "ka", "lo", "mir", "tan", "vex", "dru", "pol", "sen", "qua", "rib", "zen", "hoc", "fal",
        "gut", "nym", "wor",
    ];
    let mut vocab: Vec<String> = Vec::new();
    while vocab.len() < size {
        let n = 2 + mix.below(2);
        let word: String = (0..n).map(|_| SYLLABLES[mix.below(16)]).collect();
        if !vocab.contains(&word) {
            vocab.push(word);
        }
    }
    vocab
}

/// A hit as compared: key, score bits, matched words, learned words, found by meaning.
type HitView = (String, u32, Vec<String>, Vec<String>, bool);

/// A random row's text: key stem, WHAT line, docstring, argument names and descriptions.
type RowText = (String, String, String, Vec<String>, Vec<String>);

/// Equal hits, down to the bits of the score.
fn same_hits(pruned: &[Hit], exhaustive: &[Hit]) -> Result<(), String> {
    let view = |hits: &[Hit]| -> Vec<HitView> {
        hits.iter()
            .map(|h| {
                (
                    h.key.to_string(),
                    h.score.to_bits(),
                    h.matched.clone(),
                    h.learned.clone(),
                    h.similar,
                )
            })
            .collect()
    };
    let (a, b) = (view(pruned), view(exhaustive));
    if a == b {
        Ok(())
    } else {
        Err(format!("pruned {a:?}\nexhaustive {b:?}"))
    }
}

#[test]
fn the_pruned_search_ranks_exactly_as_scoring_every_row_on_random_catalogues() {
    let mut asked = 0;
    for seed in 0..12u64 {
        let mut mix = Mix(seed);
        let size = 60 + mix.below(400);
        let vocab = vocabulary(&mut mix, size);
        let categories: Vec<String> = (0..6).map(|_| mix.words(&vocab, 1, 0)).collect();
        let mut r = Resolver::new();
        let mut keys: Vec<String> = Vec::new();
        let mut pins: Vec<String> = Vec::new();
        let mut texts: Vec<RowText> = Vec::new();
        let rows = 100 + mix.below(900);
        // Inserts, then removals and replacements that reuse slots and lower the terms'
        // bounds, then more inserts.
        for step in 0..rows + rows / 2 {
            let replace = step >= rows && mix.below(2) == 0 && !keys.is_empty();
            if step >= rows && !replace {
                let key = keys.swap_remove(mix.below(keys.len()));
                r.remove(&key).unwrap();
                continue;
            }
            // Some rows are copies of another under a new number: equal scores, ordered
            // by key, at the edge of the top k.
            let copy = (mix.below(4) == 0 && !texts.is_empty())
                .then(|| texts[mix.below(texts.len())].clone());
            let (stem, what, doc, arg_names, arg_docs) = copy.unwrap_or_else(|| {
                let arg_names: Vec<String> =
                    (0..mix.below(3)).map(|_| mix.words(&vocab, 1, 0)).collect();
                let arg_docs: Vec<String> =
                    arg_names.iter().map(|_| mix.words(&vocab, 4, 0)).collect();
                (
                    mix.words(&vocab, 1, 2).replace(' ', "_"),
                    mix.words(&vocab, 1, 7),
                    mix.words(&vocab, 0, 39),
                    arg_names,
                    arg_docs,
                )
            });
            texts.push((
                stem.clone(),
                what.clone(),
                doc.clone(),
                arg_names.clone(),
                arg_docs.clone(),
            ));
            let key = if replace {
                keys[mix.below(keys.len())].clone()
            } else {
                let key = format!("{stem}_{}_{step}", mix.below(1000));
                keys.push(key.clone());
                key
            };
            let row_pins: Vec<String> = if mix.below(20) == 0 {
                vec![mix.words(&vocab, 2, 0)]
            } else {
                Vec::new()
            };
            pins.extend(row_pins.iter().cloned());
            r.insert(&Document {
                key: &key,
                category: &categories[mix.below(categories.len())],
                what: &what,
                doc: &doc,
                args: arg_names
                    .iter()
                    .zip(&arg_docs)
                    .map(|(n, d)| (n.as_str(), d.as_str()))
                    .collect(),
                pins: &row_pins,
                demote: mix.below(8) == 0,
            })
            .unwrap();
            if mix.below(10) == 0 {
                let words = mix.words(&vocab, 2, 0);
                r.learn(&key, &words, 1 + mix.below(3) as i32);
            }
        }
        for _ in 0..150 {
            let mut query = match mix.below(10) {
                0 if !pins.is_empty() => pins[mix.below(pins.len())].clone(),
                _ => mix.words(&vocab, 1, 5),
            };
            if mix.below(6) == 0 {
                // A typo or a prefix: the tolerant alternatives of a position.
                query.pop();
            }
            let limit = [1, 2, 3, 5, 10, 25][mix.below(6)];
            let pruned = r.search_scored(&query, None, limit, &r.fusion, Scoring::Pruned);
            let exhaustive = r.search_exhaustive(&query, limit);
            let chosen = r.search(&query, limit);
            same_hits(&chosen, &exhaustive).unwrap();
            if let Err(diff) = same_hits(&pruned, &exhaustive) {
                panic!("seed {seed}, {query:?}, limit {limit}:\n{diff}");
            }
            asked += usize::from(!exhaustive.is_empty());
        }
    }
    assert!(asked > 1_000, "most asks find rows: {asked}");
}

#[test]
fn rows_that_tie_at_the_kth_score_are_ordered_by_key_however_they_were_inserted() {
    // Equal rows score what their terms' bounds allow, exactly: the first rows read fill
    // the top k at that bound, and the later ones, with smaller keys, tie it and must
    // still be read to take their places.
    let rows: Vec<_> = (0..30)
        .rev()
        .map(|i| row(&format!("PARCEL_{i:02}"), "Shipping", "Track a parcel"))
        .collect();
    let r = build(&rows);
    for query in ["parcel", "track parcel"] {
        assert_eq!(
            keys(&r, query)[..3],
            ["PARCEL_00", "PARCEL_01", "PARCEL_02"]
        );
        let hits = r.search_scored(query, None, 3, &r.fusion, Scoring::Pruned);
        same_hits(&hits, &r.search_exhaustive(query, 3)).unwrap();
        let hits = r.search_scored(query, None, 10, &r.fusion, Scoring::Pruned);
        let got: Vec<&str> = hits.iter().map(|h| &*h.key).collect();
        assert_eq!(got[..3], ["PARCEL_00", "PARCEL_01", "PARCEL_02"]);
    }
}

/// A unit vector in the plane of the first two axes, at cosine `c` with the first.
fn at_cosine(c: f32) -> Vec<f32> {
    vec![c, (1.0 - c * c).sqrt(), 0.0]
}

fn keys_by_meaning(r: &Resolver, q: &str, vector: &[f32]) -> Vec<String> {
    r.search_with(q, Some(vector), 10)
        .into_iter()
        .map(|h| h.key.to_string())
        .collect()
}

#[test]
fn a_row_is_as_close_to_a_request_as_its_closest_view() {
    let mut r = build(&[
        row("SHIP_PARCEL", "Logistics", "Send a parcel"),
        row("TRACK_PARCEL", "Logistics", "Where a parcel is"),
    ]);
    let request = [0.0, 0.6, 0.8];
    // Seen whole, the shipping row is far from the request; one of its arguments is close.
    r.set_views("SHIP_PARCEL", &[&[1.0, 0.0, 0.0], &[0.0, 0.0, 1.0]]);
    r.set_vector("TRACK_PARCEL", &[0.0, 1.0, 0.0]);
    assert_eq!(
        keys_by_meaning(&r, "qqq", &request),
        ["SHIP_PARCEL", "TRACK_PARCEL"]
    );
    r.set_views("SHIP_PARCEL", &[&[1.0, 0.0, 0.0]]);
    assert_eq!(keys_by_meaning(&r, "qqq", &request), ["TRACK_PARCEL"]);
}

#[test]
fn cosines_count_as_a_share_of_the_querys_best_when_all_are_low() {
    // Both rows share words with the request, the first more of them; by meaning the second
    // is three times as close, though every cosine is low (a request in another style
    // than the rows). Words must not win just because the model's numbers are small.
    let mut r = build(&[
        row("INVOICE_EXPORT", "Billing", "Export invoice totals"),
        row("INVOICE_PAY", "Billing", "Settle an invoice"),
    ]);
    r.set_fusion(Fusion {
        margin: 0.0,
        ..Fusion::default()
    });
    r.set_vector("INVOICE_EXPORT", &at_cosine(0.02));
    r.set_vector("INVOICE_PAY", &at_cosine(0.06));
    assert_eq!(
        keys_by_meaning(&r, "invoice export", &[1.0, 0.0, 0.0]),
        ["INVOICE_PAY", "INVOICE_EXPORT"]
    );
}
