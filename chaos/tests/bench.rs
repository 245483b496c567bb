//! `rowcall-bench writes` runs to completion at a tiny size and reports a figure for every
//! system and client count; `rowcall-bench api` reports ask and invoke over gRPC and HTTP
//! (no timing is asserted: speed is what the benches measure).
//!
//! Needs the rowcall-node binary of the same profile (`cargo test --workspace` builds it;
//! alone: `cargo build -p rowcall-node`). etcd is measured when it is installed, and the
//! report says it was skipped when it is not.

use std::process::Command;

use serde_json::Value;

#[test]
fn writes_reports_every_system_at_every_client_count() {
    let node = rowcall_chaos::cluster::node_binary(None).expect(
        "rowcall-node binary next to the test (build it first: cargo build -p rowcall-node)",
    );
    let out = std::env::temp_dir().join(format!("rowcall-bench-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let run = Command::new(env!("CARGO_BIN_EXE_rowcall-bench"))
        .args([
            "writes",
            "--clients",
            "1,3",
            "--seconds",
            "0.3",
            "--rounds",
            "2",
        ])
        .arg("--out")
        .arg(&out)
        .arg("--node-bin")
        .arg(&node)
        .output()
        .expect("rowcall-bench runs");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "rowcall-bench failed: {}\n{stdout}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
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
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn api_reports_ask_and_invoke_over_grpc_beside_http() {
    let node = rowcall_chaos::cluster::node_binary(None).expect(
        "rowcall-node binary next to the test (build it first: cargo build -p rowcall-node)",
    );
    let out = std::env::temp_dir().join(format!("rowcall-bench-api-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let run = Command::new(env!("CARGO_BIN_EXE_rowcall-bench"))
        .args(["api", "--requests", "5", "--rounds", "2", "--rows", "3"])
        .arg("--out")
        .arg(&out)
        .arg("--node-bin")
        .arg(&node)
        .output()
        .expect("rowcall-bench runs");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "rowcall-bench api failed: {}\n{stdout}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
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
