//! Metric names, units and help text, and the Prometheus recorder behind `GET /metrics`.

use std::sync::OnceLock;

use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// HTTP requests by route, method and status.
pub const HTTP_REQUESTS_TOTAL: &str = "rowcall_http_requests_total";
/// HTTP request latency by route.
pub const HTTP_REQUEST_SECONDS: &str = "rowcall_http_request_duration_seconds";
/// Invocations by row type and outcome.
pub const INVOCATIONS_TOTAL: &str = "rowcall_dispatch_invocations_total";
/// Time for a write to be committed and applied, by operation.
pub const WRITE_SECONDS: &str = "rowcall_raft_write_duration_seconds";
/// Writes per proposed Raft entry on the leader (the write batcher's group size).
pub const WRITE_BATCH_SIZE: &str = "rowcall_raft_write_batch_size";
/// Ask latency (resolver only).
pub const ASK_SECONDS: &str = "rowcall_resolver_ask_duration_seconds";
/// The four counts of the directory, by `count`.
pub const DIRECTORY_ROWS: &str = "rowcall_directory_rows";
/// The applied Raft index of this node.
pub const APPLIED_INDEX: &str = "rowcall_raft_applied_index";
/// The current Raft term.
pub const RAFT_TERM: &str = "rowcall_raft_term";
/// 1 if this node leads.
pub const RAFT_IS_LEADER: &str = "rowcall_raft_is_leader";
/// Rows run through the resolver's model (each distinct row text once per node).
pub const ROWS_EMBEDDED_TOTAL: &str = "rowcall_resolver_rows_embedded_total";
/// Asks run through the resolver's model (LRU misses).
pub const ASKS_EMBEDDED_TOTAL: &str = "rowcall_resolver_asks_embedded_total";
/// Passes of the resolver's model over waiting asks: asks embedded over passes is how many
/// asks shared a pass.
pub const ASK_PASSES_TOTAL: &str = "rowcall_resolver_ask_passes_total";
/// Time to embed one ask with the resolver's model (LRU hits included).
pub const QUERY_EMBED_SECONDS: &str = "rowcall_resolver_query_embed_duration_seconds";
/// Members that rank asks otherwise than this node (see `cluster::ranking`).
pub const RANKING_OTHERWISE: &str = "rowcall_resolver_members_ranking_otherwise";
/// Approximate bytes of the resolver index.
pub const RESOLVER_INDEX_BYTES: &str = "rowcall_resolver_index_bytes";
/// Approximate bytes of the directory's rows in memory.
pub const CATALOGUE_ROWS_BYTES: &str = "rowcall_catalogue_rows_bytes";

/// Latency buckets in seconds: 50 µs to 10 s.
const LATENCY_BUCKETS: [f64; 16] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 10.0,
];

/// Bytes this node's data folder takes on disk, as last measured.
pub const STORAGE_USED_BYTES: &str = "rowcall_storage_used_bytes";
/// Bytes free on the disk under the data folder, as last measured.
pub const STORAGE_FREE_BYTES: &str = "rowcall_storage_free_bytes";
/// This node's `[storage] quota_bytes` (0: none).
pub const STORAGE_QUOTA_BYTES: &str = "rowcall_storage_quota_bytes";
/// Storage alarms members hold, as this node has applied them: while above 0 the cluster
/// refuses row writes and invocations.
pub const STORAGE_ALARMS: &str = "rowcall_storage_alarms";
/// 1 when `/readyz` would answer 200.
pub const READY: &str = "rowcall_node_ready";
/// 1 while this node cannot reach the leader or a quorum (its reads are marked stale).
pub const STALE: &str = "rowcall_node_stale";
/// 1 while this node's data folder is behind what it promised its peers (restored from an
/// older copy): it takes no part until re-admitted (see `raft::standing`).
pub const STATE_BEHIND: &str = "rowcall_node_state_behind";
/// Receipts waiting in this node's outbox.
pub const OUTBOX_RECEIPTS: &str = "rowcall_dispatch_outbox_receipts";
/// Writes that asked storage to make them durable (see `store::durable`).
pub const STORE_SYNC_REQUESTS_TOTAL: &str = "rowcall_store_sync_requests_total";
/// Syncs (fdatasync rounds) storage ran; requests / syncs is the group-commit factor.
pub const STORE_SYNCS_TOTAL: &str = "rowcall_store_syncs_total";
/// Time of one sync round (blob fsyncs, sled flush, fdatasync).
pub const STORE_SYNC_SECONDS: &str = "rowcall_store_sync_duration_seconds";
/// Stored rows the catalogue could not publish whole (undecodable at start, or the resolver
/// index found inconsistent): logged and counted, never a crash (see `store::state_machine`).
pub const ROWS_UNPUBLISHABLE_TOTAL: &str = "rowcall_catalogue_rows_unpublishable_total";
/// Writes answered with the outcome of their first attempt (a repeated request id).
pub const WRITES_REPLAYED_TOTAL: &str = "rowcall_raft_writes_replayed_total";
/// Elections this node stood for before its timer, by reason (see `raft::early_election`).
pub const EARLY_CAMPAIGNS_TOTAL: &str = "rowcall_raft_early_campaigns_total";
/// Requests refused by a rate limit, by quota (`ask`, `invoke`, `write`).
pub const RATE_LIMITED_TOTAL: &str = "rowcall_http_rate_limited_total";
/// Requests refused because the node was at a concurrency limit, by what.
pub const BUSY_TOTAL: &str = "rowcall_http_busy_total";
/// HTTP connections closed at accept because the node had `max_connections` open.
pub const CONNECTIONS_REFUSED_TOTAL: &str = "rowcall_http_connections_refused_total";
/// Connections closed after their idle timeout with no request in flight, by listener
/// (`http`, `grpc`).
pub const CONNECTIONS_IDLE_CLOSED_TOTAL: &str = "rowcall_connections_idle_closed_total";
/// Open HTTP connections.
pub const CONNECTIONS_OPEN: &str = "rowcall_http_connections_open";
/// Receipts dropped by the retention policy.
pub const RECEIPTS_PRUNED_TOTAL: &str = "rowcall_receipts_pruned_total";
/// Checkpoint signatures of the receipt log this node proposed.
pub const CHECKPOINT_SIGNATURES_TOTAL: &str = "rowcall_checkpoint_signatures_total";
/// Leaves in the receipt log's tree on this node.
pub const RECEIPT_LOG_LEAVES: &str = "rowcall_receipt_log_leaves";
/// Leaves covered by the latest co-signed checkpoint on this node.
pub const CHECKPOINT_LEAVES: &str = "rowcall_checkpoint_leaves";
/// AppendEntries this node sent as leader that went unanswered within their bound (the heartbeat,
/// or at least `STREAM_ANSWER_FLOOR` on a stream of appends), by peer.
pub const APPENDS_UNANSWERED_TOTAL: &str = "rowcall_raft_appends_unanswered_total";
/// Streams of appends this node opened as leader, by peer.
pub const APPEND_STREAMS_TOTAL: &str = "rowcall_raft_append_streams_total";
/// Bytes of snapshot files this node sent as leader, by peer and form (`packed`: the file as
/// it is at rest; `lines`: unpacked, to a follower that installs only plain files).
pub const SNAPSHOT_SENT_BYTES_TOTAL: &str = "rowcall_raft_snapshot_sent_bytes_total";
/// Appends this node sent as leader one at a time, to a peer of an older build that serves
/// no streams, by peer.
pub const APPENDS_UNSTREAMED_TOTAL: &str = "rowcall_raft_appends_unstreamed_total";
/// Peer messages this node refused, by reason (another cluster, a replaced incarnation, ...).
pub const PEER_REFUSALS_TOTAL: &str = "rowcall_raft_peer_refusals_total";
/// New leaders this node has seen (the first one included), as etcd's
/// `etcd_server_leader_changes_seen_total`.
pub const LEADER_CHANGES_TOTAL: &str = "rowcall_raft_leader_changes_seen_total";

/// How often histogram samples are drained into their buckets.
const UPKEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Installs the process-wide recorder once and returns its handle (in-process test clusters
/// share it).
pub fn install() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            // Histograms (not summaries) so a cluster-wide percentile can be computed from
            // every node's buckets.
            let recorder = PrometheusBuilder::new()
                .set_buckets(&LATENCY_BUCKETS)
                .map(|b| b.build_recorder())
                .unwrap_or_else(|_| PrometheusBuilder::new().build_recorder());
            let handle = recorder.handle();
            // Fails only if another recorder was installed first; then ours just renders empty.
            let _ = metrics::set_global_recorder(recorder);
            describe();
            // A recorder built this way keeps every histogram sample until upkeep drains it
            // into the buckets (a scrape does too): without it a node nobody scrapes grows by
            // every latency it records (about 50 bytes an invocation, measured). The
            // exporter's own upkeep task is only started by its HTTP listener, which the node
            // does not use (it serves /metrics itself).
            let upkept = handle.clone();
            let _ = std::thread::Builder::new()
                .name("metrics-upkeep".into())
                .spawn(move || loop {
                    std::thread::sleep(UPKEEP_EVERY);
                    upkept.run_upkeep();
                });
            handle
        })
        .clone()
}

fn describe() {
    describe_counter!(
        HTTP_REQUESTS_TOTAL,
        "HTTP requests by route, method and status."
    );
    describe_histogram!(
        HTTP_REQUEST_SECONDS,
        Unit::Seconds,
        "HTTP request latency by route."
    );
    describe_counter!(INVOCATIONS_TOTAL, "Invocations by row type and outcome.");
    describe_counter!(
        ROWS_EMBEDDED_TOTAL,
        "Rows run through the resolver's model on this node."
    );
    describe_counter!(
        ASKS_EMBEDDED_TOTAL,
        "Asks run through the resolver's model on this node (LRU misses)."
    );
    describe_counter!(
        ASK_PASSES_TOTAL,
        "Passes of the resolver's model over the asks waiting for it (asks embedded / passes = asks per pass)."
    );
    describe_histogram!(
        QUERY_EMBED_SECONDS,
        Unit::Seconds,
        "Time to embed one ask with the resolver's model."
    );
    describe_histogram!(
        WRITE_BATCH_SIZE,
        Unit::Count,
        "Directory writes proposed together in one Raft entry by the leader."
    );
    describe_histogram!(
        WRITE_SECONDS,
        Unit::Seconds,
        "Time from proposing a write to its apply on this node."
    );
    describe_histogram!(ASK_SECONDS, Unit::Seconds, "Resolver time of one ask.");
    describe_gauge!(
        DIRECTORY_ROWS,
        "The four counts of the directory (rows_total, enabled, planner_visible, mcp_projected)."
    );
    describe_gauge!(APPLIED_INDEX, "The Raft log index this node has applied.");
    describe_gauge!(
        STATE_BEHIND,
        "1 while this node's data folder is older than what it promised its peers: it takes no part until re-admitted."
    );
    describe_gauge!(RAFT_TERM, "The current Raft term.");
    describe_gauge!(RAFT_IS_LEADER, "1 if this node is the Raft leader.");
    describe_gauge!(
        RESOLVER_INDEX_BYTES,
        Unit::Bytes,
        "Approximate heap bytes of the resolver index."
    );
    describe_gauge!(
        CATALOGUE_ROWS_BYTES,
        Unit::Bytes,
        "Approximate heap bytes of the directory's rows held in memory (the resolver index apart)."
    );
    describe_gauge!(
        STORAGE_USED_BYTES,
        Unit::Bytes,
        "Bytes this node's data folder takes on disk, as last measured."
    );
    describe_gauge!(
        STORAGE_FREE_BYTES,
        Unit::Bytes,
        "Bytes free on the disk under the data folder, as last measured."
    );
    describe_gauge!(
        STORAGE_QUOTA_BYTES,
        Unit::Bytes,
        "This node's [storage] quota_bytes (0: no quota)."
    );
    describe_gauge!(
        STORAGE_ALARMS,
        "Storage alarms members hold: while above 0 the cluster refuses row writes and invocations (507)."
    );
    describe_gauge!(
        RANKING_OTHERWISE,
        "Members that rank asks otherwise than this node (another model, query embedding or learn setting), as they last said."
    );
    describe_counter!(
        STORE_SYNC_REQUESTS_TOTAL,
        "Writes that asked storage to make them durable."
    );
    describe_counter!(
        STORE_SYNCS_TOTAL,
        "Sync rounds run (one fdatasync covers every write issued before it started)."
    );
    describe_histogram!(
        STORE_SYNC_SECONDS,
        Unit::Seconds,
        "Time of one sync round: blob fsyncs, sled flush, fdatasync."
    );
    describe_counter!(
        RATE_LIMITED_TOTAL,
        "Requests refused with 429 by a rate limit, by quota."
    );
    describe_counter!(
        BUSY_TOTAL,
        "Requests refused with 503 at a concurrency limit, by what."
    );
    describe_counter!(
        CONNECTIONS_REFUSED_TOTAL,
        "HTTP connections closed at accept: max_connections were open."
    );
    describe_counter!(
        CONNECTIONS_IDLE_CLOSED_TOTAL,
        "Connections closed after their idle timeout with no request in flight, by listener."
    );
    describe_gauge!(CONNECTIONS_OPEN, "Open HTTP connections.");
    describe_counter!(
        CHECKPOINT_SIGNATURES_TOTAL,
        "Checkpoint signatures of the receipt log this node proposed."
    );
    describe_gauge!(
        RECEIPT_LOG_LEAVES,
        "Leaves in the receipt log's Merkle tree (receipts ever committed)."
    );
    describe_gauge!(
        CHECKPOINT_LEAVES,
        "Leaves covered by the latest checkpoint a majority of voters co-signed."
    );
    describe_counter!(
        RECEIPTS_PRUNED_TOTAL,
        "Receipts dropped by the retention policy."
    );
    describe_counter!(
        ROWS_UNPUBLISHABLE_TOTAL,
        "Stored rows the catalogue could not publish whole (see the node's log)."
    );
    describe_counter!(
        WRITES_REPLAYED_TOTAL,
        "Writes answered with the outcome of their first attempt (repeated request id)."
    );
    describe_counter!(
        EARLY_CAMPAIGNS_TOTAL,
        "Elections stood for before the election timer, by reason (split_vote, shorter_log_candidate)."
    );
    describe_counter!(
        APPEND_STREAMS_TOTAL,
        "Streams of appends opened as leader, by peer: a new one after each stream ended (a fault, a lost leadership, an unanswered append)."
    );
    describe_counter!(
        SNAPSHOT_SENT_BYTES_TOTAL,
        Unit::Bytes,
        "Bytes of snapshot files sent as leader, by peer and form: packed (the compressed file as it is at rest) or lines (unpacked, for a follower of an older build)."
    );
    describe_counter!(
        APPENDS_UNSTREAMED_TOTAL,
        "Appends sent as leader one at a time to a peer of an older build (peer protocol 1) that serves no append streams, by peer."
    );
    describe_counter!(
        APPENDS_UNANSWERED_TOTAL,
        "AppendEntries sent as leader and not answered within the heartbeat interval, by peer (a peer down or cut off, or a round trip longer than raft.heartbeat_ms)."
    );
    describe_counter!(
        PEER_REFUSALS_TOTAL,
        "Peer messages this node refused, by reason (other_cluster, replaced, stale_sender, not_member, not_joined, wrong_node, anonymous)."
    );
    describe_counter!(
        LEADER_CHANGES_TOTAL,
        "New leaders this node has seen, the first one included."
    );
}
