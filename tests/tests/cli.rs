//! The `rowcall` command line against a node (the demo catalogue) over gRPC: each subcommand
//! prints text for people and JSON with `--json`, and exits 0 done, 1 failed, 2 usage,
//! 3 not found, 4 no node could answer.

use crate::common;

use common::{start, Run, TestNode, ADMIN};
use rowcall_client::cli::execute;
use rowcall_client::render::Style;
use serde_json::Value;

/// Runs `rowcall --nodes <node> --admin-key <admin> ARGS…` in process.
async fn rowcall(node: &TestNode, args: &[&str]) -> Run {
    let grpc = format!("http://{}", node.handle.grpc_addr);
    let mut argv = vec!["rowcall", "--nodes", &grpc, "--admin-key", ADMIN];
    argv.extend_from_slice(args);
    common::rowcall_cli(argv).await
}

/// Asserts a run succeeded and returns its output.
fn ok(run: Run) -> Run {
    assert_eq!(run.code, 0, "stdout: {}\nstderr: {}", run.out, run.err);
    run
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispatch_subcommands_print_text_and_json_with_their_exit_codes() {
    let node = start(true).await;
    let text = ok(rowcall(&node, &["ask", "what", "time", "is", "it"]).await).out;
    assert!(text.starts_with("#  KEY"), "{text}");
    assert!(text.lines().nth(1).unwrap().contains("TIME_NOW"), "{text}");
    let json =
        ok(rowcall(&node, &["--json", "ask", "what time is it", "--limit", "2"]).await).json();
    assert_eq!(json["best"]["key"], "TIME_NOW");
    assert_eq!(
        json["candidates"].as_array().unwrap().len(),
        json["count"].as_u64().unwrap() as usize
    );

    let contract = ok(rowcall(&node, &["contract", "ECHO"]).await).json();
    assert_eq!(contract["key"], "ECHO");
    let markdown = ok(rowcall(&node, &["contract", "ECHO", "--markdown"]).await).out;
    assert!(markdown.starts_with("# ECHO"), "{markdown}");
    let missing = rowcall(&node, &["contract", "NO_SUCH_ROW"]).await;
    assert_eq!(missing.code, 3, "{}", missing.err);
    assert!(
        missing.err.contains("no row with key \"NO_SUCH_ROW\""),
        "{}",
        missing.err
    );

    let ran = ok(rowcall(
        &node,
        &["invoke", "ECHO", "--arg", "n=3", "--arg", "word=hi"],
    )
    .await);
    assert!(ran.out.contains("\"word\": \"hi\""), "{}", ran.out);
    assert!(ran.out.contains("receipt inv_"), "{}", ran.out);
    let ran = ok(rowcall(
        &node,
        &["--json", "invoke", "ECHO", "--args", r#"{"n": 3}"#],
    )
    .await)
    .json();
    assert_eq!(ran["ok"], true);
    assert_eq!(ran["result"]["echo"]["n"], 3);
    let id = ran["proof"]["invocation_id"].as_str().unwrap().to_owned();
    // A capability that ran and failed: printed, receipt and all, and exit 1.
    let failed = rowcall(&node, &["invoke", "BASE64_DECODE", "--arg", "data=%%%"]).await;
    assert_eq!(failed.code, 1, "{}", failed.out);
    assert!(failed.out.starts_with("failed:"), "{}", failed.out);
    // Arguments refused before anything ran.
    let refused = rowcall(&node, &["invoke", "SHA256_HASH"]).await;
    assert_eq!(refused.code, 1);
    assert!(refused.err.contains("invalid_args"), "{}", refused.err);

    let confirmed = ok(rowcall(&node, &["confirm", &id]).await).out;
    assert!(
        confirmed.starts_with("confirmed: ECHO succeeded at "),
        "{confirmed}"
    );
    let confirmed = ok(rowcall(&node, &["--json", "confirm", &id]).await).json();
    assert_eq!(
        (confirmed["confirmed"].clone(), confirmed["key"].clone()),
        (Value::Bool(true), "ECHO".into())
    );
    assert_eq!(rowcall(&node, &["confirm", "inv_0000000000"]).await.code, 3);

    let receipts = ok(rowcall(&node, &["receipts", "ECHO"]).await).out;
    assert!(
        receipts.starts_with("ID") && receipts.contains(&id),
        "{receipts}"
    );
    let one = ok(rowcall(&node, &["--json", "receipts", &id]).await).json();
    assert_eq!(
        (one["id"].as_str(), one["caller"].as_str()),
        (Some(id.as_str()), Some("admin"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_subcommands_print_text_and_json_with_their_exit_codes() {
    let node = start(true).await;
    let dir = tempfile::tempdir().unwrap();
    let one = dir.path().join("one.json");
    std::fs::write(
        &one,
        r##"{"key": "CLI_ROW", "type": "static", "auth": "public", "category": "Cli", "content": "# WHAT: A row from the command line\n\nhello"}"##,
    )
    .unwrap();
    let put = ok(rowcall(&node, &["put", one.to_str().unwrap()]).await).out;
    assert!(put.starts_with("created CLI_ROW (version "), "{put}");
    let many = dir.path().join("many.json");
    std::fs::write(
        &many,
        r##"[{"key": "CLI_A", "type": "static", "category": "Cli", "content": "# WHAT: a\n"},
            {"key": "CLI_B", "type": "static", "category": "Cli", "content": "# WHAT: b\n"}]"##,
    )
    .unwrap();
    let put = ok(rowcall(&node, &["--json", "put", many.to_str().unwrap()]).await).json();
    assert_eq!(put["rows"].as_array().unwrap().len(), 2);
    assert_eq!(put["rows"][0]["version"], put["index"]);
    // --batch splits a file into writes of that many rows: three rows, three writes.
    let three = dir.path().join("three.json");
    std::fs::write(
        &three,
        r##"[{"key": "CLI_C", "type": "static", "category": "Batch", "content": "# WHAT: c\n"},
            {"key": "CLI_D", "type": "static", "category": "Batch", "content": "# WHAT: d\n"},
            {"key": "CLI_E", "type": "static", "category": "Batch", "content": "# WHAT: e\n"}]"##,
    )
    .unwrap();
    let args = ["--json", "put", "--batch", "1", three.to_str().unwrap()];
    let batched = ok(rowcall(&node, &args).await).json();
    let versions: Vec<u64> = batched["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["version"].as_u64().unwrap())
        .collect();
    assert_eq!(versions.len(), 3, "{batched}");
    assert!(versions.windows(2).all(|w| w[0] < w[1]), "{batched}");
    assert_eq!(batched["index"], versions[2], "{batched}");
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"key": "lower", "type": "static"}"#).unwrap();
    let refused = rowcall(&node, &["put", bad.to_str().unwrap()]).await;
    assert_eq!(refused.code, 1);
    assert!(refused.err.contains("invalid_row"), "{}", refused.err);

    let got = ok(rowcall(&node, &["get", "CLI_ROW"]).await).out;
    assert!(
        got.starts_with("CLI_ROW (version ") && got.contains("hello"),
        "{got}"
    );
    let got = ok(rowcall(&node, &["--json", "get", "CLI_ROW"]).await).json();
    assert_eq!(
        (got["type"].as_str(), got["auth"].as_str()),
        (Some("static"), Some("public"))
    );
    assert_eq!(rowcall(&node, &["get", "NO_SUCH_ROW"]).await.code, 3);

    let page = ok(rowcall(&node, &["ls", "--category", "cli", "--limit", "2"]).await).out;
    assert!(
        page.starts_with("KEY") && page.contains("CLI_A") && page.contains("more: --cursor"),
        "{page}"
    );
    let all = ok(rowcall(
        &node,
        &["--json", "ls", "--category", "cli", "--limit", "2", "--all"],
    )
    .await)
    .json();
    let keys: Vec<&str> = all["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["CLI_A", "CLI_B", "CLI_ROW"]);

    let counts = ok(rowcall(&node, &["counts"]).await).out;
    assert!(
        counts.starts_with("COUNT") && counts.contains("rows_total"),
        "{counts}"
    );
    let counts = ok(rowcall(&node, &["--json", "counts"]).await).json();
    let total = counts["rows_total"].as_u64().unwrap();

    // The bulk write's two rows, replayed from just before its index, then a reset from 0
    // (older than what the node retains: list again).
    let bulk = put["index"].as_u64().unwrap();
    let since = (bulk - 1).to_string();
    let watched = ok(rowcall(
        &node,
        &["--json", "watch", "--since", &since, "--count", "2"],
    )
    .await)
    .out;
    let events: Vec<Value> = watched
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seen: Vec<(&str, &str, u64)> = events
        .iter()
        .map(|e| {
            (
                e["op"].as_str().unwrap(),
                e["key"].as_str().unwrap(),
                e["index"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(seen, [("put", "CLI_A", bulk), ("put", "CLI_B", bulk)]);
    let text = ok(rowcall(&node, &["watch", "--since", &since, "--count", "1"]).await).out;
    assert_eq!(text, format!("{bulk:>8}  put     CLI_A\n"));
    let reset = ok(rowcall(&node, &["watch", "--since", "0", "--count", "1"]).await).out;
    assert!(
        reset.ends_with("reset  (changes missed: list again)\n"),
        "{reset}"
    );

    let removed = ok(rowcall(&node, &["rm", "CLI_A"]).await).out;
    assert!(removed.starts_with("deleted CLI_A (index "), "{removed}");
    assert_eq!(rowcall(&node, &["rm", "CLI_A"]).await.code, 3);
    let counts = ok(rowcall(&node, &["--json", "counts"]).await).json();
    assert_eq!(counts["rows_total"].as_u64(), Some(total - 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_and_tooling_subcommands_and_failures_exit_as_documented() {
    let node = start(true).await;
    let status = ok(rowcall(&node, &["cluster", "status"]).await).out;
    assert!(status.starts_with("node 1 is leader"), "{status}");
    // With the admin key, everything: the cluster id and incarnations too.
    let identity = node.handle.app.identity.get();
    let cluster = identity.cluster_id.unwrap();
    assert!(status.contains(&format!("cluster {cluster}")), "{status}");
    assert!(status.contains(&identity.incarnation), "{status}");
    let status = ok(rowcall(&node, &["--json", "cluster", "status"]).await).json();
    assert_eq!(status["members"][0]["leader"], true);
    assert_eq!(status["cluster_id"], cluster.as_str());
    assert_eq!(
        status["members"][0]["incarnation"],
        identity.incarnation.as_str()
    );
    let snapshot = ok(rowcall(&node, &["cluster", "snapshot"]).await).out;
    assert_eq!(snapshot, "snapshot started\n");
    let refused = rowcall(&node, &["cluster", "promote", "9"]).await;
    assert_eq!(refused.code, 1);
    assert!(refused.err.contains("not a member"), "{}", refused.err);
    // Leadership moves only to a voter; on a one-voter cluster it stays where it is.
    let moved = ok(rowcall(&node, &["cluster", "move-leader", "1"]).await).out;
    assert_eq!(moved, "node 1 leads\n");
    let refused = rowcall(&node, &["cluster", "move-leader", "9"]).await;
    assert_eq!(refused.code, 1);
    assert!(
        refused.err.contains("node 9 is not a voter"),
        "{}",
        refused.err
    );
    let alone = rowcall(&node, &["cluster", "move-leader"]).await;
    assert_eq!(alone.code, 1);
    assert!(alone.err.contains("no other voter"), "{}", alone.err);

    // The node's HTTP address comes from the cluster; the node's SSRF guard refuses loopback.
    let import = rowcall(&node, &["import-mcp", "http://127.0.0.1:9/mcp"]).await;
    assert_eq!(import.code, 1);
    assert!(import.err.contains("refused"), "{}", import.err);

    let dir = tempfile::tempdir().unwrap();
    let queries = dir.path().join("q.jsonl");
    std::fs::write(
        &queries,
        "{\"q\": \"what time is it\", \"gold\": [\"TIME_NOW\"]}\n",
    )
    .unwrap();
    let eval = ok(rowcall(&node, &["eval", queries.to_str().unwrap()]).await).out;
    assert!(eval.contains("top-1     1.000"), "{eval}");

    let completions = ok(rowcall(&node, &["completions", "bash"]).await).out;
    assert!(
        completions.contains("_rowcall()"),
        "{}",
        &completions[..200.min(completions.len())]
    );
    let man = ok(rowcall(&node, &["man"]).await).out;
    assert!(
        man.contains(".TH rowcall"),
        "{}",
        &man[..200.min(man.len())]
    );

    let usage = rowcall(&node, &["frobnicate"]).await;
    assert_eq!(usage.code, 2);
    assert!(
        usage.err.contains("unrecognized subcommand"),
        "{}",
        usage.err
    );
    let help = ok(rowcall(&node, &["--help"]).await).out;
    assert!(help.contains("Exit codes"), "{help}");

    let (mut out, mut err) = (Vec::new(), Vec::new());
    let argv = [
        "rowcall",
        "--nodes",
        "http://127.0.0.1:1",
        "--timeout",
        "1s",
        "counts",
    ];
    let code = execute(argv, &mut out, &mut err, Style::plain()).await;
    assert_eq!(code, 4, "{}", String::from_utf8_lossy(&err));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_saves_a_whole_private_file_and_says_what_it_holds() {
    let node = start(true).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("catalogue.backup");
    let path = file.to_str().unwrap();
    let text = ok(rowcall(&node, &["backup", path]).await).out;
    assert!(text.starts_with("backup of index "), "{text}");
    let json = ok(rowcall(&node, &["--json", "backup", path]).await).json();
    let bytes = std::fs::read(&file).unwrap();
    assert_eq!(json["bytes"].as_u64(), Some(bytes.len() as u64), "{json}");
    let first = String::from_utf8_lossy(&bytes[..bytes.iter().position(|&b| b == b'\n').unwrap()])
        .into_owned();
    let header: Value = serde_json::from_str(&first).unwrap();
    assert_eq!(
        header["backup"]["log_id"]["index"], json["index"],
        "{first}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "a backup holds secrets");
    }
    // Without the admin key: refused, and nothing is written.
    let grpc = format!("http://{}", node.handle.grpc_addr);
    let other = dir.path().join("refused.backup");
    let argv = [
        "rowcall",
        "--nodes",
        &grpc,
        "backup",
        other.to_str().unwrap(),
    ];
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = execute(argv, &mut out, &mut err, Style::plain()).await;
    assert_eq!(code, 1, "{}", String::from_utf8_lossy(&err));
    assert!(!other.exists());
    node.handle.shutdown().await;
}

/// A secured node (peers over mutual TLS, HTTPS for clients, one private CA): `--ca` lets
/// `rowcall backup` reach it over gRPC for its address and over HTTPS for the backup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_reaches_a_secured_node_through_its_ca() {
    let certs = tempfile::tempdir().unwrap();
    let ca = common::tls::TestCa::new(certs.path(), "secured");
    let https = rowcall_node::config::HttpsConfig {
        cert_file: certs.path().join("https-cert.pem"),
        key_file: certs.path().join("https-key.pem"),
        reload_secs: 60,
    };
    let (cert, key) = ca.issue("rowcall https");
    std::fs::write(&https.cert_file, cert).unwrap();
    std::fs::write(&https.key_file, key).unwrap();
    let peer = ca.node("node-1");
    let node = common::start_with(true, move |config| {
        config.node.https = Some(https);
        config.cluster.tls = Some(peer);
        config.cluster.secret = Some("a-cluster-secret-of-enough-length-0123".into());
    })
    .await;
    assert!(node.url.starts_with("https://"), "{}", node.url);
    let ca_file = certs.path().join("ca.pem");
    std::fs::write(&ca_file, ca.ca_pem()).unwrap();
    let grpc = node.handle.grpc_addr.to_string();
    let file = certs.path().join("secured.backup");
    let ca_path = ca_file.to_str().unwrap().to_owned();
    let run = |with_ca: bool| {
        let mut argv = vec!["rowcall", "--nodes", &grpc, "--admin-key", ADMIN];
        if with_ca {
            argv.extend(["--ca", &ca_path]);
        }
        argv.extend([
            "--timeout",
            "5s",
            "--json",
            "backup",
            file.to_str().unwrap(),
        ]);
        async move {
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let code = execute(argv, &mut out, &mut err, Style::plain()).await;
            let said = String::from_utf8_lossy(&out).into_owned() + &String::from_utf8_lossy(&err);
            (code, said)
        }
    };
    let (code, said) = run(false).await;
    assert_ne!(code, 0, "no CA, no TLS: {said}");
    assert!(!file.exists());
    let (code, said) = run(true).await;
    assert_eq!(code, 0, "{said}");
    let saved: Value = serde_json::from_str(&said).unwrap_or_else(|e| panic!("{e}: {said}"));
    assert_eq!(
        saved["bytes"].as_u64(),
        Some(std::fs::metadata(&file).unwrap().len())
    );
    node.handle.shutdown().await;
}
