//! What openraft's types look like on the wire and on disk, pinned to what openraft 0.9.25
//! wrote: the Raft messages between nodes (JSON in the peer envelope) and the log entries,
//! votes, log ids, memberships and snapshot metas in a data folder (JSON in sled and in the
//! write-ahead log). The strings below were printed by 0.9.25 with the same serde settings;
//! each must read into today's type and write back byte for byte (a snapshot meta's
//! retired `snapshot_id` comes back empty, which 0.9 reads as well; a vote request gains a
//! field 0.9 ignores). So a folder written by
//! a 0.9 build opens in this one, and builds of both lines replicate to each other during a
//! rolling upgrade.

use openraft::error::RaftError;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::network::SnapshotChunk;
use super::{Entry, LogId, NodeInfo, Request, SnapshotMeta, StoredMembership, TypeConfig, Vote};

const LOG_ID: &str = r#"{"leader_id":{"term":3,"node_id":2},"index":7}"#;
const VOTE: &str = r#"{"leader_id":{"term":3,"node_id":2},"committed":true}"#;
const MEMBERSHIP: &str = r#"{"configs":[[1,2]],"nodes":{"1":{"grpc_addr":"a:1","http_addr":"a:8","cluster_id":"c","incarnation":"i1"},"2":{"grpc_addr":"b:2","http_addr":"b:8","cluster_id":"c","incarnation":"i2"}}}"#;

/// `template` with `{LOG_ID}`, `{VOTE}` and `{MEMBERSHIP}` filled in.
fn fill(template: &str) -> String {
    template
        .replace("{LOG_ID}", LOG_ID)
        .replace("{VOTE}", VOTE)
        .replace("{MEMBERSHIP}", MEMBERSHIP)
}

/// `json` reads as `T` and writes back as `expected`.
fn round_trip<T: Serialize + DeserializeOwned>(json: &str, expected: &str) -> T {
    let value: T = serde_json::from_str(json).unwrap_or_else(|e| {
        panic!(
            "{json} does not read as {}: {e}",
            std::any::type_name::<T>()
        )
    });
    assert_eq!(serde_json::to_string(&value).unwrap(), expected);
    value
}

fn same<T: Serialize + DeserializeOwned>(template: &str) -> T {
    let json = fill(template);
    round_trip(&json, &json)
}

#[test]
fn log_ids_votes_and_entries_read_and_write_as_openraft_0_9_did() {
    let log_id: LogId = same("{LOG_ID}");
    assert_eq!(
        (
            log_id.leader_id.term,
            log_id.leader_id.node_id,
            log_id.index
        ),
        (3, 2, 7)
    );
    let vote: Vote = same("{VOTE}");
    assert!(vote.committed);
    same::<Entry>(r#"{"log_id":{LOG_ID},"payload":"Blank"}"#);
    let entry: Entry = same(r#"{"log_id":{LOG_ID},"payload":{"Membership":{MEMBERSHIP}}}"#);
    let openraft::EntryPayload::Membership(membership) = entry.payload else {
        panic!("a membership entry");
    };
    assert_eq!(
        membership
            .get_node(&2)
            .map(|n: &NodeInfo| n.incarnation.as_str()),
        Some("i2")
    );
    let request = serde_json::to_string(&Request::new(super::Command::DeleteRow {
        key: "K".into(),
        if_version: None,
    }))
    .unwrap();
    same::<Entry>(&format!(
        r#"{{"log_id":{{LOG_ID}},"payload":{{"Normal":{request}}}}}"#
    ));
    same::<StoredMembership>(r#"{"log_id":{LOG_ID},"membership":{MEMBERSHIP}}"#);
}

#[test]
fn a_snapshot_meta_of_0_9_reads_and_its_retired_id_is_written_empty() {
    let old = fill(
        r#"{"last_log_id":{LOG_ID},"last_membership":{"log_id":{LOG_ID},"membership":{MEMBERSHIP}},"snapshot_id":"3-7-1700000000000"}"#,
    );
    let now = old.replace("3-7-1700000000000", "");
    let meta: SnapshotMeta = round_trip(&old, &now);
    assert_eq!(meta.last_log_id.map(|l| l.index), Some(7));
}

#[test]
fn raft_messages_read_and_write_as_openraft_0_9_sent_them() {
    same::<AppendEntriesRequest<TypeConfig>>(
        r#"{"vote":{VOTE},"prev_log_id":{LOG_ID},"entries":[{"log_id":{LOG_ID},"payload":"Blank"}],"leader_commit":{LOG_ID}}"#,
    );
    for answer in [
        r#"{"Ok":"Success"}"#,
        r#"{"Ok":{"PartialSuccess":{LOG_ID}}}"#,
        r#"{"Ok":"Conflict"}"#,
        r#"{"Ok":{"HigherVote":{VOTE}}}"#,
        r#"{"Err":{"Fatal":"Stopped"}}"#,
    ] {
        let _: Result<_, _> =
            same::<Result<AppendEntriesResponse<TypeConfig>, RaftError<TypeConfig>>>(answer);
    }
    // 0.10 adds whether the vote is asked for a leadership transfer; 0.9 ignores the field
    // (serde's default for fields it does not know), and reads nothing else differently.
    let old = fill(r#"{"vote":{VOTE},"last_log_id":{LOG_ID}}"#);
    let now = format!(r#"{},"leadership_transfer":false}}"#, &old[..old.len() - 1]);
    round_trip::<VoteRequest<TypeConfig>>(&old, &now);
    let _: Result<_, _> = same::<Result<VoteResponse<TypeConfig>, RaftError<TypeConfig>>>(
        r#"{"Ok":{"vote":{VOTE},"vote_granted":true,"last_log_id":{LOG_ID}}}"#,
    );
    // A snapshot's piece as 0.9's chunked install sent it, and the answer it took.
    let old = fill(
        r#"{"vote":{VOTE},"meta":{"last_log_id":{LOG_ID},"last_membership":{"log_id":{LOG_ID},"membership":{MEMBERSHIP}},"snapshot_id":"s1"},"offset":0,"data":[1,2],"done":true}"#,
    );
    let chunk: SnapshotChunk = round_trip(&old, &old.replace("\"s1\"", "\"\""));
    assert_eq!(
        (chunk.offset, chunk.data.as_slice(), chunk.done),
        (0, &[1u8, 2][..], true)
    );
    let _: Result<_, _> =
        same::<Result<SnapshotResponse<TypeConfig>, String>>(r#"{"Ok":{"vote":{VOTE}}}"#);
}
