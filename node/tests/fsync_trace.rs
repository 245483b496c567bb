//! Durable means on the platter (issue 10, item 2), checked from outside the process: the
//! real binary runs under `strace -f` while it acknowledges inserts, bulk writes over
//! 128 KiB (whose values sled puts in blob files) and invocations, one at a time. From the
//! trace, for every acknowledgement: a write to a file in the data folder that carries the
//! request's data (its row keys, or its receipt id) — the Raft log entry — must be followed
//! by an `fsync`/`fdatasync` of that same file that returned before the answer was written
//! to the client's socket, and a file created for it (a blob) by an `fsync` of its folder.
//! sled's own `sync_file_range` does not count. The state machine's copy may reach the disk
//! later: a crash that takes it back leaves the entry in the log, which is re-applied.
//!
//! Needs Debian's `strace` (`.ci/run` installs it); without it the test fails and says so.

mod support;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use support::{spawn_under, ADMIN};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One completed system call from the trace.
#[derive(Debug, Clone)]
struct Call {
    name: String,
    start: f64,
    end: f64,
    /// The first argument's path (`-yy`), for a file, folder or socket.
    target: String,
    /// The rest of the arguments as strace printed them (data included).
    args: String,
    /// The return value's text (`0`, `4096`, `14</path>`, `-1 EIO (...)`).
    result: String,
}

fn strace_available() -> bool {
    std::process::Command::new("strace")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Parses `strace -f -ttt -yy` output, joining `<unfinished ...>` and `<... resumed>` halves.
fn parse(trace: &str) -> Vec<Call> {
    let mut pending: HashMap<&str, (f64, String)> = HashMap::new();
    let mut calls = Vec::new();
    for line in trace.lines() {
        // strace pads the pid column to five characters: "812   1796..." and "31337 1796...".
        let Some((pid, line)) = line.split_once(' ') else {
            continue;
        };
        let Some((ts, rest)) = line.trim_start().split_once(' ') else {
            continue;
        };
        let Ok(ts) = ts.parse::<f64>() else { continue };
        let rest = rest.trim_start();
        let (start, text) = if let Some(resumed) = rest.strip_prefix("<... ") {
            let Some((_, tail)) = resumed.split_once(" resumed>") else {
                continue;
            };
            let Some((start, head)) = pending.remove(pid) else {
                continue;
            };
            (start, format!("{head}{tail}"))
        } else if let Some(head) = rest.strip_suffix(" <unfinished ...>") {
            pending.insert(pid, (ts, head.to_owned()));
            continue;
        } else {
            (ts, rest.to_owned())
        };
        let Some((name, args)) = text.split_once('(') else {
            continue;
        };
        let Some((args, result)) = args.rsplit_once(") = ") else {
            continue;
        };
        calls.push(Call {
            name: name.to_owned(),
            start,
            end: ts,
            target: first_target(args).unwrap_or_default(),
            args: args.to_owned(),
            result: result.trim().to_owned(),
        });
    }
    calls
}

/// `12</path>` or `7<TCP:[a:1->b:2]>` at the start of an argument list: the part in `<>`.
fn first_target(args: &str) -> Option<String> {
    let open = args.find('<')?;
    let inner = &args[open + 1..];
    let end = if inner.starts_with("TCP:[") {
        inner.find("]>")? + 1
    } else {
        inner.find('>')?
    };
    Some(inner[..end].to_owned())
}

/// The path in a result like `14</data/sled/blobs/7>`.
fn result_path(result: &str) -> Option<&str> {
    let open = result.find('<')?;
    let close = result.rfind('>')?;
    (close > open).then(|| &result[open + 1..close])
}

/// How the trace names the node's end of the connection from `client_port`: with the
/// kernel's socket diagnostics `TCP:[node->client]`, without them (as in some containers)
/// `TCP:[inode]` or `socket:[inode]`. The `accept4` that took the connection ties the
/// client's port (decoded from its arguments) to that name either way.
fn client_socket(calls: &[Call], client_port: u16) -> Option<String> {
    let peer = format!("sin_port=htons({client_port})");
    calls
        .iter()
        .filter(|c| c.name.starts_with("accept") && c.args.contains(&peer))
        .find_map(|c| result_path(&c.result).map(str::to_owned))
}

/// One acknowledged request: the markers of its data, and the client port it answered.
struct Ack {
    what: String,
    markers: Vec<String>,
    port: u16,
}

/// Sends one HTTP/1.1 request on a fresh connection; returns (client port, status, body).
async fn exchange(addr: &str, method: &str, path: &str, body: &Value) -> (u16, u16, Value) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let port = stream.local_addr().unwrap().port();
    let body = body.to_string();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nx-terminal-key: {ADMIN}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    let status = answer[9..12].parse().unwrap();
    let json = answer
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    (port, status, json)
}

fn row(key: &str, filler: usize) -> Value {
    json!({"key": key, "type": "static", "auth": "public",
           "content": format!("# WHAT: fsync probe {key}\n\n{}", "x".repeat(filler))})
}

/// Checks one acknowledgement against the trace; returns how many writes of its data were
/// made durable before the answer (fsync/fdatasync of the file, and of its folder when the
/// file was created for it).
fn durable_writes(ack: &Ack, calls: &[Call], data: &str) -> usize {
    let socket = client_socket(calls, ack.port)
        .unwrap_or_else(|| panic!("{}: no accept of port {} in the trace", ack.what, ack.port));
    let answered = calls
        .iter()
        .filter(|c| c.target == socket)
        .find(|c| c.args.contains("HTTP/1.1 2"))
        .unwrap_or_else(|| panic!("{}: no answer on {socket} in the trace", ack.what));
    let synced = |path: &str, after: f64| {
        calls.iter().any(|c| {
            (c.name == "fsync" || c.name == "fdatasync")
                && c.target == path
                && c.start >= after
                && c.end <= answered.start
                && c.result == "0"
        })
    };
    let writes: Vec<&Call> = calls
        .iter()
        .filter(|c| {
            c.name.contains("write") && c.target.starts_with(data) && c.end <= answered.start
        })
        .filter(|c| ack.markers.iter().any(|m| c.args.contains(m.as_str())))
        .collect();
    assert!(
        !writes.is_empty(),
        "{}: its data was never written before the answer",
        ack.what
    );
    let durable = |write: &&&Call| {
        // A file created for this data needs its folder entry synced too.
        let created = calls.iter().find(|c| {
            c.name.starts_with("open")
                && c.args.contains("O_CREAT")
                && result_path(&c.result) == Some(write.target.as_str())
        });
        let folder_synced = created.is_none_or(|created| {
            let folder = Path::new(&write.target).parent().unwrap().to_str().unwrap();
            synced(folder, created.end)
        });
        synced(&write.target, write.end) && folder_synced
    };
    writes.iter().filter(durable).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_file_written_for_an_acknowledgement_is_fsynced_before_the_answer_leaves() {
    assert!(
        strace_available(),
        "this test needs strace (Debian: apt-get install -y strace; .ci/run installs it)"
    );
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let trace_path = dir.path().join("trace.txt");
    let trace_arg = trace_path.to_str().unwrap();
    let wrapper = [
        "strace", "-f", "-qq", "-ttt", "-yy", "-s", "1048576", "-o", trace_arg, "-e",
        "trace=accept4,openat,write,pwrite64,writev,pwritev,pwritev2,sendto,sendmsg,fsync,fdatasync,sync_file_range",
    ];
    let args = [
        "--http",
        "127.0.0.1:0",
        "--grpc",
        "127.0.0.1:0",
        "--no-demo",
    ];
    // The trace finds each write by the bytes it carries, which sled's compression hides;
    // what is synced, and when, is the same with it on (`store::durable` knows no difference).
    let config = dir.path().join("rowcall.toml");
    std::fs::write(&config, "[storage]\ncompression = false\n").unwrap();
    let node = spawn_under(&wrapper, &args, &data, Some(&config));
    let http = reqwest::Client::new();
    support::wait_ready(&http, &node.url).await;

    let mut acks = Vec::new();
    for i in 0..8 {
        let key = format!("FSYNC_ONE_{i:03}");
        let (port, status, body) =
            exchange(&node.http, "POST", "/api/directory", &row(&key, 64)).await;
        assert_eq!(status, 201, "{body}");
        acks.push(Ack {
            what: format!("insert {key}"),
            markers: vec![key],
            port,
        });
    }
    for b in 0..3 {
        // Three rows of 60 KiB: one entry of about 180 KiB, over sled's 128 KiB blob limit.
        let keys: Vec<String> = (0..3).map(|r| format!("FSYNC_BULK_{b}_{r}")).collect();
        let rows: Vec<Value> = keys.iter().map(|k| row(k, 60 * 1024)).collect();
        let (port, status, body) =
            exchange(&node.http, "POST", "/api/directory", &json!(rows)).await;
        assert_eq!(status, 200, "{body}");
        acks.push(Ack {
            what: format!("bulk write {b}"),
            markers: keys,
            port,
        });
    }
    for i in 0..3 {
        let (port, status, body) = exchange(
            &node.http,
            "POST",
            "/api/dispatch",
            &json!({"key": format!("FSYNC_ONE_{i:03}")}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let id = body["proof"]["invocation_id"].as_str().unwrap().to_owned();
        acks.push(Ack {
            what: format!("invocation {id}"),
            markers: vec![id],
            port,
        });
    }

    // SIGKILL the node (strace's child): strace then writes out the rest and exits.
    let mut strace = node;
    let children =
        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", strace.child.id()))
            .expect("strace's children");
    let pid = children
        .split_whitespace()
        .next()
        .expect("the node runs under strace");
    let killed = std::process::Command::new("kill")
        .args(["-KILL", pid])
        .status()
        .unwrap();
    assert!(killed.success());
    tokio::task::spawn_blocking(move || strace.child.wait())
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;

    let trace = std::fs::read_to_string(&trace_path).unwrap();
    let calls = parse(&trace);
    let data = data.to_str().unwrap();
    let mut blob_writes = 0;
    for ack in &acks {
        assert!(
            durable_writes(ack, &calls, data) >= 1,
            "{}: no write of its data (its log entry) was made durable before the answer",
            ack.what
        );
    }
    for ack in acks.iter().filter(|a| a.what.starts_with("bulk")) {
        blob_writes += calls
            .iter()
            .filter(|c| c.name.contains("write") && c.target.contains("/blobs/"))
            .filter(|c| ack.markers.iter().any(|m| c.args.contains(m.as_str())))
            .count();
    }
    assert!(
        blob_writes >= 3,
        "the bulk writes went through sled's blob files ({blob_writes})"
    );
    assert!(
        calls.iter().any(|c| c.name == "sync_file_range"),
        "sled's own sync is in the trace, and not counted as durable"
    );
}
