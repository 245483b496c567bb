//! A snapshot of a large receipt log is streamed, never held whole (issue 11): a state
//! machine holding 20,000 receipts of about 1 KiB each builds a snapshot of them (some
//! 20 MB of lines), and the process's peak resident size is read from Linux (`VmHWM`,
//! reset through `/proc/self/clear_refs`). The build may hold a write buffer and one
//! receipt at a time, so its peak above the resident size before it must stay far below
//! the file's size; a build that collected the receipts, or serialised the body into one
//! buffer, would hold at least the whole file. The install on a second state machine may
//! hold what sled's own cache holds for the receipts (measured as the peak of applying
//! them) and little more.

use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
use rowcall_node::catalogue::SharedCatalogue;
use rowcall_node::config::SyncMode;
use rowcall_node::model::receipt::Receipt;
use rowcall_node::raft::{log_id, Entry, EntryPayload};
use rowcall_node::raft::{Command, Request};
use rowcall_node::store::{Durable, StateMachine};

/// A `kB` line of /proc/self/status, in bytes.
fn status_bytes(field: &str) -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"));
    let kb: usize = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("a number of kB");
    kb * 1024
}

/// Resets the process's peak resident size to its current one (Linux `clear_refs` 5), and
/// returns the current one.
fn reset_peak() -> usize {
    std::fs::write("/proc/self/clear_refs", "5").expect("resetting the peak RSS");
    status_bytes("VmRSS:")
}

/// The peak resident size since the last reset, above `base`.
fn peak_above(base: usize) -> usize {
    status_bytes("VmHWM:").saturating_sub(base)
}

const RECEIPTS: u64 = 20_000;

fn receipt(index: u64) -> Receipt {
    serde_json::from_value(serde_json::json!({
        "id": format!("inv_{index:010}"), "key": "ECHO", "row_version": 1, "caller": "public",
        "input_sha256": "", "output_sha256": "", "ok": true,
        "started_at": "2026-01-01T00:00:00.000Z", "duration_ms": 1, "served_by": 1,
        "input": "{}", "output": format!("{index:>1000}"), "store_cap_bytes": 1024,
        "index": 0,
    }))
    .expect("a receipt")
}

fn machine(dir: &std::path::Path) -> StateMachine {
    let storage = Durable::open(&dir.join("sled"), SyncMode::SledFlush).expect("sled");
    StateMachine::open(&storage, &dir.join("snapshots"), SharedCatalogue::default())
        .expect("state machine")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn building_a_snapshot_of_a_large_receipt_log_never_holds_it_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut leader = machine(&dir.path().join("leader"));
    // For comparison: what writing the same receipts into sled by applies takes.
    let before = reset_peak();
    for chunk in (1..=RECEIPTS).collect::<Vec<_>>().chunks(1_000) {
        let entries: Vec<Entry> = chunk
            .iter()
            .map(|&i| Entry {
                log_id: log_id(1, 1, i),
                payload: EntryPayload::Normal(Request::new(Command::AppendReceipt {
                    receipt: Box::new(receipt(i)),
                })),
            })
            .collect();
        leader.apply_entries(entries).await.unwrap();
    }

    let apply_peak = peak_above(before);

    let before = reset_peak();
    let snapshot = leader
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    let build_peak = peak_above(before);
    // The state's size: the file's lines (compressed at rest, they are what is sent).
    let lines = rowcall_node::store::snapshot::packed::lines(
        std::fs::File::open(snapshot.snapshot.path()).unwrap(),
    )
    .unwrap();
    let size = std::io::copy(&mut { lines }, &mut std::io::sink()).unwrap() as usize;
    assert!(size > 20_000_000, "the snapshot's lines are {size} bytes");

    let mut follower = machine(&dir.path().join("follower"));
    let before = reset_peak();
    follower
        .install_snapshot(&snapshot.meta, snapshot.snapshot)
        .await
        .unwrap();
    let install_peak = peak_above(before);
    println!(
        "snapshot of {RECEIPTS} receipts: {size} bytes of lines; resident peak above the start: \
         applying them {apply_peak} bytes, build {build_peak} bytes, install {install_peak} bytes"
    );
    assert!(
        build_peak < size / 4,
        "the build held {build_peak} bytes at its peak for a {size}-byte snapshot"
    );
    // Installing holds about what sled holds for the same receipts written by applies; an
    // install that read the file whole, or staged all receipts in one batch, holds several
    // times the file on top.
    assert!(
        install_peak < apply_peak + size / 2,
        "the install held {install_peak} bytes at its peak; applies {apply_peak}"
    );
    assert_eq!(
        follower.receipts().digest().unwrap(),
        leader.receipts().digest().unwrap()
    );
}
