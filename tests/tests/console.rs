//! The operator console (`/console`, issue 34) on the server side: the page and its assets
//! come from the binary with strict security headers and no inline code; an anonymous
//! visitor gets the login page and nothing more; the console authenticates with a header,
//! never a cookie, so a forged cross-site write is refused; and the edit the console sends
//! is conditional, so the second of two editors gets a conflict instead of overwriting.

use crate::common;

use common::{start, Fetch, ADMIN, INVOKE};
use reqwest::header::HeaderMap;
use reqwest::StatusCode;
use serde_json::{json, Value};

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .unwrap_or_else(|| panic!("no {name} header"))
        .to_str()
        .unwrap()
}

/// The security headers every console answer carries.
fn assert_secured(headers: &HeaderMap, what: &str) {
    let csp = header(headers, "content-security-policy");
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(directive), "{what}: {directive} not in {csp}");
    }
    assert!(!csp.contains("unsafe-inline"), "{what}: {csp}");
    assert!(!csp.contains("unsafe-eval"), "{what}: {csp}");
    assert_eq!(header(headers, "x-frame-options"), "DENY", "{what}");
    assert_eq!(
        header(headers, "x-content-type-options"),
        "nosniff",
        "{what}"
    );
    assert_eq!(header(headers, "referrer-policy"), "no-referrer", "{what}");
    assert!(headers.get("set-cookie").is_none(), "{what} sets a cookie");
}

#[tokio::test]
async fn the_console_is_served_from_the_binary_with_strict_headers() {
    let node = start(true).await;
    let http = &node.http;
    let page = http
        .get(format!("{}/console", node.url))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert_secured(page.headers(), "/console");
    assert!(header(page.headers(), "content-type").starts_with("text/html"));
    let html = page.text().await.unwrap();

    // No inline code: every script has a src on this origin, no style element or attribute,
    // no handler attribute, nothing from another origin.
    let lower = html.to_lowercase();
    assert_eq!(
        lower.matches("<script").count(),
        lower.matches("<script src=\"/console/").count(),
        "{html}"
    );
    assert!(lower.contains("<script src=\"/console/console.js\""));
    assert!(
        !lower.contains("<style") && !lower.contains(" style="),
        "{html}"
    );
    assert!(!lower.contains(" onclick=") && !lower.contains(" onsubmit="));
    assert!(
        !lower.contains("http://") && !lower.contains("https://"),
        "{html}"
    );

    for (path, kind) in [
        ("/console/console.js", "text/javascript"),
        ("/console/console.css", "text/css"),
    ] {
        let asset = http
            .get(format!("{}{path}", node.url))
            .send()
            .await
            .unwrap();
        assert_eq!(asset.status(), StatusCode::OK, "{path}");
        assert_secured(asset.headers(), path);
        assert!(
            header(asset.headers(), "content-type").starts_with(kind),
            "{path}"
        );
        let text = asset.text().await.unwrap();
        assert!(!text.is_empty(), "{path}");
        // SVG's namespace is a name the charts are made in, never fetched.
        let text = text.replace("\"http://www.w3.org/2000/svg\"", "");
        assert!(
            !text.contains("http://") && !text.contains("https://"),
            "{path}"
        );
    }
    // The script writes untrusted text as text, never as markup, and sends no cookie.
    let script = http
        .get(format!("{}/console/console.js", node.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!script.contains("innerHTML") && !script.contains("insertAdjacentHTML"));
    assert!(!script.contains("document.write") && !script.contains("eval("));
    assert!(script.contains("credentials = \"omit\""));
}

#[tokio::test]
async fn an_anonymous_visitor_gets_the_login_page_and_only_the_public_view() {
    let node = start(true).await;
    let http = &node.http;
    let html = http
        .get(format!("{}/console", node.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // The page is the same for everyone and holds no data: the login form is the only
    // section shown before a key is given; every other section starts hidden.
    assert!(html.contains("<section id=\"login\">"), "{html}");
    for section in ["catalogue", "row", "ask", "receipts", "cluster"] {
        assert!(
            html.contains(&format!("<section id=\"{section}\" hidden>")),
            "{section} is not hidden: {html}"
        );
    }
    assert!(!html.contains(ADMIN) && !html.contains("TIME_NOW"));

    // What the console shows an anonymous visitor is what the anonymous API answers: rows
    // without targets, and no forensic receipts.
    let page: Value = http
        .get(format!("{}/api/directory", node.url))
        .fetch()
        .await;
    let rows = page["rows"].as_array().unwrap();
    assert!(!rows.is_empty());
    assert!(rows.iter().all(|r| r.get("target").is_none()), "{page}");
    let receipts = http
        .get(format!("{}/api/receipts?key=TIME_NOW", node.url))
        .send()
        .await
        .unwrap();
    assert_eq!(receipts.status(), StatusCode::UNAUTHORIZED);
    // The console tells admin from read-only by that same probe: an invoke key is refused.
    let probe = http
        .get(format!(
            "{}/api/receipts?key=__console_probe__&limit=1",
            node.url
        ))
        .bearer_auth(INVOKE)
        .send()
        .await
        .unwrap();
    assert!(probe.status().is_client_error(), "{}", probe.status());
    let probe = http
        .get(format!(
            "{}/api/receipts?key=__console_probe__&limit=1",
            node.url
        ))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(probe.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_forged_cross_site_write_is_refused() {
    let node = start(true).await;
    let http = &node.http;
    // What a foreign page can make the operator's browser send: a form post (no custom
    // header, so no Authorization), with whatever cookies the browser holds for the node.
    for (content_type, body) in [
        (
            "application/x-www-form-urlencoded",
            "key=FORGED&type=static&content=x".to_owned(),
        ),
        (
            "text/plain",
            json!({"key": "FORGED", "type": "static", "content": "x"}).to_string(),
        ),
    ] {
        let forged = http
            .post(format!("{}/api/directory", node.url))
            .header("origin", "https://evil.example")
            .header("cookie", format!("rowcall-key={ADMIN}; session={ADMIN}"))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(forged.status(), StatusCode::UNAUTHORIZED, "{content_type}");
    }
    let missing = http
        .get(format!("{}/api/directory/FORGED", node.url))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
}

/// The body the console's edit form sends (`save` in console.js): the row's fields and
/// `if_version`, the version the form was loaded at.
fn edited(row: &Value, content: &str) -> Value {
    json!({
        "key": row["key"], "type": row["type"], "target": row["target"],
        "category": row["category"], "content": content, "auth": row["auth"],
        "risk": row["risk"], "enabled": row["enabled"],
        // As the script does: a row shows these only when they differ from the default.
        "planner_visible": row["planner_visible"].as_bool().unwrap_or(true),
        "demote": row["demote"].as_bool().unwrap_or(false),
        "if_version": row["version"],
    })
}

#[tokio::test]
async fn the_second_of_two_editors_gets_a_conflict_not_an_overwrite() {
    let node = start(true).await;
    let http = &node.http;
    let url = format!("{}/api/directory/TIME_NOW", node.url);
    // Two editors open the same row.
    let first: Value = http.get(&url).bearer_auth(ADMIN).fetch().await;
    let second = first.clone();
    let saved = http
        .post(format!("{}/api/directory", node.url))
        .bearer_auth(ADMIN)
        .json(&edited(&first, "first editor's words"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        saved.status(),
        StatusCode::OK,
        "{}",
        saved.text().await.unwrap()
    );
    let conflict = http
        .post(format!("{}/api/directory", node.url))
        .bearer_auth(ADMIN)
        .json(&edited(&second, "second editor's words"))
        .send()
        .await
        .unwrap();
    assert_eq!(conflict.status(), StatusCode::CONFLICT);
    let error: Value = conflict.json().await.unwrap();
    assert!(error["error"]["message"].as_str().is_some(), "{error}");
    let now: Value = http.get(&url).bearer_auth(ADMIN).fetch().await;
    assert_eq!(now["content"], "first editor's words");

    // A new row from the console's form is create-only (if_version 0): it does not replace
    // a row someone else created meanwhile.
    let mut create = edited(&now, "a different row");
    create["if_version"] = json!(0);
    let refused = http
        .post(format!("{}/api/directory", node.url))
        .bearer_auth(ADMIN)
        .json(&create)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::CONFLICT);
}

/// Sums of the activity history's counts: (asks, invocations, writes).
fn activity_sums(history: &Value) -> (u64, u64, u64) {
    let intervals = history["intervals"].as_array().expect("intervals");
    let sum = |field: &str| intervals.iter().map(|i| i[field].as_u64().unwrap()).sum();
    (sum("asks"), sum("invocations"), sum("writes"))
}

#[tokio::test]
async fn the_cluster_page_charts_what_this_node_did() {
    let node = start(true).await;
    let http = &node.http;
    let activity = format!("{}/api/cluster/activity", node.url);
    // No credential, like /metrics: counts and latencies, nothing about rows or callers.
    let before: Value = http.get(&activity).fetch().await;
    assert_eq!(before["interval_s"], 5);
    let (asks, invocations, writes) = activity_sums(&before);

    for ask in ["what time is it", "hash some text", "encode in base64"] {
        let answer: Value = http
            .get(format!("{}/api/dispatch", node.url))
            .query(&[("ask", ask)])
            .fetch()
            .await;
        assert!(answer["count"].as_u64().is_some(), "{answer}");
    }
    for _ in 0..2 {
        let ran: Value = http
            .get(format!("{}/api/dispatch?invoke=TIME_NOW", node.url))
            .fetch()
            .await;
        assert_eq!(ran["ok"], true, "{ran}");
    }
    let put = http
        .post(format!("{}/api/directory", node.url))
        .bearer_auth(ADMIN)
        .json(&json!({"key": "CHARTED", "type": "static", "content": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), StatusCode::CREATED);

    let after: Value = http.get(&activity).fetch().await;
    let (asked, invoked, wrote) = activity_sums(&after);
    assert_eq!((asked, invoked), (asks + 3, invocations + 2), "{after}");
    // The row's write, and the invocations' receipts, which are replicated writes too.
    assert!(wrote > writes, "{after}");
    let last = after["intervals"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        last["ended_ago_s"], 0,
        "the last interval is the one under way"
    );
    let written = after["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["writes"].as_u64() > Some(0))
        .expect("an interval with the write");
    assert!(written["write_ms_mean"].as_f64().is_some_and(|ms| ms > 0.0));
    assert!(written["write_ms_max"].as_f64() >= written["write_ms_mean"].as_f64());
}
