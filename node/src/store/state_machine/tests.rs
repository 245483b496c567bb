//! State machine unit tests: request ids, staged publication, receipts, timestamps,
//! snapshots, and commands no apply may panic or fail on.

use std::time::Duration;

use openraft::storage::RaftSnapshotBuilder;

use super::*;
use crate::config::SyncMode;
use crate::model::share::ShareSecret;
use crate::model::time::{format_ms, MAX_MS};

fn entry(index: u64, request: Request) -> Entry {
    Entry {
        log_id: crate::raft::log_id(1, 1, index),
        payload: EntryPayload::Normal(request),
    }
}

/// A state machine on its own folder (sled in `sled/`, snapshots in `snapshots/`), and the
/// catalogue it publishes to.
fn machine(dir: &std::path::Path) -> (StateMachine, SharedCatalogue, Durable) {
    let storage = open_storage(dir);
    let catalogue = SharedCatalogue::default();
    let sm = StateMachine::open(&storage, &dir.join("snapshots"), catalogue.clone()).unwrap();
    (sm, catalogue, storage)
}

/// The folder's sled database. A machine of the same folder dropped a moment ago may still
/// hold its lock: sled lets go once its background thread has (seen on a loaded machine).
fn open_storage(dir: &std::path::Path) -> Durable {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        match Durable::open(&dir.join("sled"), SyncMode::Fdatasync) {
            Err(e)
                if e.to_string().contains("could not acquire lock")
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            opened => return opened.unwrap(),
        }
    }
}

/// The bytes a leader sends of the snapshot file at `path`: its lines, unpacked.
fn sent_bytes(path: &std::path::Path) -> Vec<u8> {
    let mut out = Vec::new();
    std::io::Read::read_to_end(
        &mut snapshot::packed::lines(std::fs::File::open(path).unwrap()).unwrap(),
        &mut out,
    )
    .unwrap();
    out
}

/// What a snapshot file holds, read whole (small test snapshots only).
#[derive(Debug, Default)]
struct Contents {
    rows: Vec<Row>,
    receipts: Vec<Receipt>,
    requests: Vec<Record>,
}

fn contents(path: &std::path::Path) -> Contents {
    use snapshot::format::{Line, Reader};
    let file = snapshot::packed::lines(std::fs::File::open(path).unwrap()).unwrap();
    let (_, mut reader) = Reader::new(file).unwrap();
    let mut out = Contents::default();
    while let Some(line) = reader.next().unwrap() {
        match line {
            Line::Row(row) => out.rows.push(row),
            Line::Receipt(receipt) => out.receipts.push(receipt),
            Line::Request(record) => out.requests.push(record),
            Line::Leaf(_) => {}
            Line::Header(_) | Line::End(_) => unreachable!(),
        }
    }
    out
}

/// The files in a machine's snapshot folder.
fn snapshot_files(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("snapshots"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn input(key: &str, content: &str) -> RowInput {
    serde_json::from_value(serde_json::json!({
        "key": key, "type": "static", "content": content,
    }))
    .unwrap()
}

fn put(at_ms: u64, rows: Vec<RowInput>) -> Command {
    Command::PutRows { at_ms, rows }
}

fn id(text: &str) -> RequestId {
    RequestId::parse(text).unwrap()
}

fn receipt(id: &str, output: &str) -> Receipt {
    Receipt {
        output: output.into(),
        ..Receipt::sample(id)
    }
}

fn append(receipt: Receipt) -> Command {
    Command::AppendReceipt {
        receipt: Box::new(receipt),
    }
}

#[tokio::test]
async fn a_repeated_request_id_is_answered_with_the_first_outcome_and_applied_once() {
    let dir = tempfile::tempdir().unwrap();
    let (mut sm, catalogue, _) = machine(dir.path());
    let mut create = input("ONCE", "# WHAT: first\n");
    create.if_version = Some(0);
    let first = sm
        .apply_entries([entry(
            1,
            Request::with_id(id("k-1"), put(1_000, vec![create.clone()])),
        )])
        .await
        .unwrap();
    // The retry comes through another node: another clock, same rows, same key.
    let again = sm
        .apply_entries([entry(
            2,
            Request::with_id(id("k-1"), put(9_000, vec![create.clone()])),
        )])
        .await
        .unwrap();
    assert_eq!(
        again[0],
        CommandResult::Replayed {
            index: 1,
            first: Box::new(first[0].clone())
        },
        "an if_version retry of a write that won gets its first outcome, not a conflict"
    );
    let row = catalogue.read().get("ONCE").unwrap();
    assert_eq!(
        (row.version, row.updated_at.to_string()),
        (1, format_ms(1_000))
    );

    // The same key for a different request is refused, and changes nothing.
    let other = sm
        .apply_entries([entry(
            3,
            Request::with_id(
                id("k-1"),
                put(9_000, vec![input("ONCE", "# WHAT: other\n")]),
            ),
        )])
        .await
        .unwrap();
    assert_eq!(
        other[0],
        CommandResult::RequestIdReused {
            request_id: id("k-1"),
            index: 1
        }
    );
    assert_eq!(catalogue.read().get("ONCE").unwrap().version, 1);

    // Two attempts in one batch: the second sees the first.
    let both = sm
        .apply_entries([
            entry(
                4,
                Request::with_id(id("k-2"), put(10, vec![input("TWICE", "")])),
            ),
            entry(
                5,
                Request::with_id(id("k-2"), put(11, vec![input("TWICE", "")])),
            ),
        ])
        .await
        .unwrap();
    assert!(
        matches!(both[1], CommandResult::Replayed { index: 4, .. }),
        "{both:?}"
    );
    assert_eq!(catalogue.read().get("TWICE").unwrap().version, 4);
}

#[tokio::test]
async fn remembered_request_ids_travel_in_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let (mut sm, _, _) = machine(&dir.path().join("a"));
    sm.apply_entries([entry(
        1,
        Request::with_id(
            id("snap-key"),
            Command::DeleteRow {
                key: "GONE".into(),
                if_version: None,
            },
        ),
    )])
    .await
    .unwrap();
    let snapshot = sm
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    let (mut other, _, _) = machine(&dir.path().join("b"));
    other
        .install_snapshot(&snapshot.meta, snapshot.snapshot)
        .await
        .unwrap();
    let again = other
        .apply_entries([entry(
            2,
            Request::with_id(
                id("snap-key"),
                Command::DeleteRow {
                    key: "GONE".into(),
                    if_version: None,
                },
            ),
        )])
        .await
        .unwrap();
    assert!(
        matches!(again[0], CommandResult::Replayed { index: 1, .. }),
        "{again:?}"
    );
}

#[tokio::test]
async fn later_entries_of_a_batch_see_earlier_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (mut sm, catalogue, _) = machine(dir.path());
    let mut create = input("BATCHED", "# WHAT: v1\n");
    create.if_version = Some(0);
    let mut update = input("BATCHED", "# WHAT: v2\n");
    update.if_version = Some(1);
    let results = sm
        .apply_entries([
            entry(1, Request::new(put(1, vec![create]))),
            entry(2, Request::new(put(2, vec![update]))),
            entry(
                3,
                Request::new(Command::DeleteRow {
                    key: "BATCHED".into(),
                    if_version: Some(2),
                }),
            ),
            entry(
                4,
                Request::new(Command::DeleteRow {
                    key: "BATCHED".into(),
                    if_version: None,
                }),
            ),
        ])
        .await
        .unwrap();
    assert!(
        matches!(results[0], CommandResult::Put { .. }),
        "{results:?}"
    );
    assert!(
        matches!(results[1], CommandResult::Put { .. }),
        "{results:?}"
    );
    assert_eq!(results[2], CommandResult::Deleted { deleted: 1 });
    assert_eq!(results[3], CommandResult::Deleted { deleted: 0 });
    assert!(catalogue.read().get("BATCHED").is_none());
    assert_eq!(catalogue.index(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_shown_with_its_index_without_waiting_for_a_sync() {
    // The entries are durable in the log before openraft applies them, so apply must not
    // wait for a sync of its own: with every sync held up for an hour, it still returns.
    let dir = tempfile::tempdir().unwrap();
    let (mut sm, catalogue, storage) = machine(dir.path());
    let applied = sm.applied_index();
    storage.slow_down(Duration::from_secs(3600));
    tokio::time::timeout(
        Duration::from_secs(60),
        sm.apply_entries([
            entry(1, Request::new(put(1, vec![input("EARLY", "")]))),
            entry(2, Request::new(put(2, vec![input("LATE", "")]))),
        ]),
    )
    .await
    .expect("apply waited for a sync")
    .unwrap();
    storage.slow_down(Duration::ZERO);
    let shown = catalogue.read();
    assert_eq!(shown.get("LATE").unwrap().version, 2);
    assert_eq!(catalogue.index(), 2, "the index is published with the rows");
    assert_eq!(*applied.borrow(), 2);
}

#[tokio::test]
async fn updated_at_never_goes_backwards() {
    let dir = tempfile::tempdir().unwrap();
    let (mut sm, catalogue, _) = machine(dir.path());
    sm.apply_entries([entry(
        1,
        Request::new(put(5_000, vec![input("CLOCKS", "")])),
    )])
    .await
    .unwrap();
    // A proposer whose clock is two seconds behind writes the row again.
    let results = sm
        .apply_entries([entry(
            2,
            Request::new(put(3_000, vec![input("CLOCKS", "# WHAT: again\n")])),
        )])
        .await
        .unwrap();
    let row = catalogue.read().get("CLOCKS").unwrap();
    assert_eq!(row.version, 2);
    assert_eq!(row.updated_at, format_ms(5_000));
    assert_eq!(row.created_at, format_ms(5_000));
    let CommandResult::Put { rows } = &results[0] else {
        panic!("{results:?}")
    };
    assert_eq!(
        rows[0].updated_at,
        format_ms(5_000),
        "the answer says so too"
    );
}

#[tokio::test]
async fn a_different_receipt_under_a_taken_id_is_refused_not_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let (mut sm, _, _) = machine(dir.path());
    let first = receipt("inv_0000000001", "one");
    let results = sm
        .apply_entries([
            entry(1, Request::new(append(first.clone()))),
            // The same receipt again (an outbox retry), and another one under its id, both
            // in the same batch and in a later one.
            entry(2, Request::new(append(first.clone()))),
            entry(3, Request::new(append(receipt("inv_0000000001", "two")))),
        ])
        .await
        .unwrap();
    let later = sm
        .apply_entries([entry(
            4,
            Request::new(append(receipt("inv_0000000001", "three"))),
        )])
        .await
        .unwrap();
    let appended = CommandResult::ReceiptAppended {
        id: first.id.clone(),
        index: 1,
    };
    let taken = CommandResult::ReceiptIdTaken {
        id: first.id.clone(),
    };
    assert_eq!(results, [appended.clone(), appended, taken.clone()]);
    assert_eq!(later, [taken]);
    let stored = sm.receipts().get(&first.id).unwrap().unwrap();
    assert_eq!((stored.output.as_str(), stored.index), ("one", 1));
}

#[test]
fn times_past_year_9999_are_held_at_its_last_millisecond() {
    assert_eq!(format_ms(u64::MAX), "9999-12-31T23:59:59.999Z");
    assert_eq!(format_ms(MAX_MS + 1), "9999-12-31T23:59:59.999Z");
    assert_eq!(format_ms(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(parse_ms(&format_ms(1_234_567)), Some(1_234_567));
}

#[tokio::test]
async fn no_command_makes_apply_panic_or_fail() {
    let dir = tempfile::tempdir().unwrap();
    let (mut sm, catalogue, _) = machine(dir.path());
    let odd_keys = ["", "a/b", "\u{0}", "ÜBER", &"K".repeat(10_000)];
    let mut requests: Vec<Command> = odd_keys
        .iter()
        .map(|key| put(u64::MAX, vec![input(key, "# WHAT: \u{0}\n# ARGS\n\n{")]))
        .collect();
    let mut duplicate = input("TWICE_IN_ONE", "");
    duplicate.if_version = Some(u64::MAX);
    requests.extend([
        put(u64::MAX, vec![]),
        put(0, vec![input("DUP", "a"), input("DUP", "b")]),
        put(7, vec![duplicate]),
        Command::DeleteRow {
            key: String::new(),
            if_version: Some(0),
        },
        Command::DeleteRow {
            key: "NOPE".into(),
            if_version: None,
        },
        append(Receipt {
            key: String::new(),
            ..receipt("", "")
        }),
        append(Receipt {
            key: "a/b".into(),
            started_at: "not a time".into(),
            ..receipt("inv_x/\u{0}", "")
        }),
        Command::RevokeShare {
            id: String::new(),
            at_ms: u64::MAX,
        },
        Command::SetShareSecret {
            secret: ShareSecret::generate(),
        },
    ]);
    let count = requests.len() as u64;
    let entries: Vec<Entry> = requests
        .into_iter()
        .zip(1..)
        .map(|(command, index)| entry(index, Request::new(command)))
        .collect();
    let results = sm.apply_entries(entries).await.unwrap();
    assert_eq!(results.len() as u64, count);
    assert_eq!(catalogue.index(), count);
    let row = catalogue.read().get("ÜBER").unwrap();
    assert_eq!(row.updated_at, "9999-12-31T23:59:59.999Z");
    // And the machine keeps applying, and snapshots what it holds.
    sm.apply_entries([entry(
        count + 1,
        Request::new(put(1, vec![input("AFTER", "")])),
    )])
    .await
    .unwrap();
    sm.get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
}

#[tokio::test]
async fn the_first_share_secret_wins_and_travels_with_revocations_in_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let (mut sm, _, _) = machine(&dir.path().join("a"));
    let (first, second) = (ShareSecret::generate(), ShareSecret::generate());
    let set = |secret: &ShareSecret| {
        Request::new(Command::SetShareSecret {
            secret: secret.clone(),
        })
    };
    // Two proposals in one batch and a third later: the first applied stays.
    sm.apply_entries([entry(1, set(&first)), entry(2, set(&second))])
        .await
        .unwrap();
    sm.apply_entries([
        entry(3, set(&second)),
        entry(
            4,
            Request::new(Command::RevokeShare {
                id: "sh0123456789".into(),
                at_ms: 7,
            }),
        ),
    ])
    .await
    .unwrap();
    let reader = sm.receipts();
    assert_eq!(reader.share_secret().unwrap(), Some(first.clone()));
    assert!(reader.share_revoked("sh0123456789").unwrap());
    assert!(!reader.share_revoked("sh9999999999").unwrap());

    let snapshot = sm
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    let (mut other, _, _) = machine(&dir.path().join("b"));
    other
        .install_snapshot(&snapshot.meta, snapshot.snapshot)
        .await
        .unwrap();
    let reader = other.receipts();
    assert_eq!(reader.share_secret().unwrap(), Some(first));
    assert!(reader.share_revoked("sh0123456789").unwrap());
}

fn storage_alarm(node: u64, used_bytes: u64) -> crate::model::alarm::StorageAlarm {
    crate::model::alarm::StorageAlarm {
        node,
        raised_at_ms: 1,
        used_bytes,
        quota_bytes: 100,
        free_bytes: 1 << 30,
        min_free_bytes: 1 << 20,
    }
}

#[tokio::test]
async fn storage_alarms_are_raised_and_cleared_per_member_and_travel_in_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let (mut sm, _, _) = machine(&dir.path().join("a"));
    let alarm = |node: u64, alarm| Request::new(Command::Alarm { node, alarm });
    sm.apply_entries([
        // The key is the member the entry names, whatever its body says.
        entry(1, alarm(3, Some(storage_alarm(9, 150)))),
        entry(2, alarm(2, Some(storage_alarm(2, 120)))),
        entry(3, alarm(1, Some(storage_alarm(1, 101)))),
        entry(4, alarm(1, None)),
    ])
    .await
    .unwrap();
    let held = sm.receipts().alarms().unwrap();
    assert_eq!(
        held,
        vec![storage_alarm(2, 120), storage_alarm(3, 150)],
        "node 1 cleared its own; node 3's is under its own id"
    );

    let snapshot = build(&mut sm).await;
    // A member whose alarm the snapshot does not hold loses it at install; one it holds
    // gets it.
    let (mut other, _, _) = machine(&dir.path().join("b"));
    other
        .apply_entries([entry(1, alarm(5, Some(storage_alarm(5, 500))))])
        .await
        .unwrap();
    other
        .install_snapshot(&snapshot.meta, snapshot.snapshot)
        .await
        .unwrap();
    assert_eq!(other.receipts().alarms().unwrap(), held);

    // Cleared after the snapshot: the next one holds none.
    sm.apply_entries([entry(5, alarm(2, None)), entry(6, alarm(3, None))])
        .await
        .unwrap();
    assert!(sm.receipts().alarms().unwrap().is_empty());
    let snapshot = build(&mut sm).await;
    let (mut third, _, _) = machine(&dir.path().join("c"));
    third
        .install_snapshot(&snapshot.meta, snapshot.snapshot)
        .await
        .unwrap();
    assert!(third.receipts().alarms().unwrap().is_empty());
}

#[tokio::test]
async fn a_rotation_replaces_the_secret_and_keeps_the_old_one_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let (mut sm, _, _) = machine(&dir.path().join("a"));
    let (first, second, third) = (
        ShareSecret::generate(),
        ShareSecret::generate(),
        ShareSecret::generate(),
    );
    let rotate = |secret: &ShareSecret, keep_previous| {
        Request::new(Command::RotateShareSecret {
            secret: secret.clone(),
            keep_previous,
        })
    };
    sm.apply_entries([
        entry(
            1,
            Request::new(Command::SetShareSecret {
                secret: first.clone(),
            }),
        ),
        entry(2, rotate(&second, true)),
    ])
    .await
    .unwrap();
    let keys = sm.receipts().share_keys().unwrap().unwrap();
    assert_eq!((keys.current, keys.previous), (second.clone(), Some(first)));
    // A later first-secret proposal changes nothing; a rotation without keep drops the old.
    sm.apply_entries([
        entry(
            3,
            Request::new(Command::SetShareSecret {
                secret: ShareSecret::generate(),
            }),
        ),
        entry(4, rotate(&third, false)),
    ])
    .await
    .unwrap();
    let keys = sm.receipts().share_keys().unwrap().unwrap();
    assert_eq!((keys.current.clone(), keys.previous), (third.clone(), None));

    sm.apply_entries([entry(5, rotate(&second, true))])
        .await
        .unwrap();
    let snapshot = sm
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    let (mut other, _, _) = machine(&dir.path().join("b"));
    other
        .install_snapshot(&snapshot.meta, snapshot.snapshot)
        .await
        .unwrap();
    let keys = other.receipts().share_keys().unwrap().unwrap();
    assert_eq!((keys.current, keys.previous), (second, Some(third)));
}

#[tokio::test]
async fn pruning_drops_by_age_then_per_key_surplus_in_bounded_steps() {
    let dir = tempfile::tempdir().unwrap();
    let (mut sm, _, _) = machine(&dir.path().join("a"));
    // Six receipts of two keys, started at 1 000 ms to 6 000 ms.
    let receipts: Vec<Receipt> = (1..=6u64)
        .map(|i| Receipt {
            key: if i.is_multiple_of(2) { "EVEN" } else { "ODD" }.into(),
            started_at: format_ms(i * 1_000),
            ..receipt(&format!("inv_000000000{i}"), "r")
        })
        .collect();
    let entries: Vec<Entry> = receipts
        .iter()
        .zip(1..)
        .map(|(r, index)| entry(index, Request::new(append(r.clone()))))
        .collect();
    sm.apply_entries(entries).await.unwrap();
    let prune = |before_ms, keep_per_key, limit| {
        Request::new(Command::PruneReceipts {
            before_ms,
            max_age_ms: 0,
            keep_per_key,
            limit,
        })
    };
    // Older than 2 500 ms: receipts 1 and 2, one per entry.
    let results = sm
        .apply_entries([entry(7, prune(2_500, 0, 1)), entry(8, prune(2_500, 0, 1))])
        .await
        .unwrap();
    assert_eq!(
        results,
        [
            CommandResult::Pruned {
                dropped: 1,
                more: true
            },
            // The second entry of the batch sees the first one's removal.
            CommandResult::Pruned {
                dropped: 1,
                more: false
            },
        ]
    );
    let results = sm
        .apply_entries([entry(9, prune(2_500, 0, 10))])
        .await
        .unwrap();
    assert_eq!(
        results,
        [CommandResult::Pruned {
            dropped: 0,
            more: false
        }]
    );
    let reader = sm.receipts();
    assert!(reader.get("inv_0000000001").unwrap().is_none());
    assert!(reader.get("inv_0000000002").unwrap().is_none());
    // Keep one per key: receipt 3 (ODD) goes, 4 (EVEN) goes; 5 and 6 stay.
    let results = sm
        .apply_entries([entry(10, prune(0, 1, 10))])
        .await
        .unwrap();
    assert_eq!(
        results,
        [CommandResult::Pruned {
            dropped: 2,
            more: false
        }]
    );
    let left: Vec<String> = ["ODD", "EVEN"]
        .iter()
        .flat_map(|k| reader.by_key(k, 10).unwrap())
        .map(|r| r.id)
        .collect();
    assert_eq!(left, ["inv_0000000005", "inv_0000000006"]);
    assert_eq!(reader.count(), 2);
}

#[tokio::test]
async fn a_build_that_finishes_after_a_newer_install_never_replaces_it() {
    let dir = tempfile::tempdir().unwrap();
    let (mut follower, catalogue, _) = machine(&dir.path().join("follower"));
    follower
        .apply_entries([entry(1, Request::new(put(1, vec![input("OLD", "")])))])
        .await
        .unwrap();
    // A snapshot at index 1 is current, and another build starts there ...
    let _ = build(&mut follower).await;
    let mut slow_build = follower.get_snapshot_builder().await;

    // ... while the leader's snapshot at index 3 is installed.
    let (mut leader, _, _) = machine(&dir.path().join("leader"));
    leader
        .apply_entries([
            entry(1, Request::new(put(1, vec![input("OLD", "")]))),
            entry(2, Request::new(put(2, vec![input("NEW", "")]))),
            entry(3, Request::new(append(receipt("inv_0000000003", "r")))),
        ])
        .await
        .unwrap();
    let newer = leader
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    follower
        .install_snapshot(&newer.meta, newer.snapshot)
        .await
        .unwrap();
    assert_eq!(catalogue.index(), 3);

    let built = slow_build.build_snapshot().await.unwrap();
    assert_eq!(built.meta.last_log_id.map(|l| l.index), Some(1));
    let current = follower.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(
        current.meta.last_log_id.map(|l| l.index),
        Some(3),
        "the older build did not replace the installed snapshot"
    );
    // The named file is the state at the meta's index.
    let body = contents(current.snapshot.path());
    let mut keys: Vec<&str> = body.rows.iter().map(|r| r.key.as_str()).collect();
    keys.sort();
    assert_eq!(keys, ["NEW", "OLD"]);
    assert_eq!(body.receipts.len(), 1);
    // Neither the stale build's file nor an earlier one is left beside it.
    assert_eq!(snapshot_files(&dir.path().join("follower")).len(), 1);

    // A newer build does replace it.
    follower
        .apply_entries([entry(4, Request::new(put(4, vec![input("NEWEST", "")])))])
        .await
        .unwrap();
    let _ = follower
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    let current = follower.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(current.meta.last_log_id.map(|l| l.index), Some(4));
    assert_eq!(snapshot_files(&dir.path().join("follower")).len(), 1);
}

#[tokio::test]
async fn receipts_show_only_up_to_the_published_index() {
    let dir = tempfile::tempdir().unwrap();
    let (mut sm, _, _) = machine(dir.path());
    let reader = sm.receipts();
    // Stored in sled by hand at an index the machine has not published.
    let mut early = receipt("inv_00000000aa", "x");
    early.index = 9;
    sm.tree
        .insert(receipt_key(&early.id), serde_json::to_vec(&early).unwrap())
        .unwrap();
    assert!(reader.get(&early.id).unwrap().is_none());
    sm.apply_entries((1..=9).map(|i| {
        entry(
            i,
            Request::new(Command::DeleteRow {
                key: "X".into(),
                if_version: None,
            }),
        )
    }))
    .await
    .unwrap();
    assert!(reader.get(&early.id).unwrap().is_some());
    let (count, _) = reader.digest().unwrap();
    assert_eq!(count, 1);
}

/// Applies `count` receipts at indexes `from..`, ids `inv_<index>`.
async fn receipts_at(sm: &mut StateMachine, from: u64, count: u64) {
    sm.apply_entries((from..from + count).map(|i| {
        entry(
            i,
            Request::new(append(receipt(&format!("inv_{i:010}"), &"o".repeat(64)))),
        )
    }))
    .await
    .unwrap();
}

async fn build(sm: &mut StateMachine) -> Snapshot {
    sm.get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_restarted_machine_serves_its_snapshot_from_its_file_and_keeps_only_the_current_one() {
    let dir = tempfile::tempdir().unwrap();
    let (mut sm, _, _) = machine(dir.path());
    sm.apply_entries([entry(1, Request::new(put(1, vec![input("KEPT", "")])))])
        .await
        .unwrap();
    receipts_at(&mut sm, 2, 3).await;
    let first = build(&mut sm).await;
    receipts_at(&mut sm, 5, 2).await;
    let built = build(&mut sm).await;
    assert_eq!(built.meta.last_log_id.map(|l| l.index), Some(6));
    assert_ne!(first.meta.last_log_id, built.meta.last_log_id);
    // The first snapshot's file went once the second was current.
    let files = snapshot_files(dir.path());
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(sm.tree.get(b"s/current").unwrap().is_none());
    drop((sm, first));

    let (mut sm, _, _) = machine(dir.path());
    let current = sm.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(current.meta, built.meta);
    assert_eq!(
        current
            .snapshot
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy(),
        files[0]
    );
    let body = contents(current.snapshot.path());
    assert_eq!(body.rows.len(), 1);
    let ids: Vec<u64> = body.receipts.iter().map(|r| r.index).collect();
    assert_eq!(ids, [2, 3, 4, 5, 6]);
}

#[tokio::test]
async fn a_crash_between_writing_a_snapshot_file_and_its_rename_leaves_the_old_one_current() {
    let dir = tempfile::tempdir().unwrap();
    let (mut sm, _, _) = machine(dir.path());
    receipts_at(&mut sm, 1, 2).await;
    let old = build(&mut sm).await;
    receipts_at(&mut sm, 3, 2).await;
    sm.snapshots
        .crash_before_rename
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let crashed = sm.get_snapshot_builder().await.build_snapshot().await;
    assert!(crashed.is_err());
    assert_eq!(
        snapshot_files(dir.path()).len(),
        2,
        "the complete temporary file is left"
    );
    drop((sm, old.snapshot));

    let (mut sm, _, _) = machine(dir.path());
    let current = sm.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(current.meta, old.meta, "the old snapshot is still current");
    assert_eq!(contents(current.snapshot.path()).receipts.len(), 2);
    let files = snapshot_files(dir.path());
    assert_eq!(
        files.len(),
        1,
        "the leftover was removed at open: {files:?}"
    );
    assert!(files[0].ends_with(".snap"));
    // And the next build goes through.
    assert_eq!(
        build(&mut sm).await.meta.last_log_id.map(|l| l.index),
        Some(4)
    );
}

#[tokio::test]
async fn a_data_folder_with_the_snapshot_in_one_sled_value_opens_and_moves_it_to_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let (mut sm, _, _) = machine(dir.path());
    sm.apply_entries([entry(
        1,
        Request::with_id(id("old-layout"), put(1, vec![input("OLDROW", "")])),
    )])
    .await
    .unwrap();
    receipts_at(&mut sm, 2, 3).await;
    // What the one-value layout stored: the meta's length, the meta, the whole body.
    let meta = Meta {
        last_log_id: sm.last_applied,
        last_membership: Membership::default(),
    };
    let body = serde_json::json!({
        "rows": sm.catalogue.read().all_rows().iter().map(|r| (**r).clone()).collect::<Vec<_>>(),
        "receipts": sm.receipts().by_key("ECHO", 10).unwrap(),
        "share_secret": null,
        "revoked": [],
        "requests": [requests::latest(&sm.tree, None, &id("old-layout")).unwrap().unwrap()],
    });
    let meta_json = serde_json::to_vec(&meta).unwrap();
    let mut framed = (meta_json.len() as u64).to_be_bytes().to_vec();
    framed.extend_from_slice(&meta_json);
    framed.extend_from_slice(&serde_json::to_vec(&body).unwrap());
    sm.tree.insert(b"s/current", framed).unwrap();
    sm.tree.flush().unwrap();
    drop(sm);

    let (mut sm, catalogue, _) = machine(dir.path());
    assert!(sm.tree.get(b"s/current").unwrap().is_none());
    assert!(catalogue.read().get("OLDROW").is_some());
    let current = sm.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(current.meta, meta);
    let moved = contents(current.snapshot.path());
    assert_eq!(moved.rows.len(), 1);
    let ids: Vec<&str> = moved.receipts.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["inv_0000000002", "inv_0000000003", "inv_0000000004"]);
    assert_eq!(moved.requests.len(), 1);
    // It installs elsewhere like any snapshot.
    let (mut other, other_catalogue, _) = machine(&dir.path().join("other"));
    other
        .install_snapshot(&current.meta, current.snapshot)
        .await
        .unwrap();
    assert!(other_catalogue.read().get("OLDROW").is_some());
    assert_eq!(
        other.receipts().digest().unwrap(),
        sm.receipts().digest().unwrap()
    );
}

/// Installs `snapshot` on `follower`, crashing after its first batch of lines.
async fn install_cut_short(follower: &mut StateMachine, snapshot: Snapshot) {
    follower
        .snapshots
        .crash_mid_install
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let cut = follower
        .install_snapshot(&snapshot.meta, snapshot.snapshot)
        .await;
    assert!(cut.is_err());
}

#[tokio::test]
async fn an_install_cut_short_by_a_crash_is_finished_at_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let (mut leader, leader_catalogue, _) = machine(&dir.path().join("leader"));
    let (mut follower, _, _) = machine(&dir.path().join("follower"));
    // Both applied index 1; the follower then fell behind while the leader went on past
    // more than one install batch of receipts.
    for sm in [&mut leader, &mut follower] {
        sm.apply_entries([entry(1, Request::new(put(1, vec![input("FIRST", "")])))])
            .await
            .unwrap();
    }
    leader
        .apply_entries([entry(2, Request::new(put(2, vec![input("SECOND", "")])))])
        .await
        .unwrap();
    receipts_at(&mut leader, 3, 2_500).await;
    let snapshot = build(&mut leader).await;
    install_cut_short(&mut follower, snapshot).await;
    drop(follower);

    let (mut follower, catalogue, _) = machine(&dir.path().join("follower"));
    assert_eq!(catalogue.index(), 2_502);
    assert!(catalogue.read().get("SECOND").is_some());
    assert_eq!(
        follower.receipts().digest().unwrap(),
        leader.receipts().digest().unwrap()
    );
    assert_eq!(
        follower.applied_state().await.unwrap().0,
        leader.last_applied
    );
    assert_eq!(leader_catalogue.read().all_rows().len(), 2);
}

#[tokio::test]
async fn an_install_cut_short_by_a_power_loss_that_took_bodies_is_finished_from_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let (mut leader, _, _) = machine(&dir.path().join("leader"));
    let (mut follower, _, storage) = machine(&dir.path().join("follower"));
    receipts_at(&mut leader, 1, 250).await;
    let snapshot = build(&mut leader).await;
    install_cut_short(&mut follower, snapshot).await;
    drop((follower, storage));
    // sled kept the first install batch; the disk lost the second half of its bodies.
    let file = segment_file(&dir.path().join("follower"), 1);
    let len = std::fs::metadata(&file).unwrap().len();
    assert!(len > 0);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(len / 2)
        .unwrap();

    let (follower, _, _) = machine(&dir.path().join("follower"));
    assert!(follower.missing_bodies().is_empty());
    assert_eq!(
        follower.receipts().digest().unwrap(),
        leader.receipts().digest().unwrap()
    );
    assert_eq!(follower.receipts().count(), 250);
}

#[tokio::test]
async fn an_install_keeps_stored_receipts_the_snapshot_holds_and_drops_pruned_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (mut leader, _, _) = machine(&dir.path().join("leader"));
    let (mut follower, _, _) = machine(&dir.path().join("follower"));
    // Receipt ids are not in index order: the first one sorts after all others.
    for sm in [&mut leader, &mut follower] {
        sm.apply_entries([entry(
            1,
            Request::new(append(receipt("inv_zzzzzzzzzz", "first"))),
        )])
        .await
        .unwrap();
        receipts_at(sm, 2, 3).await;
    }
    // The leader's history goes on: receipts pruned to the newest two (ids ending 3 and 4;
    // the follower's "…zzz" and "…2" must go), then one more.
    leader
        .apply_entries([entry(
            5,
            Request::new(Command::PruneReceipts {
                before_ms: 0,
                max_age_ms: 0,
                keep_per_key: 2,
                limit: 100,
            }),
        )])
        .await
        .unwrap();
    receipts_at(&mut leader, 6, 1).await;
    let snapshot = build(&mut leader).await;
    let reader = follower.receipts();
    let written = follower.storage.segments().end();
    follower
        .install_snapshot(&snapshot.meta, snapshot.snapshot)
        .await
        .unwrap();
    // Receipts it already had are kept where they are: only the new one's body is written.
    let sixth = encode(&leader.receipts().get("inv_0000000006").unwrap().unwrap()).unwrap();
    assert_eq!(
        follower.storage.segments().end().offset,
        written.offset + 8 + sixth.len() as u64
    );
    let left: Vec<u64> = reader
        .by_key("ECHO", 10)
        .unwrap()
        .iter()
        .map(|r| r.index)
        .collect();
    assert_eq!(left, [6, 4, 3]);
    assert_eq!(reader.count(), 3);
    assert_eq!(
        reader.digest().unwrap(),
        leader.receipts().digest().unwrap()
    );
}

/// A machine that sends snapshots in these tests: the row `SENT` at index 1, then
/// `receipts` receipts.
async fn sender(dir: &std::path::Path, receipts: u64) -> StateMachine {
    let (mut leader, _, _) = machine(dir);
    leader
        .apply_entries([entry(1, Request::new(put(1, vec![input("SENT", "")])))])
        .await
        .unwrap();
    receipts_at(&mut leader, 2, receipts).await;
    leader
}

#[tokio::test]
async fn a_snapshot_sent_by_a_leader_of_the_older_version_installs() {
    let dir = tempfile::tempdir().unwrap();
    let leader = sender(&dir.path().join("leader"), 2).await;
    // The older version's snapshot data: the whole state as one JSON value.
    let old = serde_json::json!({
        "rows": leader.catalogue.read().all_rows().iter().map(|r| (**r).clone()).collect::<Vec<_>>(),
        "receipts": leader.receipts().by_key("ECHO", 10).unwrap(),
        "share_secret": null, "revoked": [], "requests": [],
    });
    let path = dir.path().join("old-body.json");
    std::fs::write(&path, serde_json::to_vec(&old).unwrap()).unwrap();
    let meta = Meta {
        last_log_id: leader.last_applied,
        last_membership: Membership::default(),
    };
    let (mut follower, catalogue, _) = machine(&dir.path().join("follower"));
    let data = SnapshotFile::open(&path).await.unwrap();
    follower.install_snapshot(&meta, data).await.unwrap();
    assert!(catalogue.read().get("SENT").is_some());
    assert_eq!(
        follower.receipts().digest().unwrap(),
        leader.receipts().digest().unwrap()
    );
    // What is current is this version's format.
    let current = follower.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(contents(current.snapshot.path()).receipts.len(), 2);
}

#[tokio::test]
async fn a_snapshot_is_compressed_at_rest_and_sent_as_its_lines() {
    use tokio::io::AsyncReadExt as _;
    let dir = tempfile::tempdir().unwrap();
    let mut leader = sender(&dir.path().join("leader"), 3).await;
    let mut built = build(&mut leader).await;
    let at_rest = std::fs::read(built.snapshot.path()).unwrap();
    assert!(snapshot::packed::is_packed(&at_rest), "compressed on disk");
    // What a leader reads to send (and a backup streams): the lines, as before.
    let mut sent = Vec::new();
    built.snapshot.read_to_end(&mut sent).await.unwrap();
    assert!(sent.starts_with(b"{\"header\""), "plain lines on the wire");
    assert_eq!(sent, sent_bytes(built.snapshot.path()));
    // A follower writes them as they come, and installs them.
    install_as_received(dir.path(), &leader, &built.meta, &sent).await;
}

/// Installs the bytes `sent` for `meta` on a new follower under `dir`, as received from
/// `leader`, and checks it then holds the leader's row and receipts; returns the follower.
async fn install_as_received(
    dir: &std::path::Path,
    leader: &StateMachine,
    meta: &Meta,
    sent: &[u8],
) -> (StateMachine, Durable) {
    let (mut sm, catalogue, storage) = machine(&dir.join("follower"));
    let received = dir.join("received");
    std::fs::write(&received, sent).unwrap();
    let data = SnapshotFile::open(&received).await.unwrap();
    sm.install_snapshot(meta, data).await.unwrap();
    assert!(catalogue.read().get("SENT").is_some());
    assert_eq!(
        sm.receipts().digest().unwrap(),
        leader.receipts().digest().unwrap()
    );
    (sm, storage)
}

#[tokio::test]
async fn a_snapshot_sent_as_it_is_at_rest_installs() {
    use tokio::io::AsyncReadExt as _;
    let dir = tempfile::tempdir().unwrap();
    let mut leader = sender(&dir.path().join("leader"), 3).await;
    let built = build(&mut leader).await;
    let at_rest = std::fs::read(built.snapshot.path()).unwrap();
    // What a leader sends a follower that installs packed files: the compressed bytes.
    let mut sent = Vec::new();
    built
        .snapshot
        .read_as_stored()
        .read_to_end(&mut sent)
        .await
        .unwrap();
    assert!(snapshot::packed::is_packed(&sent), "compressed on the wire");
    assert_eq!(sent, at_rest);
    let (mut sm, _storage) = install_as_received(dir.path(), &leader, &built.meta, &sent).await;
    // The follower keeps the file as it came: compressed.
    let current = sm.get_current_snapshot().await.unwrap().unwrap();
    assert!(snapshot::packed::is_packed(
        &std::fs::read(current.snapshot.path()).unwrap()
    ));
}

/// An install leaves exactly the snapshot's rows, on disk as in memory: the rows it has
/// (over several batches) written, a stored row it lacks removed, also when a crash cut
/// the install short and the next open finished it.
#[tokio::test]
async fn an_install_leaves_exactly_the_snapshots_rows_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let (mut leader, leader_catalogue, _) = machine(&dir.path().join("leader"));
    let (mut follower, _, _) = machine(&dir.path().join("follower"));
    for sm in [&mut leader, &mut follower] {
        sm.apply_entries([entry(
            1,
            Request::new(put(1, vec![input("KEPT", ""), input("GONE", "")])),
        )])
        .await
        .unwrap();
    }
    let many: Vec<RowInput> = (0..450)
        .map(|i| input(&format!("NEW_{i:03}"), ""))
        .collect();
    leader
        .apply_entries([
            entry(
                2,
                Request::new(Command::DeleteRow {
                    key: "GONE".into(),
                    if_version: None,
                }),
            ),
            entry(3, Request::new(put(3, many))),
        ])
        .await
        .unwrap();
    let snapshot = build(&mut leader).await;
    install_cut_short(&mut follower, snapshot).await;
    drop(follower);

    let (_follower, catalogue, _) = machine(&dir.path().join("follower"));
    let keys = |c: &SharedCatalogue| -> Vec<String> {
        c.read().all_rows().iter().map(|r| r.key.clone()).collect()
    };
    assert_eq!(keys(&catalogue).len(), 451);
    assert_eq!(keys(&catalogue), keys(&leader_catalogue));
    assert!(catalogue.read().get("GONE").is_none());
}

#[tokio::test]
async fn a_damaged_snapshot_is_refused_before_anything_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let mut leader = sender(&dir.path().join("leader"), 3).await;
    let sent = build(&mut leader).await;
    // Damaged on its way: cut off two thirds in, in the middle of a line.
    let whole = sent_bytes(sent.snapshot.path());
    let cut = dir.path().join("cut");
    std::fs::write(&cut, &whole[..whole.len() * 2 / 3]).unwrap();

    let follower = dir.path().join("follower");
    {
        let (mut sm, catalogue, _storage) = machine(&follower);
        sm.apply_entries([entry(1, Request::new(put(1, vec![input("KEPT", "")])))])
            .await
            .unwrap();
        let data = SnapshotFile::open(&cut).await.unwrap();
        let refused = sm.install_snapshot(&sent.meta, data).await;
        let error = refused
            .expect_err("a damaged snapshot is refused")
            .to_string();
        assert!(error.contains("damaged"), "{error}");
        assert!(catalogue.read().get("KEPT").is_some());
        assert!(catalogue.read().get("SENT").is_none());
        assert_eq!(sm.last_applied.map(|l| l.index), Some(1));
    }
    // Nothing is left to finish at the next start: the machine opens as it was, and takes
    // the snapshot when it comes whole.
    let storage = open_storage(&follower);
    let catalogue = SharedCatalogue::default();
    let mut sm = StateMachine::open(&storage, &follower.join("snapshots"), catalogue.clone())
        .expect("opens: no install left half done");
    assert!(catalogue.read().get("KEPT").is_some());
    assert!(
        snapshot_files(&follower).is_empty(),
        "the damaged file is gone"
    );
    let data = SnapshotFile::open(sent.snapshot.path()).await.unwrap();
    sm.install_snapshot(&sent.meta, data).await.unwrap();
    assert!(catalogue.read().get("SENT").is_some());
    assert!(catalogue.read().get("KEPT").is_none());
}

/// The receipt log (see `transparency`): its tree, its checkpoints, its snapshots.
mod receipt_log {
    use std::collections::{BTreeMap, BTreeSet};

    use base64::Engine as _;
    use rowcall_proto::tlog::{self, Checkpoint, SigningKey};

    use super::*;
    use crate::raft::NodeInfo;

    const CLUSTER: &str = "ctest";

    fn key(node: u64) -> SigningKey {
        SigningKey::from_seed(
            &crate::store::checkpoint::key_name(CLUSTER, node),
            &[node as u8; 32],
        )
        .unwrap()
    }

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    /// A membership entry of voters 1..=3, each with its signing key.
    fn members(index: u64) -> Entry {
        let nodes: BTreeMap<u64, NodeInfo> = (1..=3)
            .map(|id| {
                let info = NodeInfo {
                    cluster_id: CLUSTER.into(),
                    signing_key: b64(&key(id).public()),
                    ..NodeInfo::default()
                };
                (id, info)
            })
            .collect();
        let voters: BTreeSet<u64> = nodes.keys().copied().collect();
        Entry {
            log_id: crate::raft::log_id(1, 1, index),
            payload: EntryPayload::Membership(
                openraft::Membership::new(vec![voters], nodes).unwrap(),
            ),
        }
    }

    /// Node `node`'s signature of the tree of `size` leaves with `root`, signed by `signer`.
    fn cosign(node: u64, signer: u64, size: u64, root: &tlog::Hash) -> Command {
        let body = Checkpoint {
            origin: crate::store::checkpoint::origin(CLUSTER),
            size,
            root: *root,
        }
        .body();
        Command::Cosign {
            node,
            size,
            root: tlog::encode_hash(root),
            signature: b64(&key(signer).sign(body.as_bytes())),
        }
    }

    async fn apply_one(sm: &mut StateMachine, index: u64, command: Command) -> CommandResult {
        sm.apply_entries([entry(index, Request::new(command))])
            .await
            .unwrap()
            .remove(0)
    }

    /// The leaf hashes of receipts `inv_<i>` for `range`, in order.
    fn expected_leaves(sm: &StateMachine, ids: &[String]) -> Vec<tlog::Hash> {
        ids.iter()
            .map(|id| {
                let r = sm.receipts().get(id).unwrap().unwrap();
                tlog::leaf_hash(&transparency::receipt_leaf(&r))
            })
            .collect()
    }

    #[tokio::test]
    async fn receipts_become_leaves_of_the_rfc_tree_and_every_proof_verifies() {
        let dir = tempfile::tempdir().unwrap();
        let (mut sm, _, _) = machine(dir.path());
        receipts_at(&mut sm, 1, 9).await;
        // Two receipts in one entry become leaves in id order, whatever order they came in.
        let both = Command::Batch {
            requests: vec![
                Request::new(append(receipt("inv_zzzzzzzzzz", "{}"))),
                Request::new(append(receipt("inv_aaaaaaaaaa", "{}"))),
            ],
        };
        apply_one(&mut sm, 10, both).await;
        receipts_at(&mut sm, 11, 4).await;
        let mut ids: Vec<String> = (1..10).map(|i| format!("inv_{i:010}")).collect();
        ids.extend(["inv_aaaaaaaaaa".into(), "inv_zzzzzzzzzz".into()]);
        ids.extend((11..15).map(|i| format!("inv_{i:010}")));
        let leaves = expected_leaves(&sm, &ids);
        let log = sm.log();
        assert_eq!(log.size().unwrap(), 15);
        for (index, id) in ids.iter().enumerate() {
            assert_eq!(log.leaf_of(id).unwrap(), Some(index as u64), "{id}");
        }
        for size in 1..=15u64 {
            let root = log.root(size).unwrap();
            assert_eq!(root, tlog::reference::root(&leaves[..size as usize]));
            for index in 0..size {
                let path = log.inclusion(index, size).unwrap();
                tlog::verify_inclusion(index, size, &leaves[index as usize], &path, &root).unwrap();
            }
            for from in 1..=size {
                let path = log.consistency(from, size).unwrap();
                tlog::verify_consistency(from, size, &log.root(from).unwrap(), &root, &path)
                    .unwrap();
            }
        }
    }

    #[tokio::test]
    async fn a_checkpoint_needs_a_majority_of_voters_each_signing_this_trees_root() {
        let dir = tempfile::tempdir().unwrap();
        let (mut sm, _, _) = machine(dir.path());
        sm.apply_entries([members(1)]).await.unwrap();
        receipts_at(&mut sm, 2, 5).await;
        let root = sm.log().root(5).unwrap();
        let other_root = sm.log().root(4).unwrap();

        // One voter of three: pending, not the cluster's.
        let first = apply_one(&mut sm, 7, cosign(1, 1, 5, &root)).await;
        assert_eq!(
            first,
            CommandResult::Cosigned {
                size: 5,
                checkpoint: false
            }
        );
        assert_eq!(sm.log().checkpoint().unwrap(), None);

        // Refused: another tree's root, another node's key, a size the log never had.
        for (index, command) in [
            (8, cosign(2, 2, 5, &other_root)),
            (9, cosign(2, 3, 5, &root)),
            (10, cosign(2, 2, 6, &root)),
        ] {
            let result = apply_one(&mut sm, index, command).await;
            assert!(
                matches!(result, CommandResult::CosignRefused { .. }),
                "{result:?}"
            );
        }
        assert_eq!(sm.log().checkpoint().unwrap(), None);

        // A second voter: the checkpoint, with both signatures, which a verifier accepts.
        let second = apply_one(&mut sm, 11, cosign(2, 2, 5, &root)).await;
        assert_eq!(
            second,
            CommandResult::Cosigned {
                size: 5,
                checkpoint: true
            }
        );
        let checkpoint = sm.log().checkpoint().unwrap().unwrap();
        assert_eq!(
            (checkpoint.size, checkpoint.voters.clone()),
            (5, vec![1, 2, 3])
        );
        let keys: Vec<_> = (1..=3).map(|n| key(n).verifier()).collect();
        let (body, signers) = tlog::verified_signers(&checkpoint.note(), &keys).unwrap();
        assert_eq!(signers.len(), 2);
        assert_eq!(Checkpoint::parse(&body).unwrap().root, root);
        // The third joins the checkpoint; a signature of an older size changes nothing.
        apply_one(&mut sm, 12, cosign(3, 3, 5, &root)).await;
        apply_one(&mut sm, 13, cosign(3, 3, 4, &other_root)).await;
        let checkpoint = sm.log().checkpoint().unwrap().unwrap();
        assert_eq!(checkpoint.size, 5);
        assert_eq!(checkpoint.signatures.len(), 3);
    }

    #[tokio::test]
    async fn the_log_travels_in_snapshots_and_an_install_checks_its_root() {
        let dir = tempfile::tempdir().unwrap();
        let (mut leader, _, _) = machine(&dir.path().join("leader"));
        leader.apply_entries([members(1)]).await.unwrap();
        receipts_at(&mut leader, 2, 6).await;
        let root = leader.log().root(6).unwrap();
        apply_one(&mut leader, 8, cosign(1, 1, 6, &root)).await;
        apply_one(&mut leader, 9, cosign(2, 2, 6, &root)).await;
        receipts_at(&mut leader, 10, 3).await;
        let snapshot = build(&mut leader).await;

        let (mut follower, _, _) = machine(&dir.path().join("follower"));
        follower
            .install_snapshot(&snapshot.meta, snapshot.snapshot)
            .await
            .unwrap();
        let (ours, theirs) = (leader.log(), follower.log());
        assert_eq!(theirs.size().unwrap(), 9);
        for size in 1..=9 {
            assert_eq!(theirs.root(size).unwrap(), ours.root(size).unwrap());
        }
        assert_eq!(theirs.checkpoint().unwrap(), ours.checkpoint().unwrap());
        assert_eq!(
            theirs.inclusion(3, 9).unwrap(),
            ours.inclusion(3, 9).unwrap()
        );
        // It goes on growing the same tree.
        receipts_at(&mut leader, 13, 2).await;
        receipts_at(&mut follower, 13, 2).await;
        assert_eq!(theirs.root(11).unwrap(), ours.root(11).unwrap());

        // A snapshot whose leaves were edited does not install.
        let built = build(&mut leader).await;
        let text = String::from_utf8(sent_bytes(built.snapshot.path())).unwrap();
        let first_leaf = text.find("{\"leaf\"").unwrap();
        let hash_at = first_leaf + text[first_leaf..].find("\"hash\":\"").unwrap() + 8;
        let mut edited = text.clone().into_bytes();
        edited[hash_at] = if edited[hash_at] == b'0' { b'1' } else { b'0' };
        let path = dir.path().join("edited.snapshot");
        std::fs::write(&path, edited).unwrap();
        let (mut third, _, _) = machine(&dir.path().join("third"));
        let file = SnapshotFile::open(&path).await.unwrap();
        let refused = third
            .install_snapshot(&built.meta, file)
            .await
            .unwrap_err()
            .to_string();
        assert!(refused.contains("root"), "{refused}");
    }

    #[tokio::test]
    async fn a_folder_from_before_the_log_builds_it_from_its_receipts_and_pruning_keeps_leaves() {
        let dir = tempfile::tempdir().unwrap();
        let root = {
            let (mut sm, _, _) = machine(dir.path());
            receipts_at(&mut sm, 1, 7).await;
            let root = sm.log().root(7).unwrap();
            // What an older build left: receipts without a log.
            for item in sm.tree.scan_prefix(transparency::PREFIX) {
                sm.tree.remove(item.unwrap().0).unwrap();
            }
            assert_eq!(sm.log().size().unwrap(), 0);
            root
        };
        let (mut sm, _, _) = machine(dir.path());
        assert_eq!(sm.log().size().unwrap(), 7);
        assert_eq!(sm.log().root(7).unwrap(), root);

        // Retention drops bodies, never leaves.
        apply_one(
            &mut sm,
            8,
            Command::PruneReceipts {
                before_ms: 0,
                max_age_ms: 0,
                keep_per_key: 1,
                limit: 100,
            },
        )
        .await;
        assert!(sm.receipts().get("inv_0000000001").unwrap().is_none());
        assert_eq!(sm.log().leaf_of("inv_0000000001").unwrap(), Some(0));
        assert_eq!(sm.log().root(7).unwrap(), root);
    }

    fn tree_file_path(dir: &std::path::Path) -> std::path::PathBuf {
        dir.join("receipts")
            .join(crate::store::tree_file::FILE_NAME)
    }

    /// Every root and an inclusion proof of every leaf, at every size up to the log's.
    fn assert_tree_of(sm: &StateMachine, leaves: &[tlog::Hash]) {
        let log = sm.log();
        assert_eq!(log.size().unwrap(), leaves.len() as u64);
        for size in 1..=leaves.len() as u64 {
            let root = log.root(size).unwrap();
            assert_eq!(
                root,
                tlog::reference::root(&leaves[..size as usize]),
                "{size}"
            );
            let last = size - 1;
            let path = log.inclusion(last, size).unwrap();
            tlog::verify_inclusion(last, size, &leaves[last as usize], &path, &root).unwrap();
        }
    }

    #[tokio::test]
    async fn hashes_a_power_loss_took_are_computed_again_from_the_leaves() {
        let dir = tempfile::tempdir().unwrap();
        let leaves = {
            let (mut sm, _, storage) = machine(dir.path());
            receipts_at(&mut sm, 1, 6).await;
            storage.sync().await.unwrap();
            let synced = std::fs::metadata(tree_file_path(dir.path())).unwrap().len();
            receipts_at(&mut sm, 7, 5).await;
            let ids: Vec<String> = (1..12).map(|i| format!("inv_{i:010}")).collect();
            let leaves = expected_leaves(&sm, &ids);
            drop(sm);
            // sled kept all eleven leaves, but the hashes past the sync are zeros on disk.
            let path = tree_file_path(dir.path());
            let len = std::fs::metadata(&path).unwrap().len();
            assert!(
                len > synced,
                "the second batch wrote hashes ({len} > {synced})"
            );
            let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            std::os::unix::fs::FileExt::write_all_at(
                &file,
                &vec![0; (len - synced) as usize],
                synced,
            )
            .unwrap();
            leaves
        };
        let (mut sm, _, _) = machine(dir.path());
        assert_tree_of(&sm, &leaves);
        // And the tree grows on from there.
        receipts_at(&mut sm, 12, 3).await;
        let mut more = leaves.clone();
        let ids: Vec<String> = (12..15).map(|i| format!("inv_{i:010}")).collect();
        more.extend(expected_leaves(&sm, &ids));
        assert_tree_of(&sm, &more);
    }

    #[tokio::test]
    async fn a_lost_hash_file_is_written_again_from_the_leaves() {
        let dir = tempfile::tempdir().unwrap();
        let leaves = {
            let (mut sm, _, storage) = machine(dir.path());
            receipts_at(&mut sm, 1, 9).await;
            storage.sync().await.unwrap();
            let ids: Vec<String> = (1..10).map(|i| format!("inv_{i:010}")).collect();
            expected_leaves(&sm, &ids)
        };
        std::fs::remove_file(tree_file_path(dir.path())).unwrap();
        let (sm, _, _) = machine(dir.path());
        assert_tree_of(&sm, &leaves);
    }

    #[tokio::test]
    async fn a_format_4_folder_moves_its_hashes_from_the_database_into_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let leaves = {
            let (mut sm, _, _) = machine(dir.path());
            receipts_at(&mut sm, 1, 7).await;
            let ids: Vec<String> = (1..8).map(|i| format!("inv_{i:010}")).collect();
            let leaves = expected_leaves(&sm, &ids);
            // What format 4 kept: every subtree's hash under x/h/, the ids alone under x/l/.
            let file = std::fs::read(tree_file_path(dir.path())).unwrap();
            let mut batch = sled::Batch::default();
            let mut slots = 0;
            for leaf in 0..7u64 {
                let (mut level, mut at) = (0u8, leaf);
                loop {
                    let slot = crate::store::tree_file::slot(level, at) as usize;
                    let mut key = b"x/h/".to_vec();
                    key.push(level);
                    key.extend_from_slice(&at.to_be_bytes());
                    batch.insert(key, &file[slot * 32..slot * 32 + 32]);
                    slots += 1;
                    if at & 1 == 0 {
                        break;
                    }
                    level += 1;
                    at >>= 1;
                }
                batch.insert(
                    crate::store::index_key(b"x/l/", leaf),
                    ids[leaf as usize].as_bytes(),
                );
            }
            assert_eq!(slots, file.len() / 32);
            sm.tree.apply_batch(batch).unwrap();
            leaves
        };
        std::fs::remove_file(tree_file_path(dir.path())).unwrap();
        let (sm, _, _) = machine(dir.path());
        assert_tree_of(&sm, &leaves);
        assert_eq!(sm.tree.scan_prefix(b"x/h/").count(), 0);
        let entries = sm.log().leaves(0, 7).unwrap();
        assert_eq!(entries.len(), 7);
        for (entry, hash) in entries.iter().zip(&leaves) {
            assert_eq!(&entry.hash, hash);
            assert_eq!(entry.id, format!("inv_{:010}", entry.index + 1));
        }
    }
}

#[tokio::test]
async fn a_request_id_used_twice_in_one_batched_entry_applies_once() {
    let dir = tempfile::tempdir().unwrap();
    let (mut sm, catalogue, _) = machine(dir.path());
    let write =
        |content: &str| Request::with_id(id("twice"), put(1_000, vec![input("TWICE", content)]));
    let results = sm
        .apply_entries([entry(
            1,
            Request {
                request_id: None,
                caller: None,
                command: Command::Batch {
                    requests: vec![write("a"), write("a"), write("b")],
                },
                trace: None,
                trace_context: Default::default(),
            },
        )])
        .await
        .unwrap();
    let CommandResult::Batch { results } = &results[0] else {
        panic!("{results:?}");
    };
    assert!(
        matches!(results[0], CommandResult::Put { .. }),
        "{results:?}"
    );
    assert_eq!(
        results[1],
        CommandResult::Replayed {
            index: 1,
            first: Box::new(results[0].clone())
        },
        "the second use of the key in the same entry replays the first outcome"
    );
    assert_eq!(
        results[2],
        CommandResult::RequestIdReused {
            request_id: id("twice"),
            index: 1
        },
        "a different write under the same key in the same entry is refused"
    );
    assert_eq!(catalogue.read().get("TWICE").unwrap().content, "a");
}

#[tokio::test]
async fn a_prune_applied_while_a_snapshot_is_built_leaves_the_snapshot_at_its_cut() {
    let dir = tempfile::tempdir().unwrap();
    let (mut leader, _, _) = machine(&dir.path().join("leader"));
    receipts_at(&mut leader, 1, 5).await;
    let prune = Request::new(Command::PruneReceipts {
        before_ms: 1_000_000,
        keep_per_key: 0,
        limit: 2,
        max_age_ms: 0,
    });
    // The build's cut is index 5; the prune at 6 applies before the build reads sled.
    let mut builder = leader.get_snapshot_builder().await;
    let pruned = leader
        .apply_entries([entry(6, prune.clone())])
        .await
        .unwrap();
    assert_eq!(
        pruned[0],
        CommandResult::Pruned {
            dropped: 2,
            more: true
        }
    );
    let snapshot = builder.build_snapshot().await.unwrap();
    assert_eq!(snapshot.meta.last_log_id.map(|l| l.index), Some(5));
    let held: Vec<u64> = contents(snapshot.snapshot.path())
        .receipts
        .iter()
        .map(|r| r.index)
        .collect();
    assert_eq!(
        held,
        [1, 2, 3, 4, 5],
        "the snapshot holds the state at its cut"
    );
    // A follower that installs it and applies the same prune ends as the leader.
    let (mut follower, _, _) = machine(&dir.path().join("follower"));
    follower
        .install_snapshot(&snapshot.meta, snapshot.snapshot)
        .await
        .unwrap();
    follower.apply_entries([entry(6, prune)]).await.unwrap();
    assert_eq!(
        follower.receipts().digest().unwrap(),
        leader.receipts().digest().unwrap()
    );
    assert_eq!(follower.receipts().count(), 3);
}

/// Apply is total end to end: no sequence of commands, of any kind and in any grouping,
/// makes apply fail or panic, nor publishing what it applied to the catalogue and the
/// resolver, nor re-publishing the stored state at the next open, nor a snapshot of it.
mod totality {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    /// Words shared by rows, asks and queries, so the resolver's paths are exercised.
    const WORDS: [&str; 10] = [
        "time", "weather", "pay", "the", "is", "deploy", "k8s", "échec", "a", "",
    ];

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::collection::vec(prop::sample::select(WORDS.to_vec()), 0..6)
                .prop_map(|w| w.join(" ")),
            ".{0,40}",
        ]
    }

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec!["A", "B", "ROWCALL_SYNONYMS", "ÜBER", "", "a/b"])
                .prop_map(str::to_owned),
            "[A-Z_]{1,3}",
            ".{0,8}",
        ]
    }

    fn row() -> impl Strategy<Value = RowInput> {
        (
            key(),
            text(),
            prop_oneof![
                text().prop_map(|t| format!("# WHAT: {t}\n# ARGS: {t}\n\n{t}")),
                Just("[[\"k8s\",\"kubernetes\"]]".to_owned()),
                ".{0,60}",
            ],
            prop::collection::vec(text(), 0..3),
            prop::bool::ANY,
            prop::bool::ANY,
            prop_oneof![
                Just(None),
                Just(Some(0u64)),
                Just(Some(1)),
                Just(Some(u64::MAX))
            ],
            prop_oneof![
                Just(json!(null)),
                Just(
                    json!({"type": "object", "properties": {"when": {"description": "the time"}}})
                ),
                Just(json!({"properties": 7})),
            ],
        )
            .prop_map(
                |(key, category, content, pins, enabled, demote, if_version, schema)| {
                    let mut row: RowInput = serde_json::from_value(json!({
                        "key": key, "type": "static", "category": category, "content": content,
                        "pins": pins, "enabled": enabled, "demote": demote,
                    }))
                    .unwrap();
                    row.if_version = if_version;
                    row.args_schema = (!schema.is_null()).then_some(schema);
                    row
                },
            )
    }

    fn receipt_command() -> impl Strategy<Value = Command> {
        (
            prop::sample::select(vec!["inv_0000000001", "inv_0000000002", "", "inv_x"]),
            key(),
            prop_oneof![Just(None), text().prop_map(Some)],
            prop_oneof![
                (0u64..10_000).prop_map(format_ms),
                Just("not a time".to_owned())
            ],
        )
            .prop_map(|(id, key, asked, started_at)| {
                append(Receipt {
                    key,
                    asked,
                    started_at,
                    ..receipt(id, "o")
                })
            })
    }

    fn directory_write() -> impl Strategy<Value = Command> {
        prop_oneof![
            (0u64..u64::MAX, prop::collection::vec(row(), 0..3))
                .prop_map(|(at_ms, rows)| put(at_ms, rows)),
            (key(), prop_oneof![Just(None), Just(Some(1u64))])
                .prop_map(|(key, if_version)| Command::DeleteRow { key, if_version }),
        ]
    }

    fn request_id() -> impl Strategy<Value = Option<RequestId>> {
        prop_oneof![
            Just(None),
            prop::sample::select(vec!["k1", "k2"]).prop_map(|k| Some(id(k))),
        ]
    }

    fn caller() -> impl Strategy<Value = Option<String>> {
        prop::sample::select(vec![None, Some("admin".to_owned()), Some("ci".to_owned())])
    }

    fn request(command: impl Strategy<Value = Command>) -> impl Strategy<Value = Request> {
        (request_id(), caller(), command).prop_map(|(request_id, caller, command)| Request {
            request_id,
            caller,
            command,
            trace: None,
            trace_context: Default::default(),
        })
    }

    fn command() -> impl Strategy<Value = Command> {
        prop_oneof![
            3 => directory_write(),
            2 => receipt_command(),
            2 => prop::collection::vec(request(directory_write()), 0..4)
                .prop_map(|requests| Command::Batch { requests }),
            1 => (0u64..20_000, 0u32..3, 0u32..4, 0u64..20_000).prop_map(
                |(before_ms, keep_per_key, limit, max_age_ms)| Command::PruneReceipts {
                    before_ms,
                    keep_per_key,
                    limit,
                    max_age_ms,
                }
            ),
            1 => (0u64..5, 0u64..8, ".{0,12}", ".{0,12}").prop_map(|(node, size, root, signature)| {
                Command::Cosign { node, size, root, signature }
            }),
            1 => prop::bool::ANY.prop_map(|keep_previous| Command::RotateShareSecret {
                secret: ShareSecret::generate(),
                keep_previous,
            }),
            1 => Just(Command::SetShareSecret { secret: ShareSecret::generate() }),
            1 => (".{0,12}", prop::num::u64::ANY)
                .prop_map(|(id, at_ms)| Command::RevokeShare { id, at_ms }),
            1 => (0u64..5, prop::option::of(0u64..5)).prop_map(|(node, raised)| Command::Alarm {
                node,
                alarm: raised.map(|n| storage_alarm(n, 1 << 40)),
            }),
        ]
    }

    /// The rows a catalogue shows, as (key, version, content).
    fn shown(catalogue: &SharedCatalogue) -> Vec<(String, u64, String)> {
        catalogue
            .read()
            .all_rows()
            .iter()
            .map(|r| (r.key.clone(), r.version, r.content.clone()))
            .collect()
    }

    async fn run(groups: Vec<Vec<Request>>, queries: Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        let (mut sm, catalogue, storage) = machine(&dir.path().join("a"));
        let mut index = 0;
        for group in groups {
            let entries: Vec<Entry> = group
                .into_iter()
                .map(|request| {
                    index += 1;
                    entry(index, request)
                })
                .collect();
            let count = entries.len();
            let results = sm.apply_entries(entries).await.expect("apply never fails");
            assert_eq!(results.len(), count);
            assert_eq!(catalogue.index(), index);
            for query in &queries {
                catalogue.read().ask(query, 5);
            }
        }
        let snapshot = build(&mut sm).await;
        let before = shown(&catalogue);
        drop(sm);
        drop(storage);
        // Re-publishing at open: the same rows, and the resolver takes them all again.
        let (reopened, again, _) = machine(&dir.path().join("a"));
        assert_eq!(shown(&again), before);
        assert_eq!(again.index(), index);
        for query in &queries {
            assert_eq!(
                again
                    .read()
                    .ask(query, 5)
                    .iter()
                    .map(|(hit, _)| hit.key.clone())
                    .collect::<Vec<_>>(),
                catalogue
                    .read()
                    .ask(query, 5)
                    .iter()
                    .map(|(hit, _)| hit.key.clone())
                    .collect::<Vec<_>>(),
                "{query:?} ranks alike after re-publishing"
            );
        }
        drop(reopened);
        // And a snapshot of it installs elsewhere.
        let (mut other, installed, _) = machine(&dir.path().join("b"));
        other
            .install_snapshot(&snapshot.meta, snapshot.snapshot)
            .await
            .unwrap();
        assert_eq!(shown(&installed), before);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

        #[test]
        fn no_sequence_of_commands_makes_apply_or_publishing_panic_or_fail(
            groups in prop::collection::vec(prop::collection::vec(request(command()), 1..5), 1..6),
            queries in prop::collection::vec(text(), 1..3),
        ) {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(run(groups, queries));
        }
    }
}

#[tokio::test]
async fn a_stored_row_that_does_not_decode_is_skipped_at_open_not_a_crash_loop() {
    let dir = tempfile::tempdir().unwrap();
    let (mut sm, _, storage) = machine(dir.path());
    sm.apply_entries([entry(
        1,
        Request::new(put(1, vec![input("KEPT", "# WHAT: kept\n")])),
    )])
    .await
    .unwrap();
    // A row another version wrote, or a damaged value: not a row this build can read.
    sm.tree
        .insert(row_key("BROKEN"), &b"{\"key\":7}"[..])
        .unwrap();
    drop(sm);
    drop(storage);
    let storage = open_storage(dir.path());
    let catalogue = SharedCatalogue::default();
    let reopened = StateMachine::open(&storage, &dir.path().join("snapshots"), catalogue.clone());
    assert!(
        reopened.is_ok(),
        "the node starts with the rows it can read: {:?}",
        reopened.err()
    );
    assert!(catalogue.read().get("KEPT").is_some());
    assert!(catalogue.read().get("BROKEN").is_none());
    assert_eq!(catalogue.index(), 1);
}

#[tokio::test]
async fn an_idempotency_key_is_recognised_only_for_the_caller_that_sent_it() {
    let dir = tempfile::tempdir().unwrap();
    let (mut sm, catalogue, _) = machine(dir.path());
    let write = |caller: &str, key: &str| {
        Request::with_id(id("shared-key"), put(1_000, vec![input(key, "")])).by(caller)
    };
    let first = sm
        .apply_entries([entry(1, write("ci", "CI_ROW"))])
        .await
        .unwrap();
    // Another credential picks the same key for its own, different write.
    let other = sm
        .apply_entries([entry(2, write("deploy", "DEPLOY_ROW"))])
        .await
        .unwrap();
    assert!(
        matches!(other[0], CommandResult::Put { .. }),
        "another caller's key is its own: {other:?}"
    );
    assert!(catalogue.read().get("DEPLOY_ROW").is_some());
    // The first caller's retry still replays its own outcome.
    let retry = sm
        .apply_entries([entry(3, write("ci", "CI_ROW"))])
        .await
        .unwrap();
    assert_eq!(
        retry[0],
        CommandResult::Replayed {
            index: 1,
            first: Box::new(first[0].clone())
        }
    );
    // A record from before callers were carried is still recognised by a scoped retry.
    sm.apply_entries([entry(
        4,
        Request::with_id(id("old-key"), put(1_000, vec![input("OLD", "")])),
    )])
    .await
    .unwrap();
    let again = sm
        .apply_entries([entry(
            5,
            Request::with_id(id("old-key"), put(2_000, vec![input("OLD", "")])).by("admin"),
        )])
        .await
        .unwrap();
    assert!(
        matches!(again[0], CommandResult::Replayed { index: 4, .. }),
        "{again:?}"
    );
}

/// A prune applied in the same batch as the receipts before it drops exactly what it drops
/// when they are applied one entry at a time (the clock engineer's finding: receipts staged
/// earlier in the batch are not in the tree yet, so the prune used to skip them, and nodes
/// that batched their entries differently ended with different receipt logs).
#[tokio::test]
async fn a_prune_drops_the_same_receipts_however_the_entries_before_it_were_batched() {
    let stamped = |i: u64| Receipt {
        key: if i.is_multiple_of(2) { "EVEN" } else { "ODD" }.into(),
        started_at: crate::model::time::format_ms(1_000 * i),
        ..receipt(&format!("inv_{i:010}"), "o")
    };
    let entries = || {
        let prune = Command::PruneReceipts {
            before_ms: 3_500,
            keep_per_key: 1,
            limit: 10,
            max_age_ms: 0,
        };
        (1..=6)
            .map(|i| entry(i, Request::new(append(stamped(i)))))
            .chain([entry(7, Request::new(prune))])
            .collect::<Vec<_>>()
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut one_by_one, _, _) = machine(&dir.path().join("one"));
    let mut last = Vec::new();
    for e in entries() {
        last = one_by_one.apply_entries([e]).await.unwrap();
    }
    let (mut batched, _, _) = machine(&dir.path().join("batched"));
    let all = batched.apply_entries(entries()).await.unwrap();
    assert_eq!(last.last(), all.last(), "the prune's outcome");
    let (count, digest) = one_by_one.receipts().digest().unwrap();
    assert_eq!(count, 2, "1-3 by age, then 4 (EVEN keeps 6), ODD keeps 5");
    assert_eq!(batched.receipts().digest().unwrap(), (count, digest));
    // Dropped before or in the batch that appended them, every receipt keeps its leaf.
    for sm in [&one_by_one, &batched] {
        for i in 1..=6u64 {
            let id = format!("inv_{i:010}");
            assert_eq!(sm.log().leaf_of(&id).unwrap(), Some(i - 1), "{id}");
        }
    }
}

#[test]
fn a_stored_value_of_the_wrong_length_is_no_place_whatever_its_tag() {
    for tag in [Stored::TAG, Stored::TAG_WITH_LEAF] {
        for len in [
            1,
            17,
            20,
            Stored::ENCODED - 1,
            Stored::ENCODED + 7,
            Stored::ENCODED + 9,
        ] {
            let mut value = vec![0u8; len];
            value[0] = tag;
            assert_eq!(Stored::decode(&value), None, "tag {tag}, {len} bytes");
        }
    }
    let mut tag_one_with_a_leaf = vec![0u8; Stored::ENCODED + 8];
    tag_one_with_a_leaf[0] = Stored::TAG;
    assert_eq!(Stored::decode(&tag_one_with_a_leaf), None);
}

/// The `x/n/` keys of a machine's tree (a receipt's leaf by its id, for receipts whose
/// stored value does not hold it).
fn leaf_of_keys(sm: &StateMachine) -> Vec<String> {
    sm.tree
        .scan_prefix(b"x/n/")
        .keys()
        .map(|k| String::from_utf8_lossy(&k.unwrap()[4..]).into_owned())
        .collect()
}

#[tokio::test]
async fn a_kept_receipt_holds_its_leaf_and_a_dropped_one_leaves_it_by_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let (mut sm, _, _) = machine(&dir.path().join("leader"));
    let stamped = |i: u64| Receipt {
        started_at: crate::model::time::format_ms(1_000 * i),
        ..receipt(&format!("inv_{i:010}"), "o")
    };
    sm.apply_entries((1..=5).map(|i| entry(i, Request::new(append(stamped(i))))))
        .await
        .unwrap();
    // Kept receipts: one key each fewer, the leaf in the receipt's own value.
    assert!(leaf_of_keys(&sm).is_empty(), "{:?}", leaf_of_keys(&sm));
    for i in 1..=5u64 {
        let id = format!("inv_{i:010}");
        assert_eq!(sm.log().leaf_of(&id).unwrap(), Some(i - 1), "{id}");
    }
    assert_eq!(sm.log().leaf_of("inv_0000000099").unwrap(), None);

    // Retention drops the two oldest: their leaves are found by id under `x/n/`.
    let prune = Command::PruneReceipts {
        before_ms: 2_500,
        keep_per_key: 0,
        limit: 10,
        max_age_ms: 0,
    };
    sm.apply_entries([entry(6, Request::new(prune))])
        .await
        .unwrap();
    assert!(sm.receipts().get("inv_0000000001").unwrap().is_none());
    assert_eq!(leaf_of_keys(&sm), ["inv_0000000001", "inv_0000000002"]);
    for i in 1..=5u64 {
        let id = format!("inv_{i:010}");
        assert_eq!(sm.log().leaf_of(&id).unwrap(), Some(i - 1), "{id}");
    }

    // A snapshot carries every leaf; the machine that installs it finds each by id.
    let built = build(&mut sm).await;
    let (mut follower, _, _) = machine(&dir.path().join("follower"));
    follower
        .install_snapshot(&built.meta, built.snapshot)
        .await
        .unwrap();
    for i in 1..=5u64 {
        let id = format!("inv_{i:010}");
        assert_eq!(follower.log().leaf_of(&id).unwrap(), Some(i - 1), "{id}");
    }
    // It goes on storing new receipts with their leaves.
    follower
        .apply_entries([entry(7, Request::new(append(stamped(7))))])
        .await
        .unwrap();
    assert_eq!(follower.log().leaf_of("inv_0000000007").unwrap(), Some(5));
    assert!(!leaf_of_keys(&follower).contains(&"inv_0000000007".to_owned()));
}

/// The segment file `n` of a machine's folder.
fn segment_file(dir: &std::path::Path, n: u32) -> std::path::PathBuf {
    dir.join("receipts").join(format!("{n:08x}.seg"))
}

/// Receipts at indexes `from..from + count`, one entry each, every other one with an ask.
fn receipt_entries(from: u64, count: u64) -> Vec<Entry> {
    (from..from + count)
        .map(|i| {
            let asked = i.is_multiple_of(2).then(|| format!("echo number {i}"));
            entry(
                i,
                Request::new(append(Receipt {
                    asked,
                    ..receipt(&format!("inv_{i:010}"), &"o".repeat(200))
                })),
            )
        })
        .collect()
}

async fn apply_one_by_one(sm: &mut StateMachine, entries: &[Entry]) {
    for entry in entries {
        sm.apply_entries([entry.clone()]).await.unwrap();
    }
}

#[tokio::test]
async fn receipt_bodies_live_in_segment_files_and_sled_keeps_where_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let (mut sm, _, storage) = machine(dir.path());
    apply_one_by_one(&mut sm, &receipt_entries(1, 4)).await;
    let value = sm.tree.get(receipt_key("inv_0000000002")).unwrap().unwrap();
    let stored = Stored::decode(&value).expect("a place, not the receipt itself");
    assert_eq!(value.len(), Stored::ENCODED + 8);
    // Entry 2 appended the second leaf.
    assert_eq!(
        (stored.index, stored.asked, stored.leaf),
        (2, true, Some(1))
    );
    let body = std::fs::read(segment_file(dir.path(), 1)).unwrap();
    let at = stored.place.offset as usize + 8;
    let inside: Receipt =
        serde_json::from_slice(&body[at..at + stored.place.len as usize]).unwrap();
    assert_eq!(inside.id, "inv_0000000002");
    let before = sm.receipts().digest().unwrap();
    assert_eq!(before.0, 4);

    // Bytes past the recorded end (a batch sled lost) are cut off at the next open, and
    // the next receipt goes where they were.
    drop((sm, storage));
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(segment_file(dir.path(), 1))
        .unwrap();
    std::io::Write::write_all(&mut file, &[7; 300]).unwrap();
    let (mut sm, _, storage) = machine(dir.path());
    assert!(sm.missing_bodies().is_empty());
    assert_eq!(sm.receipts().digest().unwrap(), before);
    let asked = asked_receipts(&sm.tree, storage.segments(), &[]).unwrap();
    assert_eq!(asked.len(), 2, "{asked:?}");
    apply_one_by_one(&mut sm, &receipt_entries(5, 1)).await;
    let fifth = sm.receipts().get("inv_0000000005").unwrap().unwrap();
    assert_eq!(fifth.index, 5);
    assert_eq!(
        std::fs::metadata(segment_file(dir.path(), 1))
            .unwrap()
            .len(),
        storage.segments().end().offset
    );
}

#[tokio::test]
async fn bodies_a_power_loss_took_are_written_again_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let entries = receipt_entries(1, 5);
    let (mut sm, _, storage) = machine(dir.path());
    apply_one_by_one(&mut sm, &entries).await;
    let before = sm.receipts().digest().unwrap();
    let third =
        Stored::decode(&sm.tree.get(receipt_key("inv_0000000003")).unwrap().unwrap()).unwrap();
    // sled kept its last three batches, the segment file lost their bodies.
    drop((sm, storage));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(segment_file(dir.path(), 1))
        .unwrap();
    file.set_len(u64::from(third.place.offset) + 20).unwrap();
    drop(file);

    let (mut sm, _, storage) = machine(dir.path());
    assert_eq!(sm.missing_bodies(), [3, 4, 5]);
    assert!(sm.receipts().get("inv_0000000004").is_err());
    // The ask of a missing body is learned once it is back, not before.
    assert_eq!(
        asked_receipts(&sm.tree, storage.segments(), &sm.missing)
            .unwrap()
            .len(),
        1
    );

    // An entry that is not in the log, or holds other bytes, is refused by name.
    let error = sm.restore_bodies(&entries[2..4]).await.unwrap_err();
    assert!(
        error.to_string().contains("no longer holds entry 5"),
        "{error}"
    );
    let mut changed = entries[2..].to_vec();
    changed[1] = receipt_entries(4, 1).remove(0);
    if let EntryPayload::Normal(Request {
        command: Command::AppendReceipt { receipt },
        ..
    }) = &mut changed[1].payload
    {
        receipt.output = "changed".into();
    }
    let error = sm.restore_bodies(&changed).await.unwrap_err();
    assert!(error.to_string().contains("other bytes"), "{error}");

    sm.restore_bodies(&entries[2..]).await.unwrap();
    assert_eq!(sm.receipts().digest().unwrap(), before);
    assert!(sm.missing_bodies().is_empty());
    // Written again, each keeps its leaf.
    for i in 1..=5u64 {
        let id = format!("inv_{i:010}");
        assert_eq!(sm.log().leaf_of(&id).unwrap(), Some(i - 1), "{id}");
    }
    drop((sm, storage));
    let (sm, _, storage) = machine(dir.path());
    assert!(sm.missing_bodies().is_empty());
    assert_eq!(sm.receipts().digest().unwrap(), before);
    assert_eq!(
        asked_receipts(&sm.tree, storage.segments(), &[])
            .unwrap()
            .len(),
        2
    );
}

#[tokio::test]
async fn retention_gives_back_segment_files_once_a_sync_made_it_durable() {
    let dir = tempfile::tempdir().unwrap();
    let (mut sm, _, storage) = machine(dir.path());
    // About four receipts per file.
    storage.segments().set_segment_bytes(2_000);
    sm.apply_entries(receipt_entries(1, 40)).await.unwrap();
    let files = storage.segments().files().len();
    assert!(files >= 8, "{files} files");
    sm.apply_entries([entry(
        41,
        Request::new(Command::PruneReceipts {
            before_ms: 0,
            max_age_ms: 0,
            keep_per_key: 3,
            limit: 100,
        }),
    )])
    .await
    .unwrap();
    assert_eq!(
        storage.segments().files().len(),
        files,
        "removed before a sync"
    );
    storage.sync().await.unwrap();
    let left = storage.segments().files();
    assert!(left.len() <= 2, "{left:?}");
    assert_eq!(sm.receipts().count(), 3);
    let newest: Vec<u64> = sm
        .receipts()
        .by_key("ECHO", 10)
        .unwrap()
        .iter()
        .map(|r| r.index)
        .collect();
    assert_eq!(newest, [40, 39, 38]);
    drop((sm, storage));
    let (sm, _, storage) = machine(dir.path());
    assert_eq!(storage.segments().files(), left);
    assert_eq!(sm.receipts().by_key("ECHO", 10).unwrap().len(), 3);
}
