//! The checker: judges a recorded history and the nodes' final state against DESIGN §3.1–3.2.
//!
//! Definitions (each session is sequential, so its events are totally ordered):
//!
//! - **Allowed values of a row.** A session alone writes its rows. After an acknowledged
//!   write the only allowed value is what it wrote (`None` after a delete). A write that
//!   failed ambiguously (timeout, 5xx, 504 `outcome_unknown`: it may still commit) adds its
//!   value to the allowed set; a refused write (4xx) changes nothing. Before the first write a
//!   row is absent.
//! - **Late value.** Linearizability lets a request that got no answer take effect after a
//!   later acknowledged one. A value outside the allowed set is *late* (reported, not a
//!   failure) only with proof: an ambiguous write carried it, and a row version shows it was
//!   committed after the last acknowledged write before the observation (for an ask, which
//!   carries no version, a node's final row supplies the version, and it must be at or below
//!   the index the ask was answered at). A missing row is never late: a delete leaves no
//!   version, so nothing proves when it landed. The workload never writes a row again after
//!   an ambiguous delete (the row is frozen) or an acknowledged one, so a legitimate late
//!   delete cannot arise from it; a workload that did would see it reported as a loss (a
//!   false alarm, never a hidden loss).
//! - **Lost write.** A row with an acknowledged write (the harness's shared rows included)
//!   whose final value, on some node, is not allowed and not proven late. Counted once per
//!   row.
//! - **Phantom row.** A row on some node at the end that no acknowledged write explains: a
//!   key nobody wrote, or a value of a row that only ever had ambiguous writes that is none of
//!   theirs.
//! - **Read-your-writes violation.** A successful read (directory read, contract, ask) by
//!   the owning session of a row it wrote that shows a value not allowed at that moment and
//!   not proven late; for asks, the row missing while it must exist or present while it must
//!   be gone. A confirm of a receipt the session was given that answers `confirmed: false`,
//!   unless the receipt was pending (outbox) and the confirm went to another node, or to its
//!   node after a wipe (a pending receipt is promised only where it ran, until healing).
//! - **Index going backwards.** For one session and one node incarnation (a wipe starts a
//!   new one; a restart does not, since applied state is durable), the `x-rowcall-index` of
//!   successive successful answers never decreases: a write answers only once its node has
//!   applied it (§3.1), and applied state only grows. A regression fails the run. Separately,
//!   a read that sent `x-rowcall-min-index: N` and succeeded must carry an index ≥ N (the
//!   barrier held).
//! - **History error.** An acknowledged write whose answer carried no index: nothing could
//!   be proven late against it, and §3.1 promises one. Fails the run.
//! - **Lost receipt.** A receipt id a client was given (committed or pending) that some
//!   node does not confirm at the end.
//! - **Final state.** Every node the history talked to answered at the end (an unreachable
//!   or absent node vouches for nothing), the cluster settled (outboxes drained, digests
//!   agreed), and the nodes' digests (directory and receipt log) are equal at one index;
//!   otherwise the run fails.
//!
//! Beside these, the same history goes through an outside checker (`linearizability.rs`:
//! a linearizability tester nobody here wrote, over a per-row register); its verdict is
//! part of this one, and a row it finds not linearizable fails the run too.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use crate::cluster::{shared_row, SHARED_ROWS};
use crate::history::{Event, FinalState, Op, Outcome, Seen};
use crate::linearizability::{self, Linearizability};

/// This checker, as the report names it beside the outside one.
pub const CHECKER: &str = "rowcall-chaos check.rs";

/// At most this many examples of each problem are kept in the report.
const EXAMPLES: usize = 12;

/// The verdict on one run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Verdict {
    /// Rows with an acknowledged write not reflected on every node.
    pub lost_writes: usize,
    /// Receipts given to clients that some node does not confirm.
    pub lost_receipts: usize,
    /// Reads of a session's own writes that did not show them.
    pub ryw_violations: usize,
    /// Answers whose index went backwards for a session on one node.
    pub index_regressions: usize,
    /// Reads answered below the `x-rowcall-min-index` they sent.
    pub barrier_violations: usize,
    /// Rows at the end that no write explains.
    pub phantom_rows: usize,
    /// Written values seen at more than one row version: one write applied twice (its
    /// retries or hedges each took effect instead of being answered with the first
    /// outcome). Every value is written by one operation, and a row's version is the log
    /// index of the write that left it, so once applied it is seen at one version only.
    pub duplicate_applies: usize,
    /// Acknowledged writes whose answer carried no index.
    pub history_errors: usize,
    /// Nodes the history talked to that did not answer at the end (or are missing from it).
    pub unreachable_nodes: Vec<u64>,
    /// Nodes whose end state was checked.
    pub nodes_checked: usize,
    /// Outboxes drained and digests agreed within the bound.
    pub settled: bool,
    /// The nodes' directories or receipt logs differ (or never settled).
    pub diverged: bool,
    /// Why, when diverged.
    pub divergence: Option<String>,
    /// Acknowledged inserts, updates and deletes.
    pub acknowledged_writes: usize,
    /// Writes that failed ambiguously (may or may not have committed).
    pub ambiguous_writes: usize,
    /// Receipts given to clients.
    pub receipts_given: usize,
    /// Of those, given as pending (outbox).
    pub pending_receipts_given: usize,
    /// Rows (at the end) and reads showing a write that failed ambiguously and, by a row
    /// version, took effect after a later acknowledged write of the same session (allowed
    /// by linearizability: the timed-out request was still in flight). Reported, not gated.
    pub late_writes: usize,
    /// Invocations of a session's own row that ran an older version or found no row (not a
    /// promise of §3.1, which covers reads; reported so it can be seen).
    pub invoke_stale: usize,
    /// Examples of each problem found.
    pub examples: BTreeMap<String, Vec<String>>,
    /// The outside checker's verdict on the same history (reported on its own, beside
    /// this one: see `report::RunReport::linearizability`).
    #[serde(skip)]
    pub linearizability: Linearizability,
}

impl Verdict {
    /// Every check held, this checker's ([`Verdict::harness_passed`]) and the outside
    /// checker's (every row linearizable, none unchecked). Whether the run did enough to
    /// count as evidence is judged beside this (`report::RunReport::evidence`).
    pub fn passed(&self) -> bool {
        self.harness_passed() && self.linearizability.holds()
    }

    /// This checker's own checks held: no lost write or receipt, no phantom row, no RYW
    /// violation (a broken `min_index` barrier is one), no index regression, no history
    /// error, and an end state that vouches for it (at least one node, every node
    /// reachable, settled, not diverged).
    pub fn harness_passed(&self) -> bool {
        self.lost_writes == 0
            && self.lost_receipts == 0
            && self.phantom_rows == 0
            && self.duplicate_applies == 0
            && self.ryw_violations == 0
            && self.barrier_violations == 0
            && self.index_regressions == 0
            && self.history_errors == 0
            && self.nodes_checked > 0
            && self.unreachable_nodes.is_empty()
            && self.settled
            && !self.diverged
    }

    /// What failed, each named with the checker that found it (empty when all held).
    pub fn failures(&self) -> Vec<String> {
        let mut found = Vec::new();
        let counts = [
            (self.lost_writes, "lost writes"),
            (self.lost_receipts, "lost receipts"),
            (self.phantom_rows, "phantom rows"),
            (self.duplicate_applies, "writes applied twice"),
            (self.ryw_violations, "read-your-writes violations"),
            (self.barrier_violations, "min-index barrier violations"),
            (self.index_regressions, "index regressions"),
            (self.history_errors, "history errors"),
        ];
        for (n, what) in counts {
            if n > 0 {
                found.push(format!("{CHECKER}: {n} {what}"));
            }
        }
        if self.nodes_checked == 0 || !self.unreachable_nodes.is_empty() || !self.settled {
            found.push(format!("{CHECKER}: the end state vouches for nothing"));
        }
        if self.diverged {
            found.push(format!("{CHECKER}: the nodes diverged"));
        }
        let lin = &self.linearizability;
        if lin.violating_keys > 0 {
            found.push(format!(
                "{}: {} rows not linearizable",
                lin.checker, lin.violating_keys
            ));
        }
        if lin.unchecked_keys > 0 {
            found.push(format!(
                "{}: {} rows unchecked",
                lin.checker, lin.unchecked_keys
            ));
        }
        found
    }

    fn note(&mut self, kind: &str, example: String) {
        let list = self.examples.entry(kind.to_owned()).or_default();
        if list.len() < EXAMPLES {
            list.push(example);
        }
    }
}

/// How an observed value of a row stands.
#[derive(Debug, PartialEq)]
enum Judged {
    /// Allowed now.
    Allowed,
    /// Left by a write that failed ambiguously and, by its row version, took effect after a
    /// later acknowledged write: a timed-out request still in flight, which linearizability
    /// allows. Reported, not a loss.
    Late,
    /// Neither.
    Wrong,
}

/// What a session knows about one of its rows.
#[derive(Debug, Clone, Default)]
struct Truth {
    /// Values the row may have now.
    allowed: Vec<Option<String>>,
    /// Whether some write of it was acknowledged.
    acked: bool,
    /// The session that writes it (read-your-writes is that session's promise).
    owner: u32,
    /// The index of the last acknowledged write; `None` before the first one, or when its
    /// answer carried no index (a history error: then nothing can be proven late).
    acked_index: Option<u64>,
    /// Every value an ambiguous write of it carried (it may still land, even late).
    pending: Vec<Option<String>>,
}

impl Truth {
    fn new(owner: u32) -> Self {
        Self {
            allowed: vec![None],
            acked: false,
            owner,
            acked_index: None,
            pending: Vec::new(),
        }
    }

    /// Judges `value` (with the row's `version`, when it exists).
    fn judge(&self, value: &Option<String>, version: Option<u64>) -> Judged {
        if self.allows(value) {
            Judged::Allowed
        } else if self.proven_late(value, version) {
            Judged::Late
        } else {
            Judged::Wrong
        }
    }

    /// Whether `value` at `version` is an ambiguous write's that committed after the last
    /// acknowledged write. A missing row has no version, so it never is.
    fn proven_late(&self, value: &Option<String>, version: Option<u64>) -> bool {
        let after = match (value, version, self.acked_index) {
            (Some(_), Some(version), Some(acked)) => version > acked,
            _ => false,
        };
        after && self.pending.contains(value)
    }

    fn allows(&self, value: &Option<String>) -> bool {
        self.allowed.contains(value)
    }

    /// `Some(true)`: must exist; `Some(false)`: must be gone; `None`: either.
    fn must_exist(&self) -> Option<bool> {
        let present = self.allowed.iter().filter(|v| v.is_some()).count();
        if present == self.allowed.len() {
            Some(true)
        } else if present == 0 {
            Some(false)
        } else {
            None
        }
    }
}

/// An ask that found a row its session had deleted. It carries no version, so whether a
/// late ambiguous write explains it is decided at the end, from the nodes' final rows.
#[derive(Debug)]
struct Doubt {
    /// The ask, described.
    what: String,
    /// The row.
    key: String,
    /// The row's state when the ask was answered.
    truth_then: Truth,
    /// The index the ask was answered at.
    answered_at: Option<u64>,
}

impl Doubt {
    /// Proven late: some node holds a value an ambiguous write carried, committed after the
    /// last acknowledged write before the ask and at or below the index the ask saw.
    fn proven_late(&self, end: &FinalState) -> bool {
        end.nodes.iter().any(|node| {
            node.rows.get(&self.key).is_some_and(|stored| {
                let value = Some(stored.token.clone());
                self.answered_at.is_some_and(|at| stored.version <= at)
                    && self.truth_then.proven_late(&value, Some(stored.version))
            })
        })
    }
}

/// A receipt a session was given.
#[derive(Debug)]
struct Given {
    pending: bool,
    node: u64,
    incarnation: u32,
}

/// Judges `history` (any order; sorted here per session by start) and `end`.
pub fn check(history: &[Event], end: &FinalState) -> Verdict {
    let mut verdict = Verdict::default();
    let mut by_session: BTreeMap<u32, Vec<&Event>> = BTreeMap::new();
    for event in history.iter().filter(|e| !e.blocked()) {
        by_session.entry(event.session).or_default().push(event);
    }
    let mut known = Known::default();
    for events in by_session.values_mut() {
        events.sort_by_key(|e| e.start_us);
        session(events, &mut known, &mut verdict);
    }
    final_nodes(history, end, &mut verdict);
    doubts(&known.doubts, end, &mut verdict);
    final_rows(&known.rows, end, &mut verdict);
    duplicate_applies(history, end, &mut verdict);
    final_receipts(&known.receipts, end, &mut verdict);
    divergence(end, &mut verdict);
    verdict.linearizability = linearizability::check(history, end);
    verdict
}

/// What the sessions' histories established, for judging the end state.
#[derive(Debug, Default)]
struct Known {
    /// Every row a session wrote, by key.
    rows: BTreeMap<String, Truth>,
    /// Every receipt a session was given, by id.
    receipts: BTreeMap<String, Given>,
    /// Asks only the end state can judge.
    doubts: Vec<Doubt>,
}

fn describe(e: &Event) -> String {
    format!(
        "session {} {} on node {} at {:.3}s (index {:?}, min_index {})",
        e.session,
        e.op.name(),
        e.node,
        e.start_us as f64 / 1e6,
        e.index,
        e.min_index
    )
}

fn show(value: &Option<String>) -> String {
    value.clone().unwrap_or_else(|| "<absent>".into())
}

fn session(events: &[&Event], known: &mut Known, verdict: &mut Verdict) {
    let Known {
        rows,
        receipts,
        doubts,
    } = known;
    // Per node incarnation: the highest index seen, and the operation that showed it.
    let mut last_index: HashMap<(u64, u32), (u64, &'static str)> = HashMap::new();
    for e in events {
        // Indexes: never backwards on one node incarnation; reads honour min_index.
        if let (true, Some(index)) = (e.ok(), e.index) {
            let last = last_index
                .entry((e.node, e.incarnation))
                .or_insert((0, "none"));
            if index < last.0 {
                verdict.index_regressions += 1;
                verdict.note(
                    "index_regression",
                    format!(
                        "{}: index {index} after {} answered at {}",
                        describe(e),
                        last.1,
                        last.0
                    ),
                );
            }
            if index > last.0 {
                *last = (index, e.op.name());
            }
            if e.op.class() == crate::history::Class::Read && e.min_index > index {
                verdict.barrier_violations += 1;
                verdict.note("barrier_violation", describe(e));
            }
        }
        if let Some((key, value)) = e.op.written() {
            let truth = rows
                .entry(key.to_owned())
                .or_insert_with(|| Truth::new(e.session));
            let value = value.map(str::to_owned);
            match &e.outcome {
                Outcome::Ok(_) => {
                    verdict.acknowledged_writes += 1;
                    truth.allowed = vec![value];
                    truth.acked = true;
                    truth.acked_index = e.index;
                    if e.index.is_none() {
                        verdict.history_errors += 1;
                        verdict.note(
                            "history_error",
                            format!("{}: acknowledged without an index", describe(e)),
                        );
                    }
                }
                Outcome::Failed {
                    ambiguous: true, ..
                } => {
                    verdict.ambiguous_writes += 1;
                    if !truth.allowed.contains(&value) {
                        truth.allowed.push(value.clone());
                    }
                    truth.pending.push(value);
                }
                Outcome::Failed { .. } => {}
            }
            continue;
        }
        let Outcome::Ok(seen) = &e.outcome else {
            continue;
        };
        match (&e.op, seen) {
            (Op::Read { key } | Op::Contract { key }, Seen::Row { token, version }) => {
                let Some(truth) = own(rows, key, e.session) else {
                    continue;
                };
                let judged = truth.judge(token, *version);
                if judged == Judged::Late {
                    verdict.late_writes += 1;
                    verdict.note(
                        "late_write",
                        format!(
                            "{}: {key} showed {} (version {version:?})",
                            describe(e),
                            show(token)
                        ),
                    );
                }
                {
                    if judged == Judged::Wrong {
                        verdict.ryw_violations += 1;
                        verdict.note(
                            "ryw",
                            format!(
                                "{}: {key} showed {}, allowed {:?}",
                                describe(e),
                                show(token),
                                truth.allowed.iter().map(show).collect::<Vec<_>>()
                            ),
                        );
                    }
                }
            }
            (
                Op::Ask {
                    key: Some(key),
                    word,
                },
                Seen::Ask { keys },
            ) => {
                let Some(truth) = own(rows, key, e.session) else {
                    continue;
                };
                let found = keys.contains(key);
                if truth.must_exist().is_some_and(|must| must != found) {
                    let what = format!(
                        "{}: ask {word:?} {} {key}",
                        describe(e),
                        if found { "still found" } else { "did not find" }
                    );
                    if found {
                        // Present after its delete: a late ambiguous write may explain it,
                        // which only the final rows' versions can show.
                        doubts.push(Doubt {
                            what,
                            key: key.clone(),
                            truth_then: truth.clone(),
                            answered_at: e.index,
                        });
                    } else {
                        // Missing while it must exist: no late write explains an absence.
                        verdict.ryw_violations += 1;
                        verdict.note("ryw", what);
                    }
                }
            }
            (Op::Invoke { key, own: true }, Seen::Receipt { id, pending, token }) => {
                give(receipts, verdict, id, *pending, e);
                if let Some(truth) = own(rows, key, e.session) {
                    if !truth.allows(token) {
                        verdict.invoke_stale += 1;
                        verdict.note(
                            "invoke_stale",
                            format!("{}: {key} ran {}", describe(e), show(token)),
                        );
                    }
                }
            }
            (Op::Invoke { .. }, Seen::Receipt { id, pending, .. }) => {
                give(receipts, verdict, id, *pending, e);
            }
            (Op::Confirm { id }, Seen::Confirm { confirmed, .. }) => {
                let Some(given) = receipts.get(id) else {
                    continue;
                };
                let promised =
                    !given.pending || (given.node == e.node && given.incarnation == e.incarnation);
                if !confirmed && promised {
                    verdict.ryw_violations += 1;
                    verdict.note(
                        "ryw",
                        format!(
                            "{}: receipt {id} (given {} by node {}) not confirmed",
                            describe(e),
                            if given.pending {
                                "pending"
                            } else {
                                "committed"
                            },
                            given.node
                        ),
                    );
                }
            }
            _ => {}
        }
    }
    // Own-row invocations that found no row at all.
    for e in events {
        if let (Op::Invoke { key, own: true }, Outcome::Failed { error, .. }) = (&e.op, &e.outcome)
        {
            if (error.starts_with("http_404") || error.starts_with("grpc_NotFound"))
                && own(rows, key, e.session).and_then(Truth::must_exist) == Some(true)
            {
                verdict.invoke_stale += 1;
                verdict.note("invoke_stale", format!("{}: {key} not found", describe(e)));
            }
        }
    }
}

/// What `session` knows of `key`, if it is one of its rows.
fn own<'a>(rows: &'a BTreeMap<String, Truth>, key: &str, session: u32) -> Option<&'a Truth> {
    rows.get(key).filter(|t| t.owner == session)
}

fn give(
    receipts: &mut BTreeMap<String, Given>,
    verdict: &mut Verdict,
    id: &str,
    pending: bool,
    e: &Event,
) {
    verdict.receipts_given += 1;
    if pending {
        verdict.pending_receipts_given += 1;
    }
    receipts.insert(
        id.to_owned(),
        Given {
            pending,
            node: e.node,
            incarnation: e.incarnation,
        },
    );
}

/// The end state must cover the run: at least one node, every node the history talked to
/// present and reachable, and settled.
fn final_nodes(history: &[Event], end: &FinalState, verdict: &mut Verdict) {
    verdict.nodes_checked = end.nodes.iter().filter(|n| n.reachable).count();
    verdict.settled = end.settled;
    if end.nodes.is_empty() {
        verdict.note("final_state", "no node in the final state".into());
    }
    let asked: BTreeSet<u64> = history.iter().map(|e| e.node).collect();
    let present: BTreeSet<u64> = end.nodes.iter().map(|n| n.id).collect();
    let unreachable = end.nodes.iter().filter(|n| !n.reachable).map(|n| n.id);
    let absent = asked.difference(&present).copied();
    verdict.unreachable_nodes = unreachable.chain(absent).collect();
    if !verdict.unreachable_nodes.is_empty() {
        let nodes = verdict.unreachable_nodes.clone();
        verdict.note(
            "final_state",
            format!("nodes {nodes:?} did not answer at the end: their state is unchecked"),
        );
    }
    if !end.settled {
        verdict.note(
            "final_state",
            format!(
                "not settled: outboxes or digests did not converge ({} receipts left in outboxes)",
                end.outbox_left
            ),
        );
    }
}

/// Asks that found a deleted row: late if the final rows prove it, else violations.
fn doubts(doubts: &[Doubt], end: &FinalState, verdict: &mut Verdict) {
    for doubt in doubts {
        if doubt.proven_late(end) {
            verdict.late_writes += 1;
            verdict.note("late_write", doubt.what.clone());
        } else {
            verdict.ryw_violations += 1;
            verdict.note("ryw", doubt.what.clone());
        }
    }
}

/// Counts the written values seen at more than one version, in any answer or on any node
/// at the end ([`Verdict::duplicate_applies`]).
fn duplicate_applies(history: &[Event], end: &FinalState, verdict: &mut Verdict) {
    let mut versions: BTreeMap<(&str, &str), BTreeSet<u64>> = BTreeMap::new();
    for e in history {
        let (
            Some(key),
            Outcome::Ok(Seen::Row {
                token: Some(token),
                version: Some(v),
            }),
        ) = (e.op.read_key(), &e.outcome)
        else {
            continue;
        };
        versions.entry((key, token)).or_default().insert(*v);
    }
    for node in end.nodes.iter().filter(|n| n.reachable) {
        for (key, stored) in &node.rows {
            versions
                .entry((key, &stored.token))
                .or_default()
                .insert(stored.version);
        }
    }
    for ((key, token), seen) in versions {
        if seen.len() > 1 {
            verdict.duplicate_applies += 1;
            verdict.note(
                "duplicate_apply",
                format!("{key}: {token} seen at versions {seen:?}"),
            );
        }
    }
}

fn final_rows(rows: &BTreeMap<String, Truth>, end: &FinalState, verdict: &mut Verdict) {
    let reachable = || end.nodes.iter().filter(|n| n.reachable);
    for (key, truth) in rows {
        let mut late = false;
        let wrong: Vec<String> = reachable()
            .filter_map(|node| {
                let stored = node.rows.get(key);
                let value = stored.map(|s| s.token.clone());
                match truth.judge(&value, stored.map(|s| s.version)) {
                    Judged::Allowed => None,
                    Judged::Late => {
                        late = true;
                        None
                    }
                    Judged::Wrong => Some(format!(
                        "node {} has {} (version {:?})",
                        node.id,
                        show(&value),
                        stored.map(|s| s.version)
                    )),
                }
            })
            .collect();
        if late {
            verdict.late_writes += 1;
            verdict.note(
                "late_write",
                format!("{key}: an ambiguous write landed after the last acknowledged one"),
            );
        }
        if wrong.is_empty() {
            continue;
        }
        if truth.acked {
            verdict.lost_writes += 1;
            verdict.note(
                "lost_write",
                format!(
                    "{key}: allowed {:?}; {}",
                    truth.allowed.iter().map(show).collect::<Vec<_>>(),
                    wrong.join(", ")
                ),
            );
        } else {
            // Only ambiguous writes, yet a value none of them carried.
            verdict.phantom_rows += 1;
            verdict.note("phantom_row", format!("{key}: {}", wrong.join(", ")));
        }
    }
    // The harness wrote the shared rows before the workload, each acknowledged.
    let shared: BTreeSet<String> = (0..SHARED_ROWS).map(shared_row).collect();
    for key in &shared {
        let missing: Vec<u64> = reachable()
            .filter(|n| !n.rows.contains_key(key))
            .map(|n| n.id)
            .collect();
        if !missing.is_empty() {
            verdict.lost_writes += 1;
            verdict.note(
                "lost_write",
                format!("{key} (written before the workload) missing on nodes {missing:?}"),
            );
        }
    }
    // Keys nobody wrote.
    let mut unexplained: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for node in reachable() {
        for key in node.rows.keys() {
            if !rows.contains_key(key) && !shared.contains(key) {
                unexplained.entry(key).or_default().push(node.id);
            }
        }
    }
    for (key, nodes) in unexplained {
        verdict.phantom_rows += 1;
        verdict.note(
            "phantom_row",
            format!("{key} on nodes {nodes:?}: no session wrote it"),
        );
    }
}

fn final_receipts(receipts: &BTreeMap<String, Given>, end: &FinalState, verdict: &mut Verdict) {
    for (id, given) in receipts {
        let missing: Vec<u64> = end
            .nodes
            .iter()
            .filter(|n| n.reachable && !n.confirmed.contains(id))
            .map(|n| n.id)
            .collect();
        if !missing.is_empty() {
            verdict.lost_receipts += 1;
            verdict.note(
                "lost_receipt",
                format!(
                    "{id} (given {} by node {}) not confirmed on nodes {missing:?}",
                    if given.pending {
                        "pending"
                    } else {
                        "committed"
                    },
                    given.node
                ),
            );
        }
    }
}

fn divergence(end: &FinalState, verdict: &mut Verdict) {
    let reason = if end.nodes.iter().any(|n| n.digest.is_none()) {
        let silent: Vec<u64> = end
            .nodes
            .iter()
            .filter(|n| n.digest.is_none())
            .map(|n| n.id)
            .collect();
        Some(format!("no digest from nodes {silent:?}"))
    } else {
        let digests: BTreeSet<_> = end
            .nodes
            .iter()
            .filter_map(|n| n.digest.as_ref())
            .map(|d| {
                (
                    d.index,
                    d.rows_sha256.clone(),
                    d.receipts_sha256.clone(),
                    d.log_root.clone(),
                )
            })
            .collect();
        let indexes: BTreeSet<u64> = digests.iter().map(|d| d.0).collect();
        if digests.len() <= 1 {
            None
        } else if indexes.len() > 1 {
            Some(format!(
                "the nodes never reached the same applied index: {:?}",
                end.nodes
                    .iter()
                    .map(|n| (n.id, n.digest.as_ref().map(|d| d.index)))
                    .collect::<Vec<_>>()
            ))
        } else {
            Some(format!(
                "different digests at index {:?}: {:?}",
                indexes,
                end.nodes
                    .iter()
                    .filter_map(|n| n.digest.as_ref().map(|d| (
                        n.id,
                        &d.rows_sha256[..12.min(d.rows_sha256.len())],
                        &d.receipts_sha256[..12.min(d.receipts_sha256.len())],
                        &d.log_root[..12.min(d.log_root.len())]
                    )))
                    .collect::<Vec<_>>()
            ))
        }
    };
    if let Some(reason) = reason {
        verdict.diverged = true;
        verdict.note("diverged", reason.clone());
        verdict.divergence = Some(reason);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Digest, FinalNode, Stored};

    /// A small history builder: each call appends an event of session `s` on `node`.
    #[derive(Default)]
    struct H {
        events: Vec<Event>,
        clock: u64,
        /// The version each acknowledged write's value got (its index), for reads of it.
        versions: BTreeMap<String, u64>,
    }

    impl H {
        fn push(&mut self, s: u32, node: u64, op: Op, index: u64, outcome: Outcome) -> &mut Event {
            self.clock += 1000;
            if let (Some((_, Some(token))), Outcome::Ok(_)) = (op.written(), &outcome) {
                self.versions.insert(token.to_owned(), index);
            }
            self.events.push(Event {
                session: s,
                node,
                incarnation: 0,
                op,
                start_us: self.clock,
                latency_us: 500,
                attempt: 0,
                operation: None,
                min_index: 0,
                index: Some(index),
                stale: false,
                outcome,
            });
            self.events.last_mut().unwrap()
        }
        fn insert(&mut self, s: u32, node: u64, key: &str, token: &str, index: u64) {
            let op = Op::Insert {
                key: key.into(),
                token: token.into(),
            };
            self.push(s, node, op, index, Outcome::Ok(Seen::Written));
        }
        fn read(
            &mut self,
            s: u32,
            node: u64,
            key: &str,
            token: Option<&str>,
            index: u64,
        ) -> &mut Event {
            // The version its write got; a value no acknowledged write gave, at this index.
            let version = token.and_then(|t| self.versions.get(t).copied());
            let seen = Seen::Row {
                token: token.map(Into::into),
                version: Some(version.unwrap_or(index)),
            };
            self.push(
                s,
                node,
                Op::Read { key: key.into() },
                index,
                Outcome::Ok(seen),
            )
        }
        fn invoke(&mut self, s: u32, node: u64, id: &str, pending: bool, index: u64) {
            let op = Op::Invoke {
                key: "CHAOS_SHARED_0".into(),
                own: false,
            };
            let seen = Seen::Receipt {
                id: id.into(),
                pending,
                token: None,
            };
            self.push(s, node, op, index, Outcome::Ok(seen));
        }
    }

    fn stored(token: &str, version: u64) -> Stored {
        Stored {
            token: token.into(),
            version,
        }
    }

    fn digest(index: u64, rows: &str) -> Option<Digest> {
        Some(Digest {
            index,
            rows: 1,
            rows_sha256: rows.into(),
            receipts: 1,
            receipts_sha256: "r".into(),
            log_leaves: 1,
            log_root: "t".into(),
        })
    }

    /// The version [`clean`]'s writes gave each of its values (a later one for others).
    fn version_in_clean(token: &str) -> u64 {
        match token {
            "s1w1" => 5,
            "s2w1" => 7,
            "s2w2" => 8,
            _ => 100,
        }
    }

    /// Three nodes that all hold `rows` (and the harness's shared rows) and confirm
    /// `receipts`, with equal digests.
    fn converged(rows: &[(&str, &str)], receipts: &[&str]) -> FinalState {
        let shared = (0..SHARED_ROWS).map(|i| (shared_row(i), stored("shared", 1)));
        FinalState {
            nodes: (1..=3)
                .map(|id| FinalNode {
                    id,
                    reachable: true,
                    rows: rows
                        .iter()
                        .map(|(k, v)| (k.to_string(), stored(v, version_in_clean(v))))
                        .chain(shared.clone())
                        .collect(),
                    confirmed: receipts.iter().map(|r| r.to_string()).collect(),
                    digest: digest(20, "same"),
                })
                .collect(),
            settled: true,
            outbox_left: 0,
        }
    }

    fn clean() -> H {
        let mut h = H::default();
        h.insert(1, 1, "CH01_00001", "s1w1", 5);
        h.read(1, 1, "CH01_00001", Some("s1w1"), 5);
        h.invoke(1, 1, "inv_aaaaaaaaaa", false, 6);
        h.insert(2, 2, "CH02_00001", "s2w1", 7);
        h.push(
            2,
            2,
            Op::Update {
                key: "CH02_00001".into(),
                token: "s2w2".into(),
            },
            8,
            Outcome::Ok(Seen::Written),
        );
        // Session 2 moves to node 3 carrying its index: sees its update.
        h.read(2, 3, "CH02_00001", Some("s2w2"), 9).min_index = 8;
        h.push(
            1,
            2,
            Op::Confirm {
                id: "inv_aaaaaaaaaa".into(),
            },
            9,
            Outcome::Ok(Seen::Confirm {
                confirmed: true,
                pending: false,
            }),
        );
        h
    }

    #[test]
    fn a_clean_history_passes() {
        let h = clean();
        let end = converged(
            &[("CH01_00001", "s1w1"), ("CH02_00001", "s2w2")],
            &["inv_aaaaaaaaaa"],
        );
        let verdict = check(&h.events, &end);
        assert!(verdict.passed(), "{verdict:#?}");
        assert_eq!(verdict.acknowledged_writes, 3);
        assert_eq!(verdict.receipts_given, 1);
    }

    #[test]
    fn an_acknowledged_write_missing_on_one_node_is_a_lost_write() {
        let h = clean();
        let mut end = converged(
            &[("CH01_00001", "s1w1"), ("CH02_00001", "s2w2")],
            &["inv_aaaaaaaaaa"],
        );
        // Node 3 still has the value before the acknowledged update.
        end.nodes[2]
            .rows
            .insert("CH02_00001".into(), stored("s2w1", 7));
        let verdict = check(&h.events, &end);
        assert_eq!(verdict.lost_writes, 1, "{verdict:#?}");
        assert!(!verdict.passed());
        // And an acknowledged delete that came back is lost too.
        let mut h = clean();
        h.push(
            1,
            1,
            Op::Delete {
                key: "CH01_00001".into(),
            },
            10,
            Outcome::Ok(Seen::Written),
        );
        let end = converged(
            &[("CH01_00001", "s1w1"), ("CH02_00001", "s2w2")],
            &["inv_aaaaaaaaaa"],
        );
        assert_eq!(check(&h.events, &end).lost_writes, 1);
    }

    #[test]
    fn an_ambiguous_write_may_land_or_not_but_a_refused_one_may_not() {
        let mut h = clean();
        h.push(
            1,
            1,
            Op::Update {
                key: "CH01_00001".into(),
                token: "s1w2".into(),
            },
            10,
            Outcome::Failed {
                error: "timeout".into(),
                ambiguous: true,
            },
        );
        for value in ["s1w1", "s1w2"] {
            let end = converged(
                &[("CH01_00001", value), ("CH02_00001", "s2w2")],
                &["inv_aaaaaaaaaa"],
            );
            assert!(check(&h.events, &end).passed(), "{value}");
        }
        let mut h = clean();
        h.push(
            1,
            1,
            Op::Update {
                key: "CH01_00001".into(),
                token: "s1w2".into(),
            },
            10,
            Outcome::Failed {
                error: "http_422:rule".into(),
                ambiguous: false,
            },
        );
        let end = converged(
            &[("CH01_00001", "s1w2"), ("CH02_00001", "s2w2")],
            &["inv_aaaaaaaaaa"],
        );
        assert_eq!(check(&h.events, &end).lost_writes, 1);
    }

    #[test]
    fn an_ambiguous_write_landing_after_a_later_acknowledged_one_is_late_not_lost() {
        // s1w2 times out, is retried and acknowledged at 10, then the row is deleted at 11.
        let mut h = clean();
        let update = Op::Update {
            key: "CH01_00001".into(),
            token: "s1w2".into(),
        };
        let timeout = Outcome::Failed {
            error: "timeout".into(),
            ambiguous: true,
        };
        h.push(1, 1, update.clone(), 9, timeout).index = None;
        h.push(1, 2, update, 10, Outcome::Ok(Seen::Written)).attempt = 1;
        let delete = Op::Delete {
            key: "CH01_00001".into(),
        };
        h.push(1, 2, delete, 11, Outcome::Ok(Seen::Written));
        // The first attempt was still in flight and landed at 12: the row is back.
        let mut end = converged(&[("CH02_00001", "s2w2")], &["inv_aaaaaaaaaa"]);
        for node in &mut end.nodes {
            node.rows.insert("CH01_00001".into(), stored("s1w2", 12));
        }
        let verdict = check(&h.events, &end);
        assert_eq!(
            (verdict.late_writes, verdict.lost_writes),
            (1, 0),
            "{verdict:#?}"
        );
        // This checker calls it late (reported, not gated). The outside checker holds an
        // operation's retries to one effect, as they share one idempotency key: the
        // acknowledged update took effect before its answer, so the row coming back after
        // the acknowledged delete is not linearizable, and the run fails there.
        assert_eq!(verdict.linearizability.violating_keys, 1);
        assert!(!verdict.passed());
        assert_eq!(verdict.failures().len(), 1, "{:?}", verdict.failures());
        // The same value at version 10 means the acknowledged delete never applied: lost.
        for node in &mut end.nodes {
            node.rows.insert("CH01_00001".into(), stored("s1w2", 10));
        }
        assert_eq!(check(&h.events, &end).lost_writes, 1);
    }

    #[test]
    fn a_stale_read_after_a_write_is_a_ryw_violation() {
        let mut h = clean();
        // Session 1 writes on node 1, moves to node 2 and reads the old row there.
        h.push(
            1,
            1,
            Op::Update {
                key: "CH01_00001".into(),
                token: "s1w2".into(),
            },
            12,
            Outcome::Ok(Seen::Written),
        );
        h.read(1, 2, "CH01_00001", Some("s1w1"), 12).min_index = 12;
        let end = converged(
            &[("CH01_00001", "s1w2"), ("CH02_00001", "s2w2")],
            &["inv_aaaaaaaaaa"],
        );
        let verdict = check(&h.events, &end);
        assert_eq!(verdict.ryw_violations, 1, "{verdict:#?}");
        assert_eq!(verdict.lost_writes, 0);
        assert!(!verdict.passed());

        // A read of a row the session inserted that answers 404 is one too.
        let mut h = clean();
        h.insert(3, 1, "CH03_00001", "s3w1", 12);
        h.read(3, 1, "CH03_00001", None, 12);
        assert_eq!(check(&h.events, &end).ryw_violations, 1);

        // So is an ask that does not find the row just inserted.
        let mut h = clean();
        h.insert(3, 1, "CH03_00001", "s3w1", 12);
        h.push(
            3,
            1,
            Op::Ask {
                word: "qzvkmert".into(),
                key: Some("CH03_00001".into()),
            },
            12,
            Outcome::Ok(Seen::Ask { keys: vec![] }),
        );
        let end = converged(
            &[
                ("CH01_00001", "s1w1"),
                ("CH02_00001", "s2w2"),
                ("CH03_00001", "s3w1"),
            ],
            &["inv_aaaaaaaaaa"],
        );
        assert_eq!(check(&h.events, &end).ryw_violations, 1);
    }

    #[test]
    fn another_sessions_stale_read_is_not_a_violation() {
        let mut h = clean();
        // Session 5 never wrote CH01_00001: it may see any committed state.
        h.read(5, 3, "CH01_00001", None, 3);
        let end = converged(
            &[("CH01_00001", "s1w1"), ("CH02_00001", "s2w2")],
            &["inv_aaaaaaaaaa"],
        );
        assert!(check(&h.events, &end).passed());
    }

    #[test]
    fn an_index_going_backwards_on_one_node_is_caught() {
        let mut h = clean();
        // Session 1 saw index 9 from node 2 (the confirm); node 2 now answers at 4.
        h.read(1, 2, "CH01_00001", Some("s1w1"), 4);
        let end = converged(
            &[("CH01_00001", "s1w1"), ("CH02_00001", "s2w2")],
            &["inv_aaaaaaaaaa"],
        );
        let verdict = check(&h.events, &end);
        assert_eq!(verdict.index_regressions, 1, "{verdict:#?}");
        // Applied state only grows and a write answers once applied (§3.1): a regression
        // fails the run.
        assert!(!verdict.passed());

        // After a wipe (new incarnation) the node starts over: not a regression.
        let mut h = clean();
        h.read(1, 2, "CH01_00001", Some("s1w1"), 4).incarnation = 1;
        assert_eq!(check(&h.events, &end).index_regressions, 0);

        // A read answered below the min_index it sent broke the barrier.
        let mut h = clean();
        h.read(1, 3, "CH01_00001", Some("s1w1"), 7).min_index = 9;
        let verdict = check(&h.events, &end);
        assert_eq!(verdict.barrier_violations, 1, "{verdict:#?}");
        assert!(!verdict.passed());
    }

    #[test]
    fn a_diverged_node_is_caught() {
        let h = clean();
        let mut end = converged(
            &[("CH01_00001", "s1w1"), ("CH02_00001", "s2w2")],
            &["inv_aaaaaaaaaa"],
        );
        end.nodes[1].digest = digest(20, "other");
        let verdict = check(&h.events, &end);
        assert!(verdict.diverged, "{verdict:#?}");
        assert!(!verdict.passed());

        // Never reaching the same index counts as diverged too.
        end.nodes[1].digest = digest(19, "same");
        assert!(check(&h.events, &end).diverged);

        // So do two receipt-log trees, whatever else agrees.
        let mut other_tree = digest(20, "same").unwrap();
        other_tree.log_root = "another root".into();
        end.nodes[1].digest = Some(other_tree);
        assert!(check(&h.events, &end).diverged);
    }

    #[test]
    fn receipts_must_confirm_everywhere_and_pending_ones_where_they_ran() {
        let mut h = clean();
        h.invoke(1, 2, "inv_bbbbbbbbbb", true, 9);
        // Pending on node 2: another node may not know it yet; node 2 must.
        h.push(
            1,
            3,
            Op::Confirm {
                id: "inv_bbbbbbbbbb".into(),
            },
            9,
            Outcome::Ok(Seen::Confirm {
                confirmed: false,
                pending: false,
            }),
        );
        let end = converged(
            &[("CH01_00001", "s1w1"), ("CH02_00001", "s2w2")],
            &["inv_aaaaaaaaaa", "inv_bbbbbbbbbb"],
        );
        assert!(check(&h.events, &end).passed());
        h.push(
            1,
            2,
            Op::Confirm {
                id: "inv_bbbbbbbbbb".into(),
            },
            9,
            Outcome::Ok(Seen::Confirm {
                confirmed: false,
                pending: false,
            }),
        );
        assert_eq!(check(&h.events, &end).ryw_violations, 1);

        // A receipt that never left the outbox of node 2 is lost on nodes 1 and 3.
        let mut end = end;
        end.nodes[0].confirmed.remove("inv_bbbbbbbbbb");
        end.nodes[2].confirmed.remove("inv_bbbbbbbbbb");
        let verdict = check(&h.events, &end);
        assert_eq!(verdict.lost_receipts, 1, "{verdict:#?}");
    }

    /// The clean history's end state.
    fn clean_end() -> FinalState {
        converged(
            &[("CH01_00001", "s1w1"), ("CH02_00001", "s2w2")],
            &["inv_aaaaaaaaaa"],
        )
    }

    fn timeout() -> Outcome {
        Outcome::Failed {
            error: "timeout".into(),
            ambiguous: true,
        }
    }

    fn delete(key: &str) -> Op {
        Op::Delete { key: key.into() }
    }

    fn update(key: &str, token: &str) -> Op {
        Op::Update {
            key: key.into(),
            token: token.into(),
        }
    }

    fn ask(key: &str) -> Op {
        Op::Ask {
            word: "qzvkmert".into(),
            key: Some(key.into()),
        }
    }

    fn asked(keys: &[&str]) -> Outcome {
        Outcome::Ok(Seen::Ask {
            keys: keys.iter().map(|k| k.to_string()).collect(),
        })
    }

    #[test]
    fn an_acknowledged_row_absent_on_one_node_fails() {
        let mut end = clean_end();
        end.nodes[1].rows.remove("CH02_00001");
        let verdict = check(&clean().events, &end);
        assert_eq!(verdict.lost_writes, 1, "{verdict:#?}");
        assert!(!verdict.passed());
        // A shared row the harness wrote before the workload counts too.
        let mut end = clean_end();
        end.nodes[2].rows.remove(&shared_row(0));
        let verdict = check(&clean().events, &end);
        assert_eq!(verdict.lost_writes, 1, "{verdict:#?}");
        assert!(!verdict.passed());
    }

    #[test]
    fn an_unreachable_or_absent_node_at_the_end_fails() {
        // Unreachable: it answered nothing, so it vouches for nothing (its empty rows are
        // not counted as losses on top).
        let mut end = clean_end();
        end.nodes[2].reachable = false;
        end.nodes[2].rows.clear();
        end.nodes[2].confirmed.clear();
        let verdict = check(&clean().events, &end);
        assert_eq!(verdict.unreachable_nodes, [3], "{verdict:#?}");
        assert_eq!((verdict.lost_writes, verdict.lost_receipts), (0, 0));
        assert!(!verdict.passed());
        // Absent: the history talked to node 3, the end state has no word from it.
        let mut end = clean_end();
        end.nodes.pop();
        let verdict = check(&clean().events, &end);
        assert_eq!(verdict.unreachable_nodes, [3], "{verdict:#?}");
        assert!(!verdict.passed());
    }

    #[test]
    fn an_empty_node_list_or_an_unsettled_end_fails() {
        let end = FinalState {
            nodes: Vec::new(),
            settled: true,
            outbox_left: 0,
        };
        let verdict = check(&clean().events, &end);
        assert_eq!(verdict.nodes_checked, 0, "{verdict:#?}");
        assert!(!verdict.passed());
        // Not even a history: still nothing checked.
        assert!(!check(&[], &end).passed());

        let mut end = clean_end();
        end.settled = false;
        end.outbox_left = 2;
        assert!(!check(&clean().events, &end).passed());
    }

    /// One write applied twice: its value is seen at two versions, in answers or at the end.
    #[test]
    fn a_value_seen_at_two_versions_is_a_write_applied_twice() {
        assert_eq!(check(&clean().events, &clean_end()).duplicate_applies, 0);
        // Read at its own version, then at a later one: a retry applied it again.
        let mut h = clean();
        h.push(
            1,
            3,
            Op::Read {
                key: "CH01_00001".into(),
            },
            12,
            Outcome::Ok(Seen::Row {
                token: Some("s1w1".into()),
                version: Some(11),
            }),
        );
        let verdict = check(&h.events, &clean_end());
        assert_eq!(verdict.duplicate_applies, 1, "{verdict:#?}");
        assert!(!verdict.passed());
        // Or only the end shows it: every node holds the value at a version no answer gave.
        let mut end = clean_end();
        for node in &mut end.nodes {
            node.rows.insert("CH01_00001".into(), stored("s1w1", 11));
        }
        let verdict = check(&clean().events, &end);
        assert_eq!(verdict.duplicate_applies, 1, "{verdict:#?}");
        assert!(verdict
            .failures()
            .iter()
            .any(|f| f.contains("applied twice")));
    }

    #[test]
    fn a_phantom_row_nobody_wrote_fails() {
        let mut end = clean_end();
        for node in &mut end.nodes {
            node.rows.insert("CH07_00003".into(), stored("s7w9", 30));
        }
        let verdict = check(&clean().events, &end);
        assert_eq!(verdict.phantom_rows, 1, "{verdict:#?}");
        assert!(!verdict.passed());
        // A row with only an ambiguous write holding a value that write did not carry.
        let mut h = clean();
        h.push(
            3,
            1,
            Op::Insert {
                key: "CH03_00001".into(),
                token: "s3w1".into(),
            },
            12,
            timeout(),
        );
        let mut end = clean_end();
        end.nodes[0]
            .rows
            .insert("CH03_00001".into(), stored("s3w5", 13));
        let verdict = check(&h.events, &end);
        assert_eq!(verdict.phantom_rows, 1, "{verdict:#?}");
        assert!(!verdict.passed());
    }

    /// An uncertain delete, then an acknowledged update: the row must exist. (The workload
    /// never does this, see the module comment; the checker must not rely on it to excuse
    /// a missing row.)
    fn uncertain_delete_then_acknowledged_update() -> H {
        let mut h = clean();
        h.push(1, 1, delete("CH01_00001"), 10, timeout()).index = None;
        h.push(
            1,
            2,
            update("CH01_00001", "s1w2"),
            11,
            Outcome::Ok(Seen::Written),
        );
        h
    }

    #[test]
    fn a_missing_row_is_not_excused_by_an_earlier_uncertain_delete() {
        // At the end: gone on every node. A delete has no version, so nothing proves it
        // landed late: the acknowledged update is lost.
        let h = uncertain_delete_then_acknowledged_update();
        let mut end = clean_end();
        for node in &mut end.nodes {
            node.rows.remove("CH01_00001");
        }
        let verdict = check(&h.events, &end);
        assert_eq!(
            (verdict.lost_writes, verdict.late_writes),
            (1, 0),
            "{verdict:#?}"
        );
        assert!(!verdict.passed());

        // A read that shows it missing is a violation, not late.
        let mut h = uncertain_delete_then_acknowledged_update();
        h.read(1, 2, "CH01_00001", None, 11);
        let mut end = clean_end();
        for node in &mut end.nodes {
            node.rows.insert("CH01_00001".into(), stored("s1w2", 11));
        }
        let verdict = check(&h.events, &end);
        assert_eq!(
            (verdict.ryw_violations, verdict.late_writes),
            (1, 0),
            "{verdict:#?}"
        );
        assert!(!verdict.passed());

        // So is an ask that does not find it.
        let mut h = uncertain_delete_then_acknowledged_update();
        h.push(1, 2, ask("CH01_00001"), 11, asked(&[]));
        let verdict = check(&h.events, &end);
        assert_eq!(
            (verdict.ryw_violations, verdict.late_writes),
            (1, 0),
            "{verdict:#?}"
        );
    }

    #[test]
    fn an_acknowledged_write_without_an_index_is_a_history_error() {
        // s1w2 times out; s1w3 is acknowledged but its answer carries no index. An old s1w2
        // at the end must not pass as "late" against an index of 0.
        let mut h = clean();
        h.push(1, 1, update("CH01_00001", "s1w2"), 10, timeout())
            .index = None;
        h.push(
            1,
            2,
            update("CH01_00001", "s1w3"),
            11,
            Outcome::Ok(Seen::Written),
        )
        .index = None;
        let mut end = clean_end();
        for node in &mut end.nodes {
            node.rows.insert("CH01_00001".into(), stored("s1w2", 10));
        }
        let verdict = check(&h.events, &end);
        assert_eq!(verdict.history_errors, 1, "{verdict:#?}");
        assert_eq!((verdict.lost_writes, verdict.late_writes), (1, 0));
        assert!(!verdict.passed());
        // With s1w3 at the end, only the history error remains, and it still fails.
        let mut end = clean_end();
        for node in &mut end.nodes {
            node.rows.insert("CH01_00001".into(), stored("s1w3", 11));
        }
        let verdict = check(&h.events, &end);
        assert_eq!((verdict.history_errors, verdict.lost_writes), (1, 0));
        assert!(!verdict.passed());
    }

    #[test]
    fn an_ask_finding_a_deleted_row_is_late_only_when_the_final_rows_prove_it() {
        // s1w2 times out, is retried and acknowledged at 10, the row is deleted at 11; an
        // ask answered at index 13 still finds the row.
        let mut h = clean();
        h.push(1, 1, update("CH01_00001", "s1w2"), 9, timeout())
            .index = None;
        h.push(
            1,
            2,
            update("CH01_00001", "s1w2"),
            10,
            Outcome::Ok(Seen::Written),
        );
        h.push(1, 2, delete("CH01_00001"), 11, Outcome::Ok(Seen::Written));
        h.push(1, 2, ask("CH01_00001"), 13, asked(&["CH01_00001"]));
        // Proven: the first attempt landed at 12 (after the delete, before the ask).
        let mut end = clean_end();
        for node in &mut end.nodes {
            node.rows.insert("CH01_00001".into(), stored("s1w2", 12));
        }
        let verdict = check(&h.events, &end);
        assert_eq!(
            (verdict.late_writes, verdict.ryw_violations),
            (2, 0),
            "{verdict:#?}"
        );
        assert!(verdict.passed(), "{verdict:#?}");
        // Landed at 14, after the ask's index: it cannot explain what the ask saw.
        for node in &mut end.nodes {
            node.rows.insert("CH01_00001".into(), stored("s1w2", 14));
        }
        let verdict = check(&h.events, &end);
        assert_eq!(verdict.ryw_violations, 1, "{verdict:#?}");
        assert!(!verdict.passed());
        // Gone at the end: nothing proves a late write, the ask saw a deleted row.
        for node in &mut end.nodes {
            node.rows.remove("CH01_00001");
        }
        let verdict = check(&h.events, &end);
        assert_eq!(
            (verdict.ryw_violations, verdict.late_writes),
            (1, 0),
            "{verdict:#?}"
        );
        assert!(!verdict.passed());
    }
}
