//! The outside checker: every row's history, checked for linearizability by code nobody
//! here wrote — the `LinearizabilityTester` of the `consistency_model` crate (stateright's
//! `semantics` tester, published alone) over its `Register` specification. It judges the
//! same recorded history as `check.rs`, independently of it.
//!
//! # The model
//!
//! - **One register per row.** Its value is the row's token (`s3w17`), or `None` when the
//!   row does not exist (the initial value). Insert and update are `Write(Some(token))`,
//!   delete is `Write(None)`. Linearizability is compositional (a history is linearizable
//!   iff every object's sub-history is), so each row is checked on its own, which keeps
//!   every search small.
//! - **Operations, not attempts.** A client's retries of one operation (failover to another
//!   node, a hedge) are one invocation: every attempt of a write carries the same
//!   idempotency key, so the cluster applies it at most once. It is invoked no later than
//!   the first request went out (see [`Op::invoked_us`]) and returns when the answer that
//!   ended it arrived.
//! - **Threads.** Each client session is one thread. An operation whose outcome is unknown
//!   (timeout, lost answer, 5xx, `outcome_unknown`: any attempt failed ambiguously and
//!   none succeeded) never returns: it stays in flight for ever, so the tester may place it
//!   anywhere after its invocation, or nowhere. The session goes on as a fresh thread (a
//!   tester thread has one operation in flight at most), still after it in real time. A
//!   definite failure had no effect and is left out, as are failed reads: a refusal (4xx,
//!   429), or `no_quorum` (503 / `Unavailable`), which the node answers only when nothing
//!   was proposed (`WriteError::Unavailable`; a write that was proposed and not answered
//!   is `outcome_unknown`) — the workload's own bookkeeping counts it ambiguous, to be
//!   safe; this checker holds the node to its word.
//! - **Which reads.** DESIGN §3.1 promises linearizability only to `consistency=linearizable`
//!   reads, and to a session read-your-writes across nodes. So two kinds of reads enter,
//!   and each row has two histories, each checked by the tester (a row fails if either
//!   does):
//!   - *the session view*: the row's writes and the directory reads and contracts of the
//!     session that writes it. Each of these carried the session's highest index as
//!     `x-rowcall-min-index` (the client library always sends it), or went to a node that
//!     had already answered the session at that index (the HTTP sessions' same-node
//!     promise, per node incarnation), so they are linearizable with respect to that
//!     session — stale (`x-rowcall-stale`) answers included. Only with respect to it: such
//!     a read may still miss a write of the session that is in flight and that someone
//!     else has already seen, hence a history of its own.
//!   - *the linearizable view*: the row's writes and the workload's `consistency=
//!     linearizable` reads of it by other sessions (a share of directory reads, see
//!     `workload.rs`), where real-time order across sessions counts.
//!
//!   Other sessions' plain reads (no read-index check, allowed to lag) are left out: they
//!   would make false alarms. Asks are not reads of the register (a ranked candidate list
//!   cut at a score shows no token, and a missing candidate is not a missing row;
//!   `check.rs` judges them), nor are invocations (§3.1 does not promise they run the
//!   newest row). Rows no operation of the history wrote (the harness's shared rows) are
//!   not checked here.
//! - **The end.** After the run healed and settled, every reachable node's copy of the row
//!   is one more read, invoked after everything else returned, all nodes concurrently. So
//!   an acknowledged write that is missing at the end (a lost write) is a violation here
//!   too, as is a read going back to a value after a newer one was seen, which the
//!   harness's own read-your-writes check allows while a write of the row is ambiguous.
//! - **Real time.** All times are microseconds on one monotonic clock of this process.
//!   They are truncated, so a return is moved [`SLACK_US`] later: two operations closer
//!   than that count as concurrent (never a false order).
//! - **Bounded.** The tester's search is exponential in the worst case. A row with more than
//!   [`MAX_OPERATIONS`] operations or [`MAX_IN_FLIGHT`] in flight is not searched, and a
//!   search that takes more than [`SEARCH_BUDGET`] steps (counted by a meter around the
//!   crate's `Register`, which answers "invalid" once it is spent, so the search unwinds) is
//!   given up: the row is reported `unchecked`, and the verdict is then `incomplete`, which
//!   fails the run like a violation (nothing passes silently).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Instant;

use consistency_model::{
    ConsistencyTester, LinearizabilityTester, Register, RegisterOp, RegisterRet, SequentialSpec,
};
use serde::Serialize;

use crate::history::{Event, FinalState, Op as Request, Outcome, Seen};

/// The checker, as the report names it (the version is pinned in the workspace).
pub const CHECKER: &str = "consistency_model 0.0.0 LinearizabilityTester";

/// The specification it checks against, as the report names it.
pub const MODEL: &str = "per-row register of the row's token: insert/update write it, delete \
                         writes none; read by the writing session's directory reads and \
                         contracts (one history), by other sessions' linearizable reads \
                         (another), and by every node's copy at the end (both)";

/// A row with more operations than this is reported unchecked, not searched.
pub const MAX_OPERATIONS: usize = 400;

/// A row with more operations in flight than this is reported unchecked, not searched.
pub const MAX_IN_FLIGHT: usize = 8;

/// Steps (calls into the register specification) one search of one row's history may
/// take before it is given up and the row reported unchecked: the bounds above limit the
/// size of a history, this its shape (many overlapping operations). A linearizable row of
/// a chaos run takes a few dozen.
pub const SEARCH_BUDGET: u64 = 100_000;

/// Microseconds added to every return: times are truncated to whole microseconds, so an
/// operation that seems to end 1–2 µs before another began may in fact overlap it.
pub const SLACK_US: u64 = 2;

/// At most this many violations (and unchecked rows) are described in the report.
const EXAMPLES: usize = 12;

/// The register's value: the row's token, `None` for no row.
type Value = Option<String>;

/// The outcome for the whole history.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Judgement {
    /// Every row's history is linearizable.
    #[default]
    Linearizable,
    /// Some row's history is not.
    Violation,
    /// No violation found, but some rows were not searched (over the bounds).
    Incomplete,
}

/// What the outside checker found, for the report.
#[derive(Debug, Clone, Serialize)]
pub struct Linearizability {
    /// Which checker this is.
    pub checker: &'static str,
    /// What it checked against.
    pub model: &'static str,
    /// Rows checked (each its own register).
    pub keys: usize,
    /// Operations of those rows given to the tester (the end reads included).
    pub operations: usize,
    /// Of those, operations left in flight (ambiguous writes).
    pub in_flight: usize,
    /// Of those, reads by the session that writes the row (the end reads not counted).
    pub reads: usize,
    /// Of those, `consistency=linearizable` reads by other sessions.
    pub linearizable_reads: usize,
    /// The verdict.
    pub verdict: Judgement,
    /// Rows that are not linearizable: how many.
    pub violating_keys: usize,
    /// Each violating row (up to a dozen) with the operation that first broke it.
    pub violations: Vec<String>,
    /// Rows not searched: how many.
    pub unchecked_keys: usize,
    /// Each row not searched (up to a dozen), and why.
    pub unchecked: Vec<String>,
    /// Wall-clock seconds the whole check took.
    pub seconds: f64,
    /// Wall-clock seconds of the slowest row.
    pub slowest_key_seconds: f64,
}

impl Default for Linearizability {
    fn default() -> Self {
        Self {
            checker: CHECKER,
            model: MODEL,
            keys: 0,
            operations: 0,
            in_flight: 0,
            reads: 0,
            linearizable_reads: 0,
            verdict: Judgement::Linearizable,
            violating_keys: 0,
            violations: Vec::new(),
            unchecked_keys: 0,
            unchecked: Vec::new(),
            seconds: 0.0,
            slowest_key_seconds: 0.0,
        }
    }
}

impl Linearizability {
    /// Whether every row was checked and found linearizable.
    pub fn holds(&self) -> bool {
        self.verdict == Judgement::Linearizable
    }
}

/// A tester thread: a session (a new generation after each operation left in flight), or
/// a node read at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Caller {
    Session { session: u32, generation: u32 },
    End { node: u64 },
}

/// One operation on one row, ready for the tester.
#[derive(Debug, Clone)]
struct Op {
    caller: Caller,
    op: RegisterOp<Value>,
    invoked_us: u64,
    /// When the answer came (plus [`SLACK_US`]) and what it was; `None`: in flight.
    returned: Option<(u64, RegisterRet<Value>)>,
    /// For a violation's description.
    what: String,
    /// Which of the row's two histories it belongs to.
    view: View,
}

/// A row's history is checked twice, as two sessions' reads of it are promised different
/// things: the writing session's reads with its barrier are linearizable only with respect
/// to that session (they may lag a write of it that is still in flight and that another
/// session's linearizable read has already seen), `consistency=linearizable` reads with
/// respect to everyone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum View {
    /// Writes and the end reads: in both histories.
    Both,
    /// The writing session's own reads.
    Session,
    /// Linearizable reads, by any session.
    Linearizable,
}

/// Checks `history` and `end` row by row.
pub fn check(history: &[Event], end: &FinalState) -> Linearizability {
    let started = Instant::now();
    let mut result = Linearizability::default();
    let mut violating = Vec::new();
    for (key, ops) in per_key(history, end) {
        result.keys += 1;
        result.operations += ops.len();
        let in_flight = ops.iter().filter(|o| o.returned.is_none()).count();
        result.in_flight += in_flight;
        result.reads += ops.iter().filter(|o| o.view == View::Session).count();
        let linearizable = ops.iter().filter(|o| o.view == View::Linearizable).count();
        result.linearizable_reads += linearizable;
        if ops.len() > MAX_OPERATIONS || in_flight > MAX_IN_FLIGHT {
            result.unchecked.push(format!(
                "{key}: {} operations, {in_flight} in flight (bounds {MAX_OPERATIONS}, \
                 {MAX_IN_FLIGHT}): not searched",
                ops.len()
            ));
            continue;
        }
        let timer = Instant::now();
        let view = |v: View| -> Vec<Op> {
            let keep = |o: &&Op| o.view == View::Both || o.view == v;
            ops.iter().filter(keep).cloned().collect()
        };
        let mut judged = vec![("session view", judge(&view(View::Session), SEARCH_BUDGET))];
        if linearizable > 0 {
            let lin = judge(&view(View::Linearizable), SEARCH_BUDGET);
            judged.push(("linearizable reads", lin));
        }
        result.slowest_key_seconds = result
            .slowest_key_seconds
            .max(timer.elapsed().as_secs_f64());
        // A row counts once, by the first of its histories that fails.
        let failed = judged.into_iter().find_map(|(name, j)| match j {
            Judged::Linearizable => None,
            Judged::Violation(why) => Some(Err(format!("{key} ({name}): {why}"))),
            Judged::Unchecked(why) => Some(Ok(format!("{key} ({name}): {why}"))),
        });
        match failed {
            None => {}
            Some(Err(violation)) => violating.push(violation),
            Some(Ok(unchecked)) => result.unchecked.push(unchecked),
        }
    }
    result.violating_keys = violating.len();
    result.unchecked_keys = result.unchecked.len();
    result.verdict = if !violating.is_empty() {
        Judgement::Violation
    } else if !result.unchecked.is_empty() {
        Judgement::Incomplete
    } else {
        Judgement::Linearizable
    };
    violating.truncate(EXAMPLES);
    result.violations = violating;
    result.unchecked.truncate(EXAMPLES);
    result.seconds = started.elapsed().as_secs_f64();
    result
}

/// How one row's history stands.
#[derive(Debug, PartialEq)]
enum Judged {
    Linearizable,
    /// Not linearizable: the operation that first made it so, and what came before.
    Violation(String),
    /// Not decided: the search ran out of its budget, or the tester refused the history (a
    /// thread with two operations in flight: a fault of this adapter). Reported as
    /// unchecked, never as a pass.
    Unchecked(String),
}

/// What one search found.
#[derive(Debug, PartialEq)]
enum Search {
    Linearizable,
    NotLinearizable,
    /// The budget ran out first.
    Exhausted,
}

/// `consistency_model`'s register, metered: each call spends a step of a budget shared by
/// every copy the search makes; once it is spent, every step is invalid, so the search
/// unwinds at once and the caller learns it was cut short.
#[derive(Debug, Clone)]
struct Metered {
    register: Register<Value>,
    spent: Rc<Cell<u64>>,
    budget: u64,
}

impl Metered {
    /// Spends a step; whether it was within the budget.
    fn spend(&self) -> bool {
        let spent = self.spent.get().saturating_add(1);
        self.spent.set(spent);
        spent <= self.budget
    }
}

impl SequentialSpec for Metered {
    type Op = RegisterOp<Value>;
    type Ret = RegisterRet<Value>;

    fn invoke(&mut self, op: &Self::Op) -> Self::Ret {
        self.spend();
        self.register.invoke(op)
    }

    fn is_valid_step(&mut self, op: &Self::Op, ret: &Self::Ret) -> bool {
        self.spend() && self.register.is_valid_step(op, ret)
    }
}

/// One invocation or return, in the order the tester is fed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Point {
    at_us: u64,
    /// Invocations before returns at the same moment: they count as concurrent.
    is_return: bool,
    op: usize,
}

/// Feeds the tester in real-time order and asks whether a linearization exists; on a
/// violation, finds the first return after which none does.
fn judge(ops: &[Op], budget: u64) -> Judged {
    let points = points(ops);
    match search(ops, &points, budget) {
        Ok(Search::Linearizable) => return Judged::Linearizable,
        Ok(Search::NotLinearizable) => {}
        Ok(Search::Exhausted) => {
            return Judged::Unchecked(format!(
                "the search took more than {budget} steps: given up"
            ))
        }
        Err(why) => return Judged::Unchecked(format!("the tester refused the history: {why}")),
    }
    // Linearizability is prefix-closed: find the shortest prefix that is not (a return).
    // A prefix whose search is cut short counts as not, which at worst names a later
    // operation than the first that broke it.
    let (mut good, mut bad) = (0, points.len());
    while bad - good > 1 {
        let mid = (good + bad) / 2;
        match search(ops, &points[..mid], budget) {
            Ok(Search::Linearizable) => good = mid,
            _ => bad = mid,
        }
    }
    // The point whose addition broke it (an empty history is linearizable, so there is one).
    let Some(culprit) = bad
        .checked_sub(1)
        .and_then(|i| points.get(i))
        .and_then(|p| ops.get(p.op))
    else {
        return Judged::Violation("no linearization".into());
    };
    let before = ops
        .iter()
        .filter_map(|o| match (&o.op, &o.returned) {
            (RegisterOp::Write(_), Some((at, _))) if *at < culprit.invoked_us => Some((at, o)),
            _ => None,
        })
        .max_by_key(|(at, _)| **at)
        .map(|(_, o)| o.what.as_str());
    let in_flight: Vec<&str> = ops
        .iter()
        .filter(|o| o.returned.is_none() && o.invoked_us < culprit.invoked_us)
        .map(|o| o.what.as_str())
        .collect();
    Judged::Violation(format!(
        "no linearization once {} returned; last acknowledged write before it: {}; in flight: {}",
        culprit.what,
        before.unwrap_or("none"),
        if in_flight.is_empty() {
            "none".to_owned()
        } else {
            in_flight.join(", ")
        }
    ))
}

/// Runs the tester over `points` (a prefix of the row's history; operations invoked and
/// not yet returned in it are in flight), within `budget` steps.
fn search(ops: &[Op], points: &[Point], budget: u64) -> Result<Search, String> {
    let spent = Rc::new(Cell::new(0));
    let mut tester = LinearizabilityTester::new(Metered {
        register: Register::new(None),
        spent: spent.clone(),
        budget,
    });
    for p in points {
        let op = &ops[p.op];
        match (&op.returned, p.is_return) {
            (_, false) => {
                tester.on_invoke(op.caller, op.op.clone())?;
            }
            (Some((_, ret)), true) => {
                tester.on_return(op.caller, ret.clone())?;
            }
            (None, true) => {}
        }
    }
    // A linearization found is proof (a spent budget only prunes, never admits a step);
    // none found is proof only if the budget lasted.
    Ok(if tester.is_consistent() {
        Search::Linearizable
    } else if spent.get() > budget {
        Search::Exhausted
    } else {
        Search::NotLinearizable
    })
}

/// Every invocation and return of `ops`, in real-time order.
fn points(ops: &[Op]) -> Vec<Point> {
    let mut points: Vec<Point> = ops
        .iter()
        .enumerate()
        .flat_map(|(i, o)| {
            let invoke = Point {
                at_us: o.invoked_us,
                is_return: false,
                op: i,
            };
            let ret = o.returned.as_ref().map(|(at, _)| Point {
                at_us: *at,
                is_return: true,
                op: i,
            });
            std::iter::once(invoke).chain(ret)
        })
        .collect();
    points.sort();
    points
}

/// One operation of a session, from its attempts.
#[derive(Debug)]
struct Made<'a> {
    session: u32,
    request: &'a Request,
    invoked_us: u64,
    /// The answer's end and what it showed; `None` with `ambiguous` false: refused.
    answered: Option<(u64, &'a Seen, &'a Event)>,
    ambiguous: bool,
    first: &'a Event,
}

/// Every row some operation wrote, with its operations in tester form (end reads included).
fn per_key(history: &[Event], end: &FinalState) -> BTreeMap<String, Vec<Op>> {
    let mut by_session: BTreeMap<u32, Vec<&Event>> = BTreeMap::new();
    for e in history.iter().filter(|e| !e.blocked()) {
        by_session.entry(e.session).or_default().push(e);
    }
    let mut made = Vec::new();
    for events in by_session.values_mut() {
        events.sort_by_key(|e| e.start_us);
        made.extend(operations(events));
    }
    // The sessions that write each row: only their reads of it enter its history.
    let mut writers: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for m in &made {
        if let Some((key, _)) = m.request.written() {
            let list = writers.entry(key).or_default();
            if !list.contains(&m.session) {
                list.push(m.session);
            }
        }
    }
    let mut rows: BTreeMap<String, Vec<Op>> = BTreeMap::new();
    // Per row and session: the session's current thread generation.
    let mut generation: BTreeMap<(String, u32), u32> = BTreeMap::new();
    let mut last_us = 0;
    for m in &made {
        let (key, op) = match (m.request.written(), m.request) {
            (Some((key, value)), _) => (key, RegisterOp::Write(value.map(str::to_owned))),
            (None, Request::Read { key } | Request::Contract { key }) => {
                if !writers
                    .get(key.as_str())
                    .is_some_and(|w| w.contains(&m.session))
                {
                    continue;
                }
                (key.as_str(), RegisterOp::Read)
            }
            (None, Request::LinearizableRead { key }) => (key.as_str(), RegisterOp::Read),
            (None, _) => continue,
        };
        let view = match (m.request, &op) {
            (Request::LinearizableRead { .. }, _) => View::Linearizable,
            (_, RegisterOp::Read) => View::Session,
            (_, RegisterOp::Write(_)) => View::Both,
        };
        let returned = match (m.answered, &op) {
            (Some((at, _, _)), RegisterOp::Write(_)) => Some((at, RegisterRet::WriteOk)),
            (Some((at, Seen::Row { token, .. }, _)), RegisterOp::Read) => {
                Some((at, RegisterRet::ReadOk(token.clone())))
            }
            // A read whose answer shows no row value: nothing to judge.
            (Some(_), RegisterOp::Read) => continue,
            (None, RegisterOp::Write(_)) if m.ambiguous => None,
            // Refused, or a failed read: no effect.
            (None, _) => continue,
        };
        let gen = generation.entry((key.to_owned(), m.session)).or_default();
        let caller = Caller::Session {
            session: m.session,
            generation: *gen,
        };
        if returned.is_none() {
            *gen += 1;
        }
        last_us = last_us
            .max(m.invoked_us)
            .max(returned.as_ref().map_or(0, |r| r.0));
        let what = describe(m, &op, returned.as_ref().map(|r| &r.1));
        rows.entry(key.to_owned()).or_default().push(Op {
            caller,
            op,
            invoked_us: m.invoked_us,
            returned,
            what,
            view,
        });
    }
    // A session's next operation never starts before its previous answer (as fed: the
    // slack added to returns must not overlap it with the next invocation of its thread).
    for ops in rows.values_mut() {
        let mut previous: BTreeMap<Caller, u64> = BTreeMap::new();
        for op in ops.iter_mut() {
            if let Some(&ret) = previous.get(&op.caller) {
                op.invoked_us = op.invoked_us.max(ret + 1);
            }
            if let Some((at, _)) = &op.returned {
                previous.insert(op.caller, *at);
            }
        }
    }
    // The end: each reachable node's copy, read after everything else returned.
    let at = last_us + 1;
    for (key, ops) in rows.iter_mut() {
        for node in end.nodes.iter().filter(|n| n.reachable) {
            let value = node.rows.get(key).map(|s| s.token.clone());
            ops.push(Op {
                caller: Caller::End { node: node.id },
                op: RegisterOp::Read,
                invoked_us: at,
                returned: Some((at + 1, RegisterRet::ReadOk(value.clone()))),
                what: format!("node {}'s copy at the end ({})", node.id, show(&value)),
                view: View::Both,
            });
        }
    }
    rows
}

/// Splits one session's events (sorted by start, blocked ticks removed) into operations.
/// A session is sequential, so an operation's attempts are contiguous; a new operation
/// starts where the request changes or a second first attempt appears.
fn operations<'a>(events: &[&'a Event]) -> Vec<Made<'a>> {
    let mut groups: Vec<Vec<&'a Event>> = Vec::new();
    for &e in events {
        let same = groups.last().is_some_and(|g| {
            g[0].op == e.op && !(e.attempt == 0 && g.iter().any(|x| x.attempt == 0))
        });
        match groups.last_mut() {
            Some(g) if same => g.push(e),
            _ => groups.push(vec![e]),
        }
    }
    groups
        .into_iter()
        .map(|group| {
            let first = group[0];
            let ended = |e: &Event| e.start_us.saturating_add(e.latency_us);
            let last_end = group
                .iter()
                .map(|e| ended(e))
                .max()
                .unwrap_or(first.start_us);
            // The earliest attempt recorded; but a hedge's cancelled attempt is not
            // recorded, and may have been sent earlier. The operation's own latency runs
            // from before its first attempt to after its last answer, so `last_end -
            // latency` is never later than the operation's start.
            let earliest = group
                .iter()
                .map(|e| e.start_us)
                .min()
                .unwrap_or(first.start_us);
            let from_latency = group
                .iter()
                .find_map(|e| e.operation)
                .map_or(earliest, |o| last_end.saturating_sub(o.latency_us));
            let answered = group.iter().find_map(|e| match &e.outcome {
                Outcome::Ok(seen) => Some((ended(e).saturating_add(SLACK_US), seen, *e)),
                Outcome::Failed { .. } => None,
            });
            let ambiguous = group.iter().any(|e| match &e.outcome {
                Outcome::Failed { ambiguous, error } => *ambiguous && !nothing_proposed(error),
                Outcome::Ok(_) => false,
            });
            Made {
                session: first.session,
                request: &first.op,
                invoked_us: earliest.min(from_latency),
                answered,
                ambiguous,
                first,
            }
        })
        .collect()
}

/// Whether a failed write's error says the node proposed nothing: `no_quorum`, over HTTP
/// (`http_503:no_quorum`) or gRPC (`grpc_Unavailable:no_quorum`).
fn nothing_proposed(error: &str) -> bool {
    error.rsplit(':').next() == Some("no_quorum")
}

fn show(value: &Value) -> String {
    value.clone().unwrap_or_else(|| "<absent>".into())
}

fn describe(m: &Made<'_>, op: &RegisterOp<Value>, ret: Option<&RegisterRet<Value>>) -> String {
    let node = m.answered.map_or(m.first.node, |(_, _, e)| e.node);
    let when = match m.answered {
        Some((at, _, _)) => format!("{:.3}s–{:.3}s", m.invoked_us as f64 / 1e6, at as f64 / 1e6),
        None => format!("{:.3}s–never", m.invoked_us as f64 / 1e6),
    };
    let what = match (op, ret) {
        (RegisterOp::Write(v), Some(_)) => format!("wrote {}", show(v)),
        (RegisterOp::Write(v), None) => format!("wrote {} (outcome unknown)", show(v)),
        (RegisterOp::Read, Some(RegisterRet::ReadOk(v))) => format!("saw {}", show(v)),
        (RegisterOp::Read, _) => "read".to_owned(),
    };
    format!(
        "session {} {} on node {} [{when}] {what}",
        m.session,
        m.request.name(),
        node
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{FinalNode, Operation, Stored};

    const K: &str = "CH01_00001";

    /// A history of whole operations, each `[start, end]` in milliseconds.
    #[derive(Default)]
    struct H {
        events: Vec<Event>,
    }

    impl H {
        fn push(
            &mut self,
            session: u32,
            op: Request,
            ms: (u64, u64),
            outcome: Outcome,
        ) -> &mut Event {
            self.events.push(Event {
                session,
                node: 1,
                incarnation: 0,
                op,
                start_us: ms.0 * 1000,
                latency_us: (ms.1 - ms.0) * 1000,
                attempt: 0,
                operation: None,
                min_index: 0,
                index: Some(1),
                stale: false,
                outcome,
            });
            self.events.last_mut().expect("just pushed")
        }
        fn write(&mut self, session: u32, token: &str, ms: (u64, u64), outcome: Outcome) {
            let op = Request::Update {
                key: K.into(),
                token: token.into(),
            };
            self.push(session, op, ms, outcome);
        }
        fn acked(&mut self, session: u32, token: &str, ms: (u64, u64)) {
            self.write(session, token, ms, Outcome::Ok(Seen::Written));
        }
        fn read(&mut self, session: u32, token: Option<&str>, ms: (u64, u64)) {
            let seen = Seen::Row {
                token: token.map(Into::into),
                version: None,
            };
            self.push(
                session,
                Request::Read { key: K.into() },
                ms,
                Outcome::Ok(seen),
            );
        }
        /// A `consistency=linearizable` read of `K` by `session`.
        fn linearizable(&mut self, session: u32, token: Option<&str>, ms: (u64, u64)) {
            let seen = Seen::Row {
                token: token.map(Into::into),
                version: None,
            };
            let op = Request::LinearizableRead { key: K.into() };
            self.push(session, op, ms, Outcome::Ok(seen));
        }
        fn check(&self, end: &[Option<&str>]) -> Linearizability {
            check(&self.events, &at_end(end))
        }
    }

    fn timeout() -> Outcome {
        Outcome::Failed {
            error: "timeout".into(),
            ambiguous: true,
        }
    }

    fn refused() -> Outcome {
        Outcome::Failed {
            error: "http_409:conflict".into(),
            ambiguous: false,
        }
    }

    /// Nodes 1, 2, … at the end, holding these values of `K`.
    fn at_end(values: &[Option<&str>]) -> FinalState {
        FinalState {
            nodes: values
                .iter()
                .zip(1..)
                .map(|(v, id)| FinalNode {
                    id,
                    reachable: true,
                    rows: v
                        .iter()
                        .map(|t| {
                            let stored = Stored {
                                token: (*t).into(),
                                version: 9,
                            };
                            (K.to_owned(), stored)
                        })
                        .collect(),
                    ..FinalNode::default()
                })
                .collect(),
            settled: true,
            outbox_left: 0,
        }
    }

    #[test]
    fn a_linearizable_interleaving_passes() {
        // Two overlapping writes; both later reads see the one invoked first, so the
        // tester must order the other one first: linearizable all the same.
        let mut h = H::default();
        h.acked(1, "a", (0, 10));
        h.acked(2, "b", (5, 15));
        h.read(1, Some("a"), (20, 25));
        h.read(2, Some("a"), (21, 26));
        let found = h.check(&[Some("a"), Some("a"), Some("a")]);
        assert_eq!(found.verdict, Judgement::Linearizable, "{found:?}");
        assert_eq!((found.keys, found.operations, found.in_flight), (1, 7, 0));
        // A read concurrent with a write may see either value.
        let mut h = H::default();
        h.acked(1, "a", (0, 10));
        h.acked(1, "b", (20, 30));
        h.read(2, Some("a"), (25, 26));
        h.read(1, Some("b"), (31, 32));
        assert!(h.check(&[Some("b")]).holds());
    }

    #[test]
    fn a_stale_read_after_a_completed_write_fails() {
        let mut h = H::default();
        h.acked(1, "a", (0, 10));
        h.acked(1, "b", (20, 30));
        h.read(1, Some("a"), (40, 50));
        let found = h.check(&[Some("b")]);
        assert_eq!(found.verdict, Judgement::Violation, "{found:?}");
        assert_eq!(found.violating_keys, 1);
        assert!(
            found.violations[0].contains("read on node 1 [0.040s–0.050s] saw a")
                && found.violations[0].contains("wrote b"),
            "{:?}",
            found.violations
        );
        // The whole verdict fails, and says which checker found it.
        let verdict = crate::check::check(&h.events, &at_end(&[Some("b")]));
        assert!(!verdict.passed());
        assert!(
            verdict
                .failures()
                .iter()
                .any(|f| f.starts_with(CHECKER) && f.contains("1 rows not linearizable")),
            "{:?}",
            verdict.failures()
        );
    }

    #[test]
    fn a_lost_acknowledged_write_fails() {
        let mut h = H::default();
        h.acked(1, "a", (0, 10));
        h.acked(1, "b", (20, 30));
        h.read(1, Some("b"), (40, 50));
        assert!(h.check(&[Some("b"), Some("b")]).holds());
        // Node 2 ends with the older value, or with no row at all.
        for lost in [Some("a"), None] {
            let found = h.check(&[Some("b"), lost]);
            assert_eq!(found.verdict, Judgement::Violation);
            assert!(
                found.violations[0].contains("node 2's copy at the end"),
                "{:?}",
                found.violations
            );
        }
    }

    #[test]
    fn an_in_flight_write_may_take_effect_or_not() {
        // `b` timed out: it may have landed (even after the reads), or never.
        let mut h = H::default();
        h.acked(1, "a", (0, 10));
        h.write(1, "b", (20, 2020), timeout());
        h.read(1, Some("a"), (2030, 2040));
        let took_effect = h.check(&[Some("b"), Some("b")]);
        assert!(took_effect.holds(), "{took_effect:?}");
        assert_eq!(took_effect.in_flight, 1);
        assert!(h.check(&[Some("a"), Some("a")]).holds());
        // But once a read saw it land, it cannot be undone: a later read of `a` fails (the
        // harness's own read-your-writes check allows both values while `b` is uncertain).
        h.read(1, Some("b"), (2050, 2060));
        assert!(h.check(&[Some("b")]).holds());
        h.read(1, Some("a"), (2070, 2080));
        assert_eq!(h.check(&[Some("b")]).verdict, Judgement::Violation);
        assert!(crate::check::check(&h.events, &at_end(&[Some("b")])).ryw_violations == 0);
    }

    #[test]
    fn a_refused_write_never_takes_effect() {
        // A 4xx; and `no_quorum`, which the workload records as ambiguous to be safe but
        // the node answers only when it proposed nothing.
        let no_quorum = |error: &str| Outcome::Failed {
            error: error.into(),
            ambiguous: true,
        };
        for refusal in [
            refused(),
            no_quorum("http_503:no_quorum"),
            no_quorum("grpc_Unavailable:no_quorum"),
        ] {
            let mut h = H::default();
            h.acked(1, "a", (0, 10));
            h.write(1, "b", (20, 30), refusal.clone());
            h.read(1, Some("a"), (40, 50));
            let found = h.check(&[Some("a")]);
            assert!(
                found.holds() && found.in_flight == 0,
                "{refusal:?}: {found:?}"
            );
            h.read(1, Some("b"), (60, 70));
            assert_eq!(h.check(&[Some("a")]).verdict, Judgement::Violation);
        }
        // Any other 5xx may have taken effect.
        let mut h = H::default();
        h.acked(1, "a", (0, 10));
        h.write(1, "b", (20, 30), no_quorum("http_503:outcome_unknown"));
        h.read(1, Some("b"), (60, 70));
        assert!(h.check(&[Some("b")]).holds());
    }

    #[test]
    fn retries_of_one_operation_are_one_invocation() {
        // The first attempt timed out, the retry on node 2 was answered: one acknowledged
        // write (not one in flight and one more).
        let mut h = H::default();
        h.acked(1, "a", (0, 10));
        h.write(1, "b", (20, 1020), timeout());
        h.events[1].operation = Some(Operation {
            ok: true,
            latency_us: 1_100_000,
        });
        h.acked(1, "b", (1020, 1030));
        h.events[2].attempt = 1;
        h.events[2].node = 2;
        let found = h.check(&[Some("b")]);
        assert!(found.holds(), "{found:?}");
        assert_eq!((found.operations, found.in_flight), (3, 0));
        // After the acknowledgement, the owner's read must see `b`.
        h.read(1, Some("a"), (1040, 1050));
        assert_eq!(h.check(&[Some("b")]).verdict, Judgement::Violation);
    }

    #[test]
    fn an_operation_is_invoked_before_its_first_recorded_attempt() {
        // A write hedged to a second node, whose first attempt was cancelled unrecorded:
        // the one recorded attempt ran 1020–1030 ms, but the operation took 1.1 s, so it
        // was invoked at the latest at -70 ms. A write of another session that ended at
        // 600 ms may therefore be ordered after it, and be the value at the end.
        let mut h = H::default();
        h.acked(1, "b", (1020, 1030));
        h.events[0].operation = Some(Operation {
            ok: true,
            latency_us: 1_100_000,
        });
        h.acked(2, "c", (500, 600));
        let found = h.check(&[Some("c")]);
        assert!(found.holds(), "{found:?}");
        // Without the operation's latency, `c` ended before `b` began: `b` must win.
        h.events[0].operation = None;
        assert_eq!(h.check(&[Some("c")]).verdict, Judgement::Violation);
    }

    #[test]
    fn linearizable_reads_of_other_sessions_follow_real_time() {
        let mut h = H::default();
        h.acked(1, "a", (0, 10));
        // Concurrent with the update: either value.
        h.write(1, "b", (20, 30), Outcome::Ok(Seen::Written));
        h.linearizable(2, Some("a"), (25, 26));
        h.linearizable(3, Some("b"), (27, 28));
        let found = h.check(&[Some("b")]);
        assert!(found.holds(), "{found:?}");
        assert_eq!((found.reads, found.linearizable_reads), (0, 2));
        // After it was acknowledged, a linearizable read by anyone must see it.
        h.linearizable(2, Some("a"), (40, 41));
        let found = h.check(&[Some("b")]);
        assert_eq!(found.verdict, Judgement::Violation);
        assert!(
            found.violations[0].contains("(linearizable reads)")
                && found.violations[0].contains("session 2 linearizable_read"),
            "{:?}",
            found.violations
        );
    }

    #[test]
    fn an_in_flight_write_seen_by_a_linearizable_read_stays_seen_for_everyone() {
        let mut h = H::default();
        h.acked(1, "a", (0, 10));
        h.write(1, "b", (20, 2020), timeout());
        h.linearizable(2, Some("b"), (100, 110));
        // The writer's own later read, with its barrier, may still miss `b`: its session
        // never saw `b`'s index. That is its promise (a history of its own), not a violation.
        h.read(1, Some("a"), (2100, 2110));
        let found = h.check(&[Some("b")]);
        assert!(found.holds(), "{found:?}");
        // But a linearizable read after one that saw `b` cannot go back to `a`.
        h.linearizable(3, Some("a"), (200, 210));
        assert_eq!(h.check(&[Some("b")]).verdict, Judgement::Violation);
    }

    #[test]
    fn a_search_over_its_budget_is_unchecked_not_a_pass_or_a_violation() {
        // Five readers overlapping a write and each other, and a stale one after it.
        let mut h = H::default();
        h.acked(1, "a", (0, 10));
        h.acked(1, "b", (20, 100));
        for s in 2..7 {
            h.linearizable(s, Some("a"), (30 + u64::from(s), 90 + u64::from(s)));
        }
        h.linearizable(10, Some("a"), (200, 210));
        let rows = per_key(&h.events, &at_end(&[Some("b")]));
        let ops: Vec<Op> = rows[K]
            .iter()
            .filter(|o| o.view != View::Session)
            .cloned()
            .collect();
        assert!(matches!(judge(&ops, SEARCH_BUDGET), Judged::Violation(_)));
        assert!(
            matches!(judge(&ops, 50), Judged::Unchecked(ref why) if why.contains("more than 50 steps")),
            "{:?}",
            judge(&ops, 50)
        );
        // A linearization found within the budget is a pass whatever was spent.
        let fine: Vec<Op> = ops.iter().take(ops.len() - 2).cloned().collect();
        assert_eq!(judge(&fine, 1_000), Judged::Linearizable);
    }

    #[test]
    fn a_row_over_the_bound_is_unchecked_and_fails() {
        let mut h = H::default();
        h.acked(1, "a", (0, 1));
        for i in 0..MAX_OPERATIONS as u64 {
            h.read(1, Some("a"), (10 + 2 * i, 11 + 2 * i));
        }
        let found = h.check(&[Some("a")]);
        assert_eq!(found.verdict, Judgement::Incomplete);
        assert_eq!(found.unchecked_keys, 1);
        assert!(!found.holds());
    }

    #[test]
    fn reads_by_other_sessions_and_rows_nobody_wrote_are_left_out() {
        let mut h = H::default();
        h.acked(1, "a", (0, 10));
        h.acked(1, "b", (20, 30));
        // Session 2 never wrote the row: its read is not promised to be fresh.
        h.read(2, Some("a"), (40, 50));
        h.push(
            2,
            Request::Read {
                key: "CHAOS_SHARED_0".into(),
            },
            (40, 50),
            Outcome::Ok(Seen::Row {
                token: None,
                version: None,
            }),
        );
        let found = h.check(&[Some("b")]);
        assert!(found.holds(), "{found:?}");
        assert_eq!((found.keys, found.operations), (1, 3));
    }
}
