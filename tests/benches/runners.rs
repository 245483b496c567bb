//! Runner overhead benchmark (release build, one in-process node, loopback only): what the
//! node adds to an http invocation, against calling the same local upstream directly.
//!
//! - direct: `GET upstream/echo?q=…` with a pooled client;
//! - node, http row: `POST /api/dispatch` for a row whose target is that URL (argument
//!   filling, SSRF guard with DNS-free address check, the upstream call through the pinned
//!   pooled client, a receipt committed through Raft with fsync);
//! - node, static row: the same invocation path without the upstream, to split the overhead
//!   into "the receipt and the protocol" and "the runner".
//!
//! `cargo bench -p rowcall-tests --bench runners`. Prints p50/p99 and the ratios; asserts
//! nothing.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::routing::get;
use rowcall_node::Config;
use serde_json::json;

const ADMIN: &str = "bench-admin-key-0123456789abcdef0123";
const ROUNDS: usize = 2_000;
const WARMUP: usize = 100;

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[i]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

async fn measure<F, Fut>(mut call: F) -> Vec<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for _ in 0..WARMUP {
        call().await;
    }
    let mut samples = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let t = Instant::now();
        call().await;
        samples.push(t.elapsed());
    }
    samples
}

#[tokio::main]
async fn main() {
    // The upstream: a small JSON answer.
    let router = axum::Router::new().route(
        "/echo",
        get(|| async { axum::Json(json!({"ok": true, "items": [1, 2, 3]})) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });

    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    config.node.http = any;
    config.node.grpc = any;
    config.node.data = dir.path().join("node");
    config.node.demo = false;
    config.auth.admin_key = Some(ADMIN.into());
    // A benchmark floods one address on purpose; quotas would measure themselves.
    config.limits.rate.enabled = false;
    config.runners.allow = vec![upstream.to_string()];
    let node = rowcall_node::start(config).await.unwrap();
    node.app
        .raft
        .wait(Some(Duration::from_secs(10)))
        .current_leader(1, "elected")
        .await
        .unwrap();
    let url = node.url();
    let http = reqwest::Client::new();
    let rows = json!([
        {"key": "BENCH_HTTP", "type": "http", "auth": "public",
         "target": format!("GET http://{upstream}/echo?q={{q}}")},
        {"key": "BENCH_STATIC", "type": "static", "auth": "public",
         "content": "# WHAT: bench\n\n{\"ok\": true, \"items\": [1, 2, 3]}"},
    ]);
    let put = http
        .post(format!("{url}/api/directory"))
        .bearer_auth(ADMIN)
        .json(&rows)
        .send()
        .await
        .unwrap();
    assert!(put.status().is_success());

    let direct_url = format!("http://{upstream}/echo?q=bench");
    let mut direct = measure(|| async {
        let r = http.get(&direct_url).send().await.unwrap();
        assert!(r.status().is_success());
        r.bytes().await.unwrap();
    })
    .await;
    let invoke = |key: &'static str| {
        let http = http.clone();
        let url = format!("{url}/api/dispatch");
        move || {
            let http = http.clone();
            let url = url.clone();
            async move {
                let r = http
                    .post(&url)
                    .json(&json!({"key": key, "args": {"q": "bench"}}))
                    .send()
                    .await
                    .unwrap();
                assert!(r.status().is_success(), "{}", r.status());
                r.bytes().await.unwrap();
            }
        }
    };
    let mut via_node = measure(invoke("BENCH_HTTP")).await;
    let mut static_row = measure(invoke("BENCH_STATIC")).await;

    let row = |name: &str, s: &mut Vec<Duration>| {
        let (p50, p99) = (percentile(s, 0.5), percentile(s, 0.99));
        println!("{name:<34} p50 {:>10}   p99 {:>10}", ms(p50), ms(p99));
        (p50, p99)
    };
    println!("runner overhead, {ROUNDS} sequential calls each ({WARMUP} warm-up), loopback");
    let (d50, d99) = row("direct GET upstream", &mut direct);
    let (n50, n99) = row("node: http row (POST /api/dispatch)", &mut via_node);
    let (s50, s99) = row("node: static row (no upstream)", &mut static_row);
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!(
        "ratio node/direct                  p50 {:>9.1}x   p99 {:>9.1}x",
        ratio(n50, d50),
        ratio(n99, d99)
    );
    println!(
        "added by the node                  p50 {:>10}   p99 {:>10}",
        ms(n50.saturating_sub(d50)),
        ms(n99.saturating_sub(d99))
    );
    println!(
        "of which the runner (http - static) p50 {:>9}   p99 {:>10}",
        ms(n50.saturating_sub(s50)),
        ms(n99.saturating_sub(s99))
    );
    node.shutdown().await;
}
