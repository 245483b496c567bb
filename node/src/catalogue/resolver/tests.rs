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
