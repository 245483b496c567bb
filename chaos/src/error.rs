//! Errors of the harness itself (not of the cluster under test, which are recorded as data).

use std::path::PathBuf;

/// Why a chaos run could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum ChaosError {
    /// The `rowcall-node` binary is not where we looked.
    #[error("rowcall-node not found at {path}; build it first with `cargo build -p rowcall-node` (the same profile as rowcall-chaos), or pass --node-bin PATH")]
    NodeBinaryMissing {
        /// Where we looked.
        path: PathBuf,
    },
    /// A node process could not be started or signalled.
    #[error("could not {action} node {id}: {source}")]
    Process {
        /// What we tried.
        action: &'static str,
        /// The node.
        id: u64,
        /// The operating system's answer.
        #[source]
        source: std::io::Error,
    },
    /// A node did not become ready in time.
    #[error("node {id} was not ready within {waited_s} s; its log is {log}")]
    NotReady {
        /// The node.
        id: u64,
        /// How long we waited.
        waited_s: u64,
        /// Its log file.
        log: PathBuf,
    },
    /// A node exited by itself.
    #[error("node {id} exited unexpectedly ({status}); its log is {log}")]
    Exited {
        /// The node.
        id: u64,
        /// Its exit status.
        status: String,
        /// Its log file.
        log: PathBuf,
    },
    /// The cluster did not report the expected members after starting.
    #[error("the cluster has {found} members after start, expected {expected}")]
    Membership {
        /// Members reported.
        found: usize,
        /// Members started.
        expected: usize,
    },
    /// Setup writes (the shared rows) never succeeded.
    #[error("setup write {what} failed: {detail}")]
    Setup {
        /// What was written.
        what: String,
        /// The last answer or transport error.
        detail: String,
    },
    /// Local I/O: ports, folders, report files.
    #[error("{what}: {source}")]
    Io {
        /// What we were doing.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Unknown scenario name.
    #[error("unknown scenario {name:?}; known: {known}")]
    UnknownScenario {
        /// What was asked for.
        name: String,
        /// The names we know.
        known: String,
    },
    /// A scenario needs more nodes than were asked for.
    #[error("scenario {scenario} needs at least {needed} nodes, got {nodes}")]
    TooFewNodes {
        /// The scenario.
        scenario: String,
        /// Its minimum.
        needed: usize,
        /// Nodes asked for.
        nodes: usize,
    },
    /// A fault meant for the leader found none, so it hit another node.
    #[error("no leader known within {waited_s} s: the fault hit node 1 instead of the leader")]
    NoLeader {
        /// How long we looked.
        waited_s: u64,
    },
    /// A fault meant for a follower found none up, so it hit the leader.
    #[error("no follower up: the fault hit the leader (node {leader}) instead")]
    NoFollower {
        /// The node hit instead.
        leader: u64,
    },
    /// A wiped node that asked to rejoin under its old id, without its old self removed
    /// first, was let in (issue 10: it must be refused).
    #[error("node {id} came back on a wiped data folder under its old id, without being removed first, and the cluster let it in")]
    UnsafeRejoinAccepted {
        /// The node.
        id: u64,
    },
    /// The unsafe rejoin was not refused the way an operator can act on.
    #[error("node {id}, wiped and rejoining under its old id, {what}; its log is {log}")]
    UnsafeRejoinUnclear {
        /// The node.
        id: u64,
        /// What it did instead of exiting with a message naming the removal.
        what: &'static str,
        /// Its log file.
        log: PathBuf,
    },
    /// The majority side of a split elected no leader.
    #[error("the majority side elected no leader within {waited_s} s")]
    MajorityLeaderless {
        /// How long we looked.
        waited_s: u64,
    },
    /// A node cut off with a deposed leader kept claiming fresh reads.
    #[error("node {id}, cut off with the deposed leader, was still not stale (or still ready) {waited_s} s after the majority had a new leader")]
    NotStale {
        /// The node.
        id: u64,
        /// How long we waited after the new leader appeared.
        waited_s: u64,
    },
    /// The snapshot storm never made a follower catch up by snapshot.
    #[error("snapshot storm: no restarted follower had to catch up by snapshot ({detail})")]
    NoSnapshotCatchUp {
        /// The indexes seen.
        detail: String,
    },
    /// The harness could not make a node the leader.
    #[error("node {id} did not become the leader in {tries} tries (leader: {leader:?})")]
    NotMadeLeader {
        /// The node.
        id: u64,
        /// Elections forced.
        tries: usize,
        /// The leader at the end.
        leader: Option<u64>,
    },
    /// Too few acknowledged operations at the moment a fault was to strike: it would test
    /// nothing acknowledged.
    #[error("only {got} of {wanted} {what} acknowledged within {waited_s} s before the fault")]
    TooFewAcknowledged {
        /// Writes or receipts.
        what: &'static str,
        /// How many were acknowledged.
        got: u64,
        /// How many were wanted.
        wanted: u64,
        /// How long we waited.
        waited_s: u64,
    },
    /// A node came back on lost or older state and the cluster let it in as itself.
    #[error(
        "node {id} came back on {state} and the cluster let it in as itself, with what it had lost"
    )]
    AcceptedUnsafely {
        /// The node.
        id: u64,
        /// What it came back on.
        state: &'static str,
    },
    /// A founder restarted on a lost folder founded a cluster of its own.
    #[error("node {id} founded a second cluster ({theirs}; the others are in {ours})")]
    SecondCluster {
        /// The node.
        id: u64,
        /// Its new cluster id.
        theirs: String,
        /// The cluster id of the others.
        ours: String,
    },
    /// Nodes at the end reported different cluster ids.
    #[error("nodes report different cluster ids: {ids}")]
    ClusterIdsDiffer {
        /// Per node.
        ids: String,
    },
    /// A leader with a clock jumped forward dropped receipts.
    #[error("node {id}, leading with its clock {offset_ms} ms ahead, dropped {dropped} receipts")]
    ClockJumpPruned {
        /// The node.
        id: u64,
        /// Its clock offset.
        offset_ms: u64,
        /// Receipts dropped.
        dropped: u64,
    },
    /// A leader with a clock jumped forward stamped rows in the future.
    #[error("node {id}, leading with its clock ahead, left {rows} rows stamped more than {allowance_s} s past the real time (e.g. {example})")]
    StampedAhead {
        /// The node.
        id: u64,
        /// Rows stamped ahead.
        rows: usize,
        /// One of them.
        example: String,
        /// The allowance.
        allowance_s: u64,
    },
    /// A node restarted on lost or older state was neither refused nor let in.
    #[error("node {id} was neither refused nor let in within {waited_s} s; its log is {log}")]
    Undecided {
        /// The node.
        id: u64,
        /// How long we watched.
        waited_s: u64,
        /// Its log file.
        log: PathBuf,
    },
    /// Encoding the report.
    #[error("encoding JSON: {0}")]
    Json(#[from] serde_json::Error),
}

impl ChaosError {
    /// An I/O error with what we were doing.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            what: what.into(),
            source,
        }
    }

    /// A setup step that failed, with the last answer or error.
    pub fn setup(what: &str, detail: impl std::fmt::Display) -> Self {
        Self::Setup {
            what: what.into(),
            detail: detail.to_string(),
        }
    }
}
