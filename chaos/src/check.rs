//! The checker: judges a recorded history and the nodes' final state against DESIGN §3.1–3.2.
//!
//! Definitions (each session is sequential, so its events are totally ordered):
//!
//! - **Allowed values of a row.** A session alone writes its rows. After an acknowledged
//!   write the only allowed value is what it wrote (`None` after a delete). A write that
//!   failed ambiguously (timeout, 5xx: it may still commit) adds its value to the allowed
//!   set; a refused write (4xx) changes nothing. Before the first write a row is absent.
//! - **Lost write.** A row with an acknowledged write whose final value, on some node, is
//!   not allowed. Counted once per row.
//! - **Read-your-writes violation.** A successful read (directory read, contract, ask) by
//!   the owning session of a row it wrote that shows a value not allowed at that moment;
//!   for asks, the row missing while it must exist or present while it must be gone. A
//!   confirm of a receipt the session was given that answers `confirmed: false`, unless the
//!   receipt was pending (outbox) and the confirm went to another node, or to its node
//!   after a wipe (a pending receipt is promised only where it ran, until healing).
//! - **Index going backwards.** For one session and one node incarnation (a wipe starts a
//!   new one; a restart does not, since applied state is durable), the `x-rowcall-index` of
//!   successive successful answers never decreases. Separately, a read that sent
//!   `x-rowcall-min-index: N` and succeeded must carry an index ≥ N (the barrier held).
//! - **Lost receipt.** A receipt id a client was given (committed or pending) that some
//!   node does not confirm at the end.
//! - **Diverged.** The nodes' digests (directory and receipt log) differ, or they never
//!   reached the same applied index.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use crate::history::{Event, FinalState, Op, Outcome, Seen};

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
    /// Rows (at the end) and reads showing a write that failed ambiguously and took effect
    /// after a later acknowledged write of the same session (allowed by linearizability:
    /// the timed-out request was still in flight). Reported, not gated.
    pub late_writes: usize,
    /// Invocations of a session's own row that ran an older version or found no row (not a
    /// promise of §3.1, which covers reads; reported so it can be seen).
    pub invoke_stale: usize,
    /// Examples of each problem found.
    pub examples: BTreeMap<String, Vec<String>>,
}

impl Verdict {
    /// No lost write or receipt, no RYW violation (a broken `min_index` barrier is one),
    /// no divergence. Index regressions are reported beside, not gated on: the one seen so
    /// far comes from a write answer's index that its node had not applied yet, which the
    /// RYW check catches when a read shows it.
    pub fn passed(&self) -> bool {
        self.lost_writes == 0
            && self.lost_receipts == 0
            && self.ryw_violations == 0
            && self.barrier_violations == 0
            && !self.diverged
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
    /// Left by a write that failed ambiguously and took effect after a later acknowledged
    /// write (its row version says so): a timed-out request still in flight, which
    /// linearizability allows. Reported, not a loss.
    Late,
    /// Neither.
    Wrong,
}

/// What a session knows about one of its rows.
#[derive(Debug, Default)]
struct Truth {
    /// Values the row may have now.
    allowed: Vec<Option<String>>,
    /// Whether some write of it was acknowledged.
    acked: bool,
    /// The session that writes it (read-your-writes is that session's promise).
    owner: u32,
    /// The index of the last acknowledged write.
    acked_index: u64,
    /// Every value an ambiguous write of it carried (it may still land, even late).
    pending: Vec<Option<String>>,
}

impl Truth {
    fn new(owner: u32) -> Self {
        Self {
            allowed: vec![None],
            acked: false,
            owner,
            acked_index: 0,
            pending: Vec::new(),
        }
    }

    /// Judges `value` (with the row's `version`, when it exists).
    fn judge(&self, value: &Option<String>, version: Option<u64>) -> Judged {
        if self.allows(value) {
            return Judged::Allowed;
        }
        let late = self.pending.contains(value)
            && match (value, version) {
                (Some(_), Some(version)) => version > self.acked_index,
                // A late delete leaves no version to compare.
                (None, _) => true,
                (Some(_), None) => false,
            };
        if late {
            Judged::Late
        } else {
            Judged::Wrong
        }
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
    let mut rows: BTreeMap<String, Truth> = BTreeMap::new();
    let mut receipts: BTreeMap<String, Given> = BTreeMap::new();
    for events in by_session.values_mut() {
        events.sort_by_key(|e| e.start_us);
        session(events, &mut rows, &mut receipts, &mut verdict);
    }
    final_rows(&rows, end, &mut verdict);
    final_receipts(&receipts, end, &mut verdict);
    divergence(end, &mut verdict);
    verdict
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

fn session(
    events: &[&Event],
    rows: &mut BTreeMap<String, Truth>,
    receipts: &mut BTreeMap<String, Given>,
    verdict: &mut Verdict,
) {
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
                    truth.acked_index = e.index.unwrap_or(0);
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
                    // An ask carries no version: a row a late ambiguous write could explain
                    // (back after its delete, or gone after its insert) is reported as late.
                    let late = if found {
                        truth.pending.iter().any(Option::is_some)
                    } else {
                        truth.pending.contains(&None)
                    };
                    let what = format!(
                        "{}: ask {word:?} {} {key}",
                        describe(e),
                        if found { "still found" } else { "did not find" }
                    );
                    if late {
                        verdict.late_writes += 1;
                        verdict.note("late_write", what);
                    } else {
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
            if error.starts_with("http_404")
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

fn final_rows(rows: &BTreeMap<String, Truth>, end: &FinalState, verdict: &mut Verdict) {
    for (key, truth) in rows {
        let mut late = false;
        let wrong: Vec<String> = end
            .nodes
            .iter()
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
            // Only ambiguous writes, yet a value nobody wrote: divergence, not loss.
            verdict.diverged = true;
            verdict.note("phantom_row", format!("{key}: {}", wrong.join(", ")));
        }
    }
}

fn final_receipts(receipts: &BTreeMap<String, Given>, end: &FinalState, verdict: &mut Verdict) {
    for (id, given) in receipts {
        let missing: Vec<u64> = end
            .nodes
            .iter()
            .filter(|n| !n.confirmed.contains(id))
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
            .map(|d| (d.index, d.rows_sha256.clone(), d.receipts_sha256.clone()))
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
                        &d.receipts_sha256[..12.min(d.receipts_sha256.len())]
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
    }

    impl H {
        fn push(&mut self, s: u32, node: u64, op: Op, index: u64, outcome: Outcome) -> &mut Event {
            self.clock += 1000;
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
            let seen = Seen::Row {
                token: token.map(Into::into),
                version: Some(index),
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
        })
    }

    /// Three nodes that all hold `rows` and confirm `receipts`, with equal digests.
    fn converged(rows: &[(&str, &str)], receipts: &[&str]) -> FinalState {
        FinalState {
            nodes: (1..=3)
                .map(|id| FinalNode {
                    id,
                    reachable: true,
                    rows: rows
                        .iter()
                        .map(|(k, v)| (k.to_string(), stored(v, 100)))
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
        assert!(verdict.passed());
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
}
