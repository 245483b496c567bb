//! Every `rowcall-bench` command runs to completion at a tiny size and reports a figure for
//! every system, scheme, client count, step, size or node it measures (no timing is
//! asserted: speed is what the bench measures).
//!
//! Needs the rowcall-node binary of the same profile (`cargo test --workspace` builds it;
//! alone: `cargo build -p rowcall-node`). etcd is measured when it is installed, and the
//! report says it was skipped when it is not.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

#[test]
fn writes_reports_every_system_at_every_client_count() {
    let out = out_dir("writes");
    let stdout = bench(
        &[
            "writes",
            "--clients",
            "1,3",
            "--seconds",
            "0.3",
            "--rounds",
            "2",
        ],
        &out,
    );
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("writes.json")).unwrap()).unwrap();
    let etcd = rowcall_chaos::etcd::on_path().is_some();
    let mut systems = vec!["rowcall 3 nodes", "rowcall 1 node"];
    if etcd {
        systems.push("etcd 3 members");
    } else {
        assert!(report["etcd_skipped"].is_string(), "{report}");
        assert!(stdout.contains("etcd skipped"), "{stdout}");
    }
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), systems.len() * 2, "{report}");
    for system in systems {
        for clients in [1, 3] {
            let row = rows
                .iter()
                .find(|r| r["system"] == system && r["clients"] == clients)
                .unwrap_or_else(|| panic!("no figure for {system} at {clients} clients"));
            assert!(row["ok"].as_u64().unwrap() > 0, "{row}");
            assert!(row["latency"]["p50_ms"].as_f64().unwrap() > 0.0, "{row}");
            // Against etcd when it ran; on its own otherwise.
            assert_eq!(row["throughput_vs_etcd"].is_number(), etcd, "{row}");
            let line = format!("| {clients} | {system} |");
            assert!(stdout.contains(&line), "{line} missing from\n{stdout}");
        }
    }
    assert!(report["machine"]["cores"].as_u64().unwrap() > 0);
    // Run again into the same folder: the clusters start afresh, not from the data the first
    // run left there (which belongs to clusters that are gone).
    let again = bench_in(
        &[
            "writes",
            "--clients",
            "1",
            "--seconds",
            "0.3",
            "--rounds",
            "1",
            "--no-etcd",
        ],
        &out,
    );
    assert!(again.contains("| 1 | rowcall 3 nodes |"), "{again}");
    let _ = std::fs::remove_dir_all(&out);
}

/// Runs `rowcall-bench` with `args` and a new `--out`, and asserts that it succeeded.
fn bench(args: &[&str], out: &Path) -> String {
    let _ = std::fs::remove_dir_all(out);
    bench_in(args, out)
}

/// [`bench`] into `out` as it is.
fn bench_in(args: &[&str], out: &Path) -> String {
    let run = run_bench(args, out);
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "rowcall-bench failed: {}\n{stdout}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    stdout
}

/// `rowcall-bench <args> --out <out> --node-bin <the node of this profile>`, as it ended.
fn run_bench(args: &[&str], out: &Path) -> Output {
    let node = rowcall_chaos::cluster::node_binary(None).expect(
        "rowcall-node binary next to the test (build it first: cargo build -p rowcall-node)",
    );
    Command::new(env!("CARGO_BIN_EXE_rowcall-bench"))
        .args(args)
        .arg("--out")
        .arg(out)
        .arg("--node-bin")
        .arg(&node)
        .output()
        .expect("rowcall-bench runs")
}

fn out_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("rowcall-bench-{name}-{}", std::process::id()))
}

#[test]
fn tls_reports_both_schemes_for_ask_and_invoke_at_every_client_count() {
    let out = out_dir("tls");
    let stdout = bench(
        &[
            "tls",
            "--clients",
            "1,3",
            "--seconds",
            "0.3",
            "--rounds",
            "2",
        ],
        &out,
    );
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("tls.json")).unwrap()).unwrap();
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{report}");
    for operation in ["ask", "invoke"] {
        for clients in [1, 3] {
            let row = rows
                .iter()
                .find(|r| r["operation"] == operation && r["clients"] == clients)
                .unwrap_or_else(|| panic!("no figure for {operation} at {clients} clients"));
            // Both schemes answered, and nothing failed: an HTTPS node that did not serve
            // TLS, or a client that did not trust it, shows here.
            for scheme in ["http", "https"] {
                assert!(row[scheme]["ok"].as_u64().unwrap() > 0, "{scheme}: {row}");
                assert_eq!(row[scheme]["errors"], 0, "{scheme}: {row}");
            }
            assert!(row["throughput_ratio"].as_f64().unwrap() > 0.0, "{row}");
            let line = format!("| {operation} | {clients} |");
            assert!(stdout.contains(&line), "{line} missing from\n{stdout}");
        }
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn reads_reports_every_read_at_every_client_count() {
    let out = out_dir("reads");
    let stdout = bench(
        &[
            "reads",
            "--clients",
            "1,3",
            "--seconds",
            "0.3",
            "--rounds",
            "1",
            "--rows",
            "60",
        ],
        &out,
    );
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("reads.json")).unwrap()).unwrap();
    let etcd = rowcall_chaos::etcd::on_path().is_some();
    let mut reads = vec!["ask", "contract", "row"];
    if etcd {
        reads.push("etcd-get");
    } else {
        assert!(report["etcd_skipped"].is_string(), "{report}");
    }
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), reads.len() * 2, "{report}");
    for read in reads {
        for clients in [1, 3] {
            let row = rows
                .iter()
                .find(|r| r["read"] == read && r["clients"] == clients)
                .unwrap_or_else(|| panic!("no figure for {read} at {clients} clients"));
            // Every read found its row on the follower: a catalogue that did not load, or a
            // key that is not in it, answers 404 and counts as an error.
            assert!(row["ok"].as_u64().unwrap() > 0, "{row}");
            assert_eq!(row["errors"], 0, "{row}");
            assert_eq!(row["throughput_vs_etcd"].is_number(), etcd, "{row}");
        }
    }
    assert!(stdout.contains("| rowcall ask |"), "{stdout}");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn reads_takes_a_real_catalogue_and_real_requests_from_files() {
    let out = out_dir("reads-files");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    let row = |key: &str, what: &str| {
        serde_json::json!({"key": key, "type": "static", "auth": "public",
            "content": format!("# WHAT: {what}\n\n{{}}\n")})
        .to_string()
    };
    let catalogue = out.join("rows.jsonl");
    let rows = [
        row("PARCEL_TRACK", "Track a parcel on its way"),
        row("PAY_INVOICE", "Pay an invoice"),
        row("WEATHER_NOW", "Current weather at a place"),
    ];
    std::fs::write(&catalogue, rows.join("\n") + "\n").unwrap();
    let asks = out.join("asks.jsonl");
    std::fs::write(
        &asks,
        "{\"q\": \"where is my parcel\", \"gold\": [\"PARCEL_TRACK\"]}\n{\"q\": \"will it rain\"}\n",
    )
    .unwrap();
    let (catalogue, asks) = (catalogue.to_str().unwrap(), asks.to_str().unwrap());
    let args = [
        "reads",
        "--clients",
        "2",
        "--seconds",
        "0.3",
        "--rounds",
        "1",
        "--no-etcd",
        "--catalogue",
        catalogue,
        "--asks",
        asks,
    ];
    let stdout = bench_in(&args, &out.join("run"));
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run").join("reads.json")).unwrap())
            .unwrap();
    assert_eq!(report["settings"]["catalogue_rows"], 3, "{report}");
    for row in report["rows"].as_array().unwrap() {
        // Contracts and row gets read the file's keys: any other key answers 404, an error.
        assert!(row["ok"].as_u64().unwrap() > 0, "{row}");
        assert_eq!(row["errors"], 0, "{row}");
    }
    assert!(stdout.contains("(2 requests)"), "{stdout}");

    // A line that is not a row is refused, naming the file and the line.
    std::fs::write(catalogue, format!("{}\n[1, 2]\n", rows[0])).unwrap();
    let run = run_bench(&args, &out.join("refused"));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{stderr}");
    assert!(
        stderr.contains("rows.jsonl line 2: every line must be a row with a key"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn loop_reports_every_step_on_one_and_three_nodes() {
    let out = out_dir("loop");
    let stdout = bench(
        &["loop", "--seconds", "0.5", "--rounds", "1", "--rows", "40"],
        &out,
    );
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("loop.json")).unwrap()).unwrap();
    for (system, loops) in report["loops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (&p[0], &p[1]))
    {
        assert!(
            loops.as_u64().unwrap() > 0,
            "{system}: no loop completed: {report}"
        );
    }
    // A loop fails when the ask does not put the clock first, or its receipt does not
    // confirm on the node it was asked of.
    for failed in report["errors"].as_array().unwrap() {
        assert_eq!(failed[1], 0, "{report}");
    }
    let rows = report["rows"].as_array().unwrap();
    for system in ["rowcall 1 node", "rowcall 3 nodes (follower)"] {
        for step in ["ask", "contract", "invoke", "confirm", "loop"] {
            let row = rows
                .iter()
                .find(|r| r["system"] == system && r["step"] == step)
                .unwrap_or_else(|| panic!("no figure for {step} on {system}"));
            assert!(row["bytes"].as_u64().unwrap() > 0, "{row}");
            assert!(row["latency"]["p50_ms"].as_f64().unwrap() > 0.0, "{row}");
        }
    }
    assert!(stdout.contains("| the seed | loop |"), "{stdout}");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn scale_reports_every_size_with_a_wiped_follower_caught_up() {
    let out = out_dir("scale");
    let stdout = bench(&["scale", "--sizes", "40,120", "--seconds", "0.3"], &out);
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("scale.json")).unwrap()).unwrap();
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{report}");
    for (row, size) in rows.iter().zip([40, 120]) {
        assert_eq!(row["rows"], size, "{row}");
        assert!(row["asks_per_s"].as_f64().unwrap() > 0.0, "{row}");
        assert_eq!(row["rss_mib"].as_array().unwrap().len(), 3, "{row}");
        // The wiped follower came back holding every row (it can only have them by snapshot).
        assert!(row["catch_up_s"].is_number(), "{row}");
        // The leader's snapshot of the whole catalogue is a file in its data folder.
        assert!(
            row["snapshot_bytes"].as_u64().is_some_and(|b| b > 0),
            "{row}"
        );
        // A backup holds at least every row's key.
        assert!(row["backup_bytes"].as_u64().unwrap() > size * 10, "{row}");
        assert!(row["backup_s"].as_f64().unwrap() > 0.0, "{row}");
        let line = format!("| {size} |");
        assert!(stdout.contains(&line), "{line} missing from\n{stdout}");
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn api_reports_ask_and_invoke_over_grpc_beside_http() {
    let out = out_dir("api");
    let stdout = bench(
        &["api", "--requests", "5", "--rounds", "2", "--rows", "3"],
        &out,
    );
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("api.json")).unwrap()).unwrap();
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{report}");
    for operation in ["ask", "invoke"] {
        for protocol in ["grpc", "http"] {
            let row = rows
                .iter()
                .find(|r| r["operation"] == operation && r["protocol"] == protocol)
                .unwrap_or_else(|| panic!("no figure for {operation} over {protocol}"));
            // Every request of both rounds was answered, over either protocol.
            assert_eq!(row["ok"], 10, "{row}");
            assert_eq!(row["errors"], 0, "{row}");
            assert!(row["latency"]["p99_ms"].as_f64().unwrap() > 0.0, "{row}");
        }
    }
    assert!(stdout.contains("| Ask | Grpc |"), "{stdout}");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn regions_reports_every_node_and_writes_coming_back_when_the_leaders_region_is_cut_off() {
    let out = out_dir("regions");
    let stdout = bench(
        &[
            "regions",
            "--seconds",
            "0.3",
            "--rows",
            "30",
            "--delays-ms",
            "5,10,20",
            "--cut-at-most",
            "60",
        ],
        &out,
    );
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("regions.json")).unwrap()).unwrap();
    let nodes = report["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 5, "{report}");
    for (node, region) in nodes.iter().zip(["a", "b", "b", "a", "c"]) {
        assert_eq!(node["region"], region, "{node}");
        // Every region asks its own copy and writes through its own node, learners too.
        assert!(node["asks_per_s"].as_f64().unwrap() > 0.0, "{node}");
        assert!(node["writes_per_s"].as_f64().unwrap() > 0.0, "{node}");
    }
    // Nodes 4 and 5 joined as learners, and say so themselves.
    let roles: Vec<&str> = nodes.iter().map(|n| n["role"].as_str().unwrap()).collect();
    assert_eq!(&roles[3..], ["learner", "learner"], "{report}");
    assert!(
        roles[..3]
            .iter()
            .all(|r| ["leader", "follower"].contains(r)),
        "{report}"
    );
    let cut = &report["cut"];
    let leader = cut["leader_before"].as_u64().unwrap();
    assert_eq!(
        cut["region"],
        ["a", "b", "b", "a", "c"][leader as usize - 1],
        "{cut}"
    );
    if cut["region"] == "a" {
        // Region b holds two of the three voters: it elects, and every other region
        // writes again before the heal.
        let during = cut["leader_during"].as_u64().unwrap();
        assert!([2, 3].contains(&during), "{cut}");
        for writer in cut["writers"].as_array().unwrap() {
            assert_eq!(writer["resumed"], true, "{writer}");
            assert!(writer["acknowledged_during_cut"].as_u64().unwrap() > 0);
        }
    }
    // Every region keeps asking its own copy through the cut, the cut-off one too.
    let askers = cut["askers"].as_array().unwrap();
    assert_eq!(askers.len(), 3, "{cut}");
    for asker in askers {
        assert!(asker["answered"].as_u64().unwrap() > 0, "{asker}");
        assert_eq!(asker["failed"], 0, "{asker}");
    }
    assert_eq!(
        askers.iter().filter(|a| a["cut_off"] == true).count(),
        1,
        "{cut}"
    );
    // The cut-off leader catches up once the links heal.
    assert!(cut["catch_up_s"].is_number(), "{cut}");
    assert!(stdout.contains("| a | 1 |"), "{stdout}");
    assert!(stdout.contains("writes unavailable"), "{stdout}");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn soak_refuses_settings_that_would_measure_nothing() {
    let out = out_dir("soak-refused");
    for (flag, value, says) in [
        ("--snapshot-every", "0", "--snapshot-every must be positive"),
        ("--clients", "0", "must be positive"),
    ] {
        // Short, so that a run that is not refused ends soon and fails the test.
        let args = ["soak", "--minutes", "0.05", "--rows", "1", flag, value];
        let run = run_bench(&args, &out);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success(), "{flag} {value}: {stderr}");
        assert!(stderr.contains(says), "{flag} {value}: {stderr}");
        assert!(
            !out.exists(),
            "{flag} {value}: refused before anything is started"
        );
    }
}
