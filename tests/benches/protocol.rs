//! Protocol benchmark of one in-process node over loopback HTTP (release build):
//!
//! - the four-step loop ask → contract → invoke → confirm: wall time per step and bytes;
//! - insert latency with fsync, beside a baseline of a bare sled insert + flush on the same
//!   disk in the same process (the durability floor), as a ratio;
//! - ask latency over a whole catalogue with its own queries, over HTTP and in process: the
//!   fixture in `data/` (303 rows), or the public development data (4,076 seal rows) when
//!   `ROWCALL_PUBLIC_DATA` names its folder.
//!
//! `[ROWCALL_PUBLIC_DATA=<dir>] cargo bench -p rowcall-tests --bench protocol`. Prints a
//! table; exits non-zero when the variable names a folder without the data.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rowcall_client::dataset::DataSet;
use rowcall_node::Config;
use serde_json::{json, Value};

const ADMIN: &str = "bench-admin-key-0123456789abcdef0123";

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[i]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

#[tokio::main]
async fn main() {
    // Chosen first, so a wrong path fails before anything is measured.
    let data = DataSet::from_env().unwrap_or_else(|e| panic!("{e}"));
    let rows = data.read_rows().unwrap_or_else(|e| panic!("{e}"));
    let queries = data.read_queries().unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    config.node.http = any;
    config.node.grpc = any;
    config.node.data = dir.path().join("node");
    config.auth.admin_key = Some(ADMIN.into());
    // A benchmark floods one address on purpose; quotas would measure themselves.
    config.limits.rate.enabled = false;
    let node = rowcall_node::start(config).await.unwrap();
    let url = node.url();
    let http = reqwest::Client::new();

    // The four-step loop.
    let rounds = 300;
    let mut steps: [Vec<Duration>; 4] = Default::default();
    let mut totals = Vec::new();
    let mut bytes = 0usize;
    for round in 0..rounds {
        let started = Instant::now();
        let t = Instant::now();
        let ask = http
            .get(format!("{url}/api/dispatch?ask=what+time+is+it"))
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        steps[0].push(t.elapsed());
        let ask: Value = serde_json::from_slice(&ask).unwrap();
        let t = Instant::now();
        let contract = http
            .get(ask["best"]["contract"].as_str().unwrap())
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        steps[1].push(t.elapsed());
        let body = json!({"key": "TIME_NOW"}).to_string();
        let t = Instant::now();
        let invoked = http
            .post(format!("{url}/api/dispatch"))
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        steps[2].push(t.elapsed());
        let invoked_json: Value = serde_json::from_slice(&invoked).unwrap();
        let confirm_url = invoked_json["proof"]["confirm"]
            .as_str()
            .unwrap()
            .to_owned();
        let t = Instant::now();
        let confirmed = http
            .get(&confirm_url)
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        steps[3].push(t.elapsed());
        totals.push(started.elapsed());
        if round == 0 {
            // Bytes on the wire of the bodies both ways (headers excluded).
            bytes = ask.to_string().len()
                + contract.len()
                + body.len()
                + invoked.len()
                + confirmed.len();
        }
    }
    println!("four-step loop, {rounds} rounds, one node, loopback HTTP:");
    for (name, samples) in ["ask", "contract", "invoke", "confirm"]
        .iter()
        .zip(steps.iter_mut())
    {
        println!(
            "  {name:<9} p50 {}  p99 {}",
            ms(percentile(samples, 0.5)),
            ms(percentile(samples, 0.99))
        );
    }
    println!(
        "  all four  p50 {}  p99 {}  bodies {bytes} B",
        ms(percentile(&mut totals, 0.5)),
        ms(percentile(&mut totals, 0.99))
    );

    // Insert latency, with a bare sled insert + flush on the same disk as the baseline.
    let inserts = 1000;
    let mut insert_times = Vec::with_capacity(inserts);
    for i in 0..inserts {
        let row = json!({"key": format!("BENCH_{i:05}"), "type": "static", "content": format!("# WHAT: bench row {i}\n")});
        let t = Instant::now();
        let r = http
            .post(format!("{url}/api/directory"))
            .header("x-terminal-key", ADMIN)
            .json(&row)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        insert_times.push(t.elapsed());
    }
    let db = sled::Config::new()
        .path(dir.path().join("baseline"))
        .flush_every_ms(None)
        .open()
        .unwrap();
    let mut floor = Vec::with_capacity(inserts);
    for i in 0..inserts {
        let t = Instant::now();
        db.insert(format!("k{i}"), vec![0u8; 200]).unwrap();
        db.flush_async().await.unwrap();
        floor.push(t.elapsed());
    }
    let (p50, p99) = (
        percentile(&mut insert_times, 0.5),
        percentile(&mut insert_times, 0.99),
    );
    let (f50, f99) = (percentile(&mut floor, 0.5), percentile(&mut floor, 0.99));
    println!("insert (HTTP → Raft log flush → apply flush → answer), {inserts} sequential:");
    println!(
        "  rowcall   p50 {}  p99 {}  ({:.0} inserts/s)",
        ms(p50),
        ms(p99),
        1.0 / p50.as_secs_f64()
    );
    println!(
        "  sled insert+flush baseline p50 {}  p99 {}",
        ms(f50),
        ms(f99)
    );
    println!(
        "  ratio p50 {:.1}x  p99 {:.1}x",
        p50.as_secs_f64() / f50.as_secs_f64(),
        p99.as_secs_f64() / f99.as_secs_f64()
    );

    // Ask over the whole data set.
    for chunk in rows.chunks(1000) {
        let r = http
            .post(format!("{url}/api/directory"))
            .header("x-terminal-key", ADMIN)
            .json(&chunk)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let mut http_asks = Vec::new();
    let mut local_asks = Vec::new();
    for round in 0..400 {
        let q = queries[round % queries.len()].q.as_str();
        let t = Instant::now();
        http.get(format!("{url}/api/dispatch"))
            .query(&[("ask", q)])
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        http_asks.push(t.elapsed());
        let t = Instant::now();
        std::hint::black_box(node.app.catalogue.read().ask(q, 5));
        local_asks.push(t.elapsed());
    }
    let rows_total = node.app.catalogue.read().len();
    println!(
        "ask at {rows_total} rows ({} data set), 400 asks of its queries:",
        data.name
    );
    println!(
        "  over HTTP   p50 {}  p99 {}",
        ms(percentile(&mut http_asks, 0.5)),
        ms(percentile(&mut http_asks, 0.99))
    );
    println!(
        "  in process  p50 {}  p99 {}",
        ms(percentile(&mut local_asks, 0.5)),
        ms(percentile(&mut local_asks, 0.99))
    );
    node.shutdown().await;
}
