//! The workload: many client sessions, each a sequential client at a steady rate that
//! asks, reads contracts and rows, invokes, confirms its receipts, and inserts, updates
//! and deletes its own rows, recording every request as an [`Event`].
//!
//! Sessions speak one of two ways ([`Via`]):
//!
//! - `client` (the default): each session is a `rowcall-client` [`Client`] over gRPC, which
//!   picks the nodes, hedges slow reads, fails over, follows leader hints, retries writes
//!   under one idempotency key, and sends the session's highest index on every call. Its
//!   attempt observer tells the history which node answered each attempt and with what.
//! - `http`: raw HTTP, the failover hand-written here. A session talks to one node at a
//!   time, moves to another now and then and always after a failure. It carries the highest
//!   `x-rowcall-index` it has seen as `x-rowcall-min-index` to any node that has not yet
//!   answered it with an index at least that high (read-your-writes across nodes); to a node
//!   that has, it sends none, relying on §3.1's same-node promise.
//!
//! Either way every attempt on a node is an [`Event`], so the checker judges both alike.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::{Method, Response, StatusCode};
use rowcall_client::{row_input, Attempted, Client, Rejection};
use serde::Serialize;
use serde_json::{json, Map, Value};
use tokio::time::Instant;
use tonic::Code;

use crate::cluster::{shared_row, ADMIN_KEY, SHARED_ROWS};
use crate::history::{
    token_of_what, what_of_content, Class, Event, Op, Operation, Outcome, Seen, BLOCKED,
};
use crate::rng::Rng;

/// Reads give up after this: a node waits at most 2 s for `min_index`, then answers 503.
const READ_TIMEOUT: Duration = Duration::from_secs(3);
/// Directory writes give up after this and try the next node. Shorter than the node's own
/// 5 s write timeout on purpose: a client does not wait for a node that forwards to a
/// leader that is gone (the write stays ambiguous, and the checker treats it so).
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// Invocations give up after this: well beyond the node's receipt wait (0.5 s), after
/// which the receipt goes to the outbox and the invocation is answered `pending`.
const INVOKE_TIMEOUT: Duration = Duration::from_secs(3);
/// Nodes an operation tries before it counts as failed (a client library's failover).
const ATTEMPTS: usize = 3;
/// Over the client library: how long one call may take in all, retries included (as long
/// as the HTTP sessions' slowest single attempt).
const CLIENT_DEADLINE: Duration = Duration::from_secs(3);
/// Over the client library: how long one node may take to answer a read before the next
/// is tried (a second node is asked after the library's hedge delay anyway).
const CLIENT_READ_TIMEOUT: Duration = Duration::from_secs(1);
/// Chance that a session moves to another node before an operation.
const MOVE_CHANCE: f64 = 0.08;

/// Operation weights (ask, contract, read, confirm, invoke, insert, update, delete).
const WEIGHTS: [u64; 8] = [16, 10, 14, 14, 16, 12, 11, 7];
/// Share of directory reads that are instead a `consistency=linearizable` read of another
/// session's row: reads across sessions that DESIGN §3.1 promises to be linearizable, so
/// the outside checker judges real-time order between sessions, not only each session's
/// view of its own rows (about 4% of operations).
const LINEARIZABLE_SHARE: f64 = 0.3;

/// How sessions reach the nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Via {
    /// The `rowcall-client` library over gRPC.
    #[default]
    Client,
    /// Raw HTTP, with this module's own failover.
    Http,
}

impl Via {
    /// Its name in flags and reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Client => "client",
            Self::Http => "http",
        }
    }
}

/// The workload's shape.
#[derive(Debug, Clone)]
pub struct WorkloadOptions {
    /// How sessions reach the nodes.
    pub via: Via,
    /// Concurrent client sessions.
    pub sessions: u32,
    /// Operations per second over all sessions.
    pub rate: f64,
    /// How long to run.
    pub duration: Duration,
    /// Seed of the sessions' choices.
    pub seed: u64,
    /// An operation counts as available when answered within this (retries included).
    pub slo: Duration,
}

/// Live counters for the progress line: per class, attempts and successes.
#[derive(Debug, Default)]
pub struct Progress {
    attempts: [AtomicU64; 3],
    ok: [AtomicU64; 3],
    /// The sessions' clients' write counts, added as each session ends.
    hedges: Mutex<Hedges>,
}

/// What became of the writes that went through the client library and its hedges, all
/// sessions together (`Client::write_stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Hedges {
    /// Writes the sessions called.
    pub writes: u64,
    /// Writes that a hedge also sent to another node while an attempt was still out.
    pub hedged: u64,
    /// Hedged writes whose outcome came from a hedge's attempt.
    pub won: u64,
}

impl Progress {
    fn record(&self, class: Class, ok: bool) {
        let i = class as usize;
        self.attempts[i].fetch_add(1, Ordering::Relaxed);
        if ok {
            self.ok[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Adds one session's write counts.
    fn add_writes(&self, stats: rowcall_client::WriteStats) {
        let mut hedges = self.hedges.lock().unwrap_or_else(|p| p.into_inner());
        hedges.writes += stats.writes;
        hedges.hedged += stats.hedged;
        hedges.won += stats.hedges_won;
    }

    /// The write counts of the sessions that have ended.
    pub fn hedges(&self) -> Hedges {
        *self.hedges.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Per class: (attempts, successes) so far.
    pub fn snapshot(&self) -> [(u64, u64); 3] {
        std::array::from_fn(|i| {
            (
                self.attempts[i].load(Ordering::Relaxed),
                self.ok[i].load(Ordering::Relaxed),
            )
        })
    }
}

/// What sessions share: where the nodes are, and the run's clock.
#[derive(Debug, Clone)]
pub struct Target {
    /// Node base URLs, by index.
    pub urls: Vec<String>,
    /// Node gRPC addresses (`host:port`), by index.
    pub grpc: Vec<String>,
    /// The CA of the nodes' gRPC certificates (PEM) when they serve TLS (`--tls`).
    pub ca: Option<Vec<u8>>,
    /// Node ids, by index.
    pub ids: Vec<u64>,
    /// Node incarnations, by index (bumped on wipe).
    pub incarnations: Arc<Vec<AtomicU32>>,
    /// Time zero of the run.
    pub epoch: Instant,
    /// Live counters.
    pub progress: Arc<Progress>,
}

/// One of a session's rows.
#[derive(Debug)]
struct OwnRow {
    key: String,
    word: String,
    /// The last acknowledged write left it present.
    live: bool,
    /// A write failed ambiguously: no more writes to it (its value is uncertain).
    frozen: bool,
}

#[derive(Debug)]
struct Session {
    id: u32,
    rng: Rng,
    node: usize,
    /// Per node: the highest index it answered this session with, and in which incarnation.
    seen: Vec<(u64, u32)>,
    /// Per node: when a request to it last failed.
    failed: Vec<Option<Instant>>,
    /// Answered within this counts as available.
    slo: Duration,
    high: u64,
    rows: Vec<OwnRow>,
    receipts: Vec<String>,
    writes: u32,
    /// The Idempotency-Key of the directory write under way (the same on every attempt).
    idempotency_key: Option<String>,
    target: Target,
    via: Transport,
    /// For linearizable reads, which go over HTTP either way (the client library has no
    /// per-call consistency), and for every request of an HTTP session.
    http: reqwest::Client,
    /// Per session: how many rows it has begun to insert (its keys are `row_key(s, 1..=n)`),
    /// so other sessions can read them.
    inserted: Arc<Vec<AtomicU32>>,
    events: Vec<Event>,
}

/// A session's way to the nodes.
#[derive(Debug)]
enum Transport {
    Http,
    Client {
        client: Client,
        /// What the client's observer reported since the last call was recorded.
        attempts: Arc<Mutex<Vec<Attempted>>>,
    },
}

/// One request of a session, whichever way it goes.
#[derive(Debug, Clone)]
enum Call {
    Ask { word: String },
    Contract { key: String },
    Read { key: String },
    LinearizableRead { key: String },
    Confirm { id: String },
    Invoke { key: String },
    Put { row: Value },
    Delete { key: String },
}

/// How many candidates an ask wants.
const ASK_LIMIT: u32 = 50;

impl Call {
    /// The HTTP request: method, path and query, body.
    fn http(&self) -> (Method, String, Option<Value>) {
        match self {
            Self::Ask { word } => (
                Method::GET,
                format!(
                    "/api/dispatch?ask={}&limit={ASK_LIMIT}",
                    word.replace(' ', "+")
                ),
                None,
            ),
            Self::Contract { key } => (Method::GET, format!("/api/dispatch?key={key}"), None),
            Self::Read { key } => (Method::GET, format!("/api/directory/{key}"), None),
            Self::LinearizableRead { key } => (
                Method::GET,
                format!("/api/directory/{key}?consistency=linearizable"),
                None,
            ),
            Self::Confirm { id } => (Method::GET, format!("/api/dispatch?confirm={id}"), None),
            Self::Invoke { key } => (
                Method::POST,
                "/api/dispatch".into(),
                Some(json!({ "key": key, "args": {} })),
            ),
            Self::Put { row } => (Method::POST, "/api/directory".into(), Some(row.clone())),
            Self::Delete { key } => (Method::DELETE, format!("/api/directory/{key}"), None),
        }
    }

    /// What an HTTP answer showed, or `None` when it is an error answer.
    fn judge_http(&self, a: &Answer) -> Option<Seen> {
        match self {
            Self::Ask { .. } => (a.status == StatusCode::OK).then(|| Seen::Ask {
                keys: a.body["candidates"]
                    .as_array()
                    .map(|c| {
                        c.iter()
                            .filter_map(|c| c["key"].as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default(),
            }),
            Self::Contract { .. } | Self::Read { .. } | Self::LinearizableRead { .. } => {
                match a.status {
                    StatusCode::OK => {
                        let what = if matches!(self, Self::Contract { .. }) {
                            a.body["what"].as_str()
                        } else {
                            a.body["content"].as_str().and_then(what_of_content)
                        };
                        Some(row_seen(what, a.body["version"].as_u64()))
                    }
                    StatusCode::NOT_FOUND => Some(row_seen(None, None)),
                    _ => None,
                }
            }
            Self::Confirm { .. } => matches!(a.status, StatusCode::OK | StatusCode::NOT_FOUND)
                .then(|| Seen::Confirm {
                    confirmed: a.body["confirmed"].as_bool() == Some(true),
                    pending: a.body["status"].as_str() == Some("pending"),
                }),
            Self::Invoke { .. } => {
                let id = a.body["proof"]["invocation_id"].as_str()?;
                (a.status == StatusCode::OK).then(|| Seen::Receipt {
                    id: id.to_owned(),
                    pending: a.body["proof"]["status"].as_str() == Some("pending"),
                    token: a.body["result"]["token"].as_str().map(str::to_owned),
                })
            }
            Self::Put { .. } | Self::Delete { .. } => {
                a.status.is_success().then_some(Seen::Written)
            }
        }
    }

    /// Makes the call through the client library: what the answer showed, or the error
    /// (an answer the protocol defines, like "no such row" for a read, is not an error).
    async fn through(&self, client: &Client) -> Result<Seen, rowcall_client::Error> {
        let absent = |e: rowcall_client::Error| e.is_not_found().then_some(()).ok_or(e);
        match self {
            Self::Ask { word } => {
                let answer = client.ask(word, ASK_LIMIT).await?;
                Ok(Seen::Ask {
                    keys: answer.candidates.into_iter().map(|c| c.key).collect(),
                })
            }
            Self::Contract { key } => match client.contract(key).await {
                Ok(c) => Ok(row_seen(c["what"].as_str(), c["version"].as_u64())),
                Err(e) => absent(e).map(|()| row_seen(None, None)),
            },
            // Linearizable reads never come here: `exchange` sends them over HTTP.
            Self::Read { key } | Self::LinearizableRead { key } => match client.get(key).await {
                Ok(row) => Ok(row_seen(what_of_content(&row.content), Some(row.version))),
                Err(e) => absent(e).map(|()| row_seen(None, None)),
            },
            Self::Confirm { id } => match client.confirm(id).await {
                Ok(c) => Ok(Seen::Confirm {
                    confirmed: c.confirmed,
                    pending: c.status == "pending",
                }),
                Err(e) => absent(e).map(|()| Seen::Confirm {
                    confirmed: false,
                    pending: false,
                }),
            },
            Self::Invoke { key } => {
                let ran = client.invoke(key, Some(Map::new())).await?;
                Ok(Seen::Receipt {
                    id: ran.proof.invocation_id,
                    pending: ran.proof.status == "pending",
                    token: ran
                        .result
                        .as_ref()
                        .and_then(|r| r["token"].as_str())
                        .map(str::to_owned),
                })
            }
            Self::Put { row } => {
                client.put(row_input(row.clone())?).await?;
                Ok(Seen::Written)
            }
            Self::Delete { key } => {
                client.delete(key, None).await?;
                Ok(Seen::Written)
            }
        }
    }
}

/// What a read of a row showed: the token in its WHAT line, and its version.
fn row_seen(what: Option<&str>, version: Option<u64>) -> Seen {
    Seen::Row {
        token: what.and_then(token_of_what),
        version,
    }
}

/// What one HTTP exchange produced.
struct Answer {
    status: StatusCode,
    index: Option<u64>,
    stale: bool,
    body: Value,
}

/// Runs the workload until `options.duration` has passed; returns every event, by start.
pub async fn run(options: &WorkloadOptions, target: Target) -> Vec<Event> {
    let http = reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(Duration::from_millis(500))
        .pool_max_idle_per_host(64)
        .build()
        .expect("a plain HTTP client builds");
    let mut seeds = Rng::new(options.seed);
    let period = Duration::from_secs_f64(f64::from(options.sessions) / options.rate.max(0.1));
    let mut tasks = Vec::new();
    let inserted: Arc<Vec<AtomicU32>> =
        Arc::new((0..options.sessions).map(|_| AtomicU32::new(0)).collect());
    for id in 0..options.sessions {
        let mut rng = seeds.fork(u64::from(id));
        let node = rng.below(target.urls.len() as u64) as usize;
        let via = match options.via {
            Via::Http => Transport::Http,
            Via::Client => client_transport(&target, node),
        };
        let session = Session {
            id,
            node,
            seen: vec![(0, 0); target.urls.len()],
            failed: vec![None; target.urls.len()],
            slo: options.slo,
            high: 0,
            rows: Vec::new(),
            receipts: Vec::new(),
            writes: 0,
            idempotency_key: None,
            target: target.clone(),
            via,
            http: http.clone(),
            inserted: inserted.clone(),
            events: Vec::new(),
            rng,
        };
        let offset = period.mul_f64(f64::from(id) / f64::from(options.sessions.max(1)));
        tasks.push(tokio::spawn(session.run(options.duration, period, offset)));
    }
    let mut events = Vec::new();
    for task in tasks {
        if let Ok(mut e) = task.await {
            events.append(&mut e);
        }
    }
    events.sort_by_key(|e| e.start_us);
    events
}

/// A session's own client: every node, the session's node first (so sessions spread their
/// reads), the chaos timeouts, and an observer that keeps every attempt for the history.
fn client_transport(target: &Target, first: usize) -> Transport {
    let n = target.grpc.len();
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let sink = attempts.clone();
    let mut builder = Client::builder();
    if let Some(ca) = &target.ca {
        builder = builder.tls_ca(ca);
    }
    let client = builder
        // No scheme: https when the CA is set, http otherwise.
        .nodes((0..n).map(|i| target.grpc[(first + i) % n].clone()))
        .credential(ADMIN_KEY)
        .read_timeout(CLIENT_READ_TIMEOUT)
        .write_timeout(WRITE_TIMEOUT)
        .invoke_timeout(INVOKE_TIMEOUT)
        .deadline(CLIENT_DEADLINE)
        .on_attempt(move |a| {
            sink.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(a.clone())
        })
        .build()
        .expect("the cluster's gRPC addresses are valid");
    Transport::Client { client, attempts }
}

impl Session {
    async fn run(mut self, duration: Duration, period: Duration, offset: Duration) -> Vec<Event> {
        let end = self.target.epoch + duration;
        let mut due = self.target.epoch + offset;
        // Bounded in count as well as time.
        let most = (duration.as_secs_f64() / period.as_secs_f64() * 2.0) as usize + 10;
        for _ in 0..most {
            tokio::time::sleep_until(due).await;
            if Instant::now() >= end {
                break;
            }
            // Drawn either way, so both ways make the same choices from one seed.
            if self.rng.chance(MOVE_CHANCE) {
                self.move_node();
            }
            let before = self.events.len();
            self.step().await;
            due += period;
            // The session is open-loop: a tick that passed entirely while it waited for an
            // answer is an operation of the kind it waited for that its client could only
            // make late. It counts as available only if the wait succeeded and ended within
            // the SLO of the tick, so a stall weighs as much as the requests it held up (no
            // coordinated omission).
            let now = Instant::now();
            let blocking = self
                .events
                .get(before)
                .map(|e| (e.op.clone(), e.operation_ok()));
            while let Some((op, ok)) = blocking
                .as_ref()
                .filter(|_| due + period <= now && due < end)
            {
                let in_time = *ok && now.saturating_duration_since(due) <= self.slo;
                self.missed(due, op, in_time, now.saturating_duration_since(due));
                due += period;
            }
        }
        if let Transport::Client { client, .. } = &self.via {
            self.target.progress.add_writes(client.write_stats());
        }
        self.events
    }

    /// Records the operation the session could not make at `due` because it was still
    /// waiting for the answer to `blocking`; `ok` when that wait ended well within the SLO.
    fn missed(&mut self, due: Instant, blocking: &Op, ok: bool, waited: Duration) {
        self.target.progress.record(blocking.class(), ok);
        self.events.push(Event {
            session: self.id,
            node: self.target.ids[self.node],
            incarnation: 0,
            op: blocking.clone(),
            start_us: (due - self.target.epoch).as_micros() as u64,
            latency_us: 0,
            attempt: 0,
            operation: Some(Operation {
                ok,
                latency_us: waited.as_micros() as u64,
            }),
            min_index: 0,
            index: None,
            stale: false,
            outcome: Outcome::Failed {
                error: BLOCKED.to_owned(),
                ambiguous: false,
            },
        });
    }

    /// Moves to the other node whose last failure is oldest (never failed: first).
    fn fail_over(&mut self) {
        let here = self.node;
        if let Some(next) = (0..self.target.urls.len())
            .filter(|&i| i != here)
            .min_by_key(|&i| (self.failed[i], self.rng.below(1000)))
        {
            self.node = next;
        }
    }

    fn move_node(&mut self) {
        let n = self.target.urls.len();
        if n > 1 {
            self.node = (self.node + 1 + self.rng.below(n as u64 - 1) as usize) % n;
        }
    }

    fn pick_op(&mut self) -> usize {
        let total: u64 = WEIGHTS.iter().sum();
        let mut roll = self.rng.below(total);
        for (i, w) in WEIGHTS.iter().enumerate() {
            if roll < *w {
                return i;
            }
            roll -= w;
        }
        0
    }

    /// A row to write: live and not frozen.
    fn writable(&mut self) -> Option<usize> {
        let candidates: Vec<usize> = (0..self.rows.len())
            .filter(|&i| self.rows[i].live && !self.rows[i].frozen)
            .collect();
        self.pick_recent(&candidates)
    }

    /// Prefers recent entries (read-your-writes is most at risk right after a write).
    fn pick_recent(&mut self, candidates: &[usize]) -> Option<usize> {
        if candidates.is_empty() {
            return None;
        }
        let n = candidates.len() as u64;
        let back = if self.rng.chance(0.6) {
            self.rng.below(n.min(3))
        } else {
            self.rng.below(n)
        };
        Some(candidates[(n - 1 - back) as usize])
    }

    fn any_row(&mut self) -> Option<usize> {
        let all: Vec<usize> = (0..self.rows.len()).collect();
        self.pick_recent(&all)
    }

    fn token(&mut self) -> String {
        self.writes += 1;
        format!("s{}w{}", self.id, self.writes)
    }

    fn content(word: &str, token: &str) -> String {
        format!("# WHAT: chaos probe {word} {token}\n\n{{\"token\":\"{token}\"}}\n")
    }

    async fn step(&mut self) {
        match self.pick_op() {
            0 => self.ask().await,
            1 => self.read(true).await,
            2 if self.rng.chance(LINEARIZABLE_SHARE) => self.linearizable_read().await,
            2 => self.read(false).await,
            3 => self.confirm().await,
            4 => self.invoke().await,
            5 => self.insert().await,
            6 => self.update().await,
            _ => self.delete().await,
        }
    }

    async fn ask(&mut self) {
        let (word, key) = match self.any_row() {
            Some(i) => (self.rows[i].word.clone(), Some(self.rows[i].key.clone())),
            None => ("chaos shared row".to_owned(), None),
        };
        let call = Call::Ask { word: word.clone() };
        self.exchange(Op::Ask { word, key }, call).await;
    }

    async fn read(&mut self, contract: bool) {
        let key = match self.any_row() {
            Some(i) => self.rows[i].key.clone(),
            None => shared_row(self.rng.below(SHARED_ROWS as u64) as usize),
        };
        let (op, call) = if contract {
            (Op::Contract { key: key.clone() }, Call::Contract { key })
        } else {
            (Op::Read { key: key.clone() }, Call::Read { key })
        };
        self.exchange(op, call).await;
    }

    /// A `consistency=linearizable` read of a recent row of another session (any session's
    /// own read when no other has a row yet).
    async fn linearizable_read(&mut self) {
        let sessions = self.inserted.len() as u64;
        let other = if sessions > 1 {
            (u64::from(self.id) + 1 + self.rng.below(sessions - 1)) % sessions
        } else {
            u64::from(self.id)
        };
        let count = self
            .inserted
            .get(other as usize)
            .map_or(0, |n| u64::from(n.load(Ordering::Relaxed)));
        if count == 0 {
            return self.read(false).await;
        }
        let back = if self.rng.chance(0.6) {
            self.rng.below(count.min(3))
        } else {
            self.rng.below(count)
        };
        let key = row_key(other as u32, (count - back) as usize);
        let call = Call::LinearizableRead { key: key.clone() };
        self.exchange(Op::LinearizableRead { key }, call).await;
    }

    async fn confirm(&mut self) {
        let n = self.receipts.len() as u64;
        if n == 0 {
            return self.invoke().await;
        }
        let back = if self.rng.chance(0.6) {
            self.rng.below(n.min(3))
        } else {
            self.rng.below(n)
        };
        let id = self.receipts[(n - 1 - back) as usize].clone();
        let call = Call::Confirm { id: id.clone() };
        self.exchange(Op::Confirm { id }, call).await;
    }

    async fn invoke(&mut self) {
        let live: Vec<usize> = (0..self.rows.len())
            .filter(|&i| self.rows[i].live)
            .collect();
        let own = !live.is_empty() && self.rng.chance(0.5);
        let key = match own.then(|| self.pick_recent(&live)).flatten() {
            Some(i) => self.rows[i].key.clone(),
            None => shared_row(self.rng.below(SHARED_ROWS as u64) as usize),
        };
        let call = Call::Invoke { key: key.clone() };
        if let Some(Seen::Receipt { id, .. }) = self.exchange(Op::Invoke { key, own }, call).await {
            self.receipts.push(id);
        }
    }

    async fn insert(&mut self) {
        let key = row_key(self.id, self.rows.len() + 1);
        let word = letters(&mut self.rng, 9);
        let token = self.token();
        let row = json!({"key": key, "type": "static", "auth": "public", "category": "chaos",
                         "content": Self::content(&word, &token)});
        self.rows.push(OwnRow {
            key: key.clone(),
            word,
            live: false,
            frozen: false,
        });
        let i = self.rows.len() - 1;
        // Readable by others from now on: a read concurrent with the insert is judged too.
        if let Some(n) = self.inserted.get(self.id as usize) {
            n.store(self.rows.len() as u32, Ordering::Relaxed);
        }
        self.write(i, Op::Insert { key, token }, Call::Put { row }, true)
            .await;
    }

    async fn update(&mut self) {
        let Some(i) = self.writable() else {
            return self.insert().await;
        };
        let (key, word) = (self.rows[i].key.clone(), self.rows[i].word.clone());
        let token = self.token();
        let row = json!({"key": key, "type": "static", "auth": "public", "category": "chaos",
                         "content": Self::content(&word, &token)});
        self.write(i, Op::Update { key, token }, Call::Put { row }, true)
            .await;
    }

    async fn delete(&mut self) {
        let Some(i) = self.writable() else {
            return self.insert().await;
        };
        let key = self.rows[i].key.clone();
        let call = Call::Delete { key: key.clone() };
        self.write(i, Op::Delete { key }, call, false).await;
    }

    /// A write of own row `i`: on success it is `live` as the write left it; after an
    /// ambiguous failure it is frozen (never written again, so its value stays decidable).
    async fn write(&mut self, i: usize, op: Op, call: Call, leaves_live: bool) {
        let first = self.events.len();
        if self.exchange(op, call).await.is_some() {
            self.rows[i].live = leaves_live;
        } else if self.events[first..].iter().any(|e| {
            matches!(
                e.outcome,
                Outcome::Failed {
                    ambiguous: true,
                    ..
                }
            )
        }) {
            self.rows[i].frozen = true;
        }
    }

    /// One operation, by HTTP or through the client library. Every attempt is an event; the
    /// first one also records how the whole operation ended.
    async fn exchange(&mut self, op: Op, call: Call) -> Option<Seen> {
        let first = self.events.len();
        let started = Instant::now();
        let seen = match &self.via {
            _ if matches!(call, Call::LinearizableRead { .. }) => {
                self.exchange_http(&op, &call).await
            }
            Transport::Http => self.exchange_http(&op, &call).await,
            Transport::Client { client, attempts } => {
                let (client, attempts) = (client.clone(), attempts.clone());
                let result = call.through(&client).await;
                let reported =
                    std::mem::take(&mut *attempts.lock().unwrap_or_else(|p| p.into_inner()));
                self.record_client(&op, result, reported)
            }
        };
        if let Some(e) = self.events.get_mut(first) {
            e.operation = Some(Operation {
                // Available: answered, within the SLO (retries included).
                ok: seen.is_some() && started.elapsed() <= self.slo,
                latency_us: started.elapsed().as_micros() as u64,
            });
        }
        seen
    }

    /// Records what the client library's attempts showed: every attempt failed but the
    /// last, which answered when the call did. Returns what the call showed.
    fn record_client(
        &mut self,
        op: &Op,
        result: Result<Seen, rowcall_client::Error>,
        reported: Vec<Attempted>,
    ) -> Option<Seen> {
        let class = op.class();
        let is_write = class == Class::Write;
        let epoch = self.target.epoch.into_std();
        let last = reported.len().saturating_sub(1);
        if reported.is_empty() {
            // No attempt was made (the deadline passed first): the operation failed all the same.
            let error = match &result {
                Err(e) => e.to_string(),
                Ok(_) => "no attempt".into(),
            };
            self.target.progress.record(class, false);
            self.events.push(Event {
                session: self.id,
                node: self.target.ids[self.node],
                incarnation: 0,
                op: op.clone(),
                start_us: (Instant::now() - self.target.epoch).as_micros() as u64,
                latency_us: 0,
                attempt: 0,
                operation: None,
                min_index: 0,
                index: None,
                stale: false,
                outcome: Outcome::Failed {
                    error,
                    ambiguous: is_write,
                },
            });
            return None;
        }
        for (n, a) in reported.iter().enumerate() {
            let node = self
                .target
                .grpc
                .iter()
                .position(|g| *g == a.node)
                .unwrap_or(self.node);
            let outcome = match (&result, &a.failure) {
                (Ok(seen), _) if n == last => Outcome::Ok(seen.clone()),
                (_, Some(rejection)) => Outcome::Failed {
                    error: grpc_error(rejection),
                    ambiguous: is_write && may_have_applied(rejection),
                },
                // An answer the call did not end with cannot happen (the first answer ends a
                // call); record it as what it was, unjudged.
                (_, None) => Outcome::Failed {
                    error: "grpc_ok:unjudged".into(),
                    ambiguous: is_write,
                },
            };
            let ok = matches!(outcome, Outcome::Ok(_));
            self.target.progress.record(class, ok);
            if ok {
                self.node = node;
            }
            self.events.push(Event {
                session: self.id,
                node: self.target.ids[node],
                incarnation: self.target.incarnations[node].load(Ordering::SeqCst),
                op: op.clone(),
                start_us: a.sent.saturating_duration_since(epoch).as_micros() as u64,
                latency_us: a.elapsed.as_micros() as u64,
                attempt: n.min(usize::from(u8::MAX)) as u8,
                operation: None,
                min_index: a.min_index,
                index: a.index,
                stale: a.stale,
                outcome,
            });
        }
        result.ok()
    }

    /// One operation over HTTP as a client library does it: on a transport failure or a
    /// 5xx it tries the next node, up to [`ATTEMPTS`] nodes in all.
    async fn exchange_http(&mut self, op: &Op, call: &Call) -> Option<Seen> {
        let first = self.events.len();
        let attempts = ATTEMPTS.min(self.target.urls.len());
        // Every attempt of one directory write carries one Idempotency-Key, so a retry of an
        // attempt that did commit is answered with its outcome instead of applying twice.
        self.idempotency_key =
            (op.class() == Class::Write).then(|| format!("s{}-op{first}", self.id));
        let mut seen = None;
        let started = Instant::now();
        for attempt in 0..attempts {
            seen = self.attempt(op.clone(), call, attempt as u8).await;
            let retry = match self.events.last().map(|e| &e.outcome) {
                Some(Outcome::Failed { error, .. }) => {
                    !error.starts_with("http_") || error.starts_with("http_5")
                }
                _ => false,
            };
            // A linearizable read keeps to the client library's deadline for one call (it
            // may wait for a read index on every node while no leader is elected).
            let late =
                matches!(op, Op::LinearizableRead { .. }) && started.elapsed() >= CLIENT_DEADLINE;
            if seen.is_some() || !retry || late {
                break;
            }
        }
        seen
    }

    /// Sends one HTTP request, records its event, and returns what it showed.
    async fn attempt(&mut self, op: Op, call: &Call, attempt: u8) -> Option<Seen> {
        let http = &self.http;
        let (method, path, body) = call.http();
        let node = self.node;
        let incarnation = self.target.incarnations[node].load(Ordering::SeqCst);
        if self.seen[node].1 != incarnation {
            // A wiped node starts over: it has shown this session nothing yet.
            self.seen[node] = (0, incarnation);
        }
        let min_index = if self.seen[node].0 < self.high {
            self.high
        } else {
            0
        };
        let class = op.class();
        let is_write = class != Class::Read;
        let mut request = http
            .request(method, format!("{}{path}", self.target.urls[node]))
            .timeout(match class {
                Class::Read => READ_TIMEOUT,
                Class::Write => WRITE_TIMEOUT,
                Class::Invoke => INVOKE_TIMEOUT,
            });
        if class == Class::Write {
            request = request.header("x-terminal-key", ADMIN_KEY);
        }
        if let Some(key) = &self.idempotency_key {
            request = request.header("idempotency-key", key.as_str());
        }
        if min_index > 0 {
            request = request.header("x-rowcall-min-index", min_index);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let started = Instant::now();
        let start_us = (started - self.target.epoch).as_micros() as u64;
        let answer = match request.send().await {
            Ok(response) => Ok(answer(response).await),
            Err(e) => Err(transport_kind(&e)),
        };
        let latency_us = started.elapsed().as_micros() as u64;
        let (outcome, index, stale, seen) = match answer {
            Err(kind) => (
                Outcome::Failed {
                    error: kind.to_owned(),
                    ambiguous: is_write,
                },
                None,
                false,
                None,
            ),
            Ok(a) => match call.judge_http(&a) {
                Some(seen) => (Outcome::Ok(seen.clone()), a.index, a.stale, Some(seen)),
                None => {
                    let code = a.body["error"]["code"].as_str().unwrap_or("none");
                    (
                        Outcome::Failed {
                            error: format!("http_{}:{code}", a.status.as_u16()),
                            ambiguous: is_write && a.status.is_server_error(),
                        },
                        a.index,
                        a.stale,
                        None,
                    )
                }
            },
        };
        let ok = seen.is_some();
        if ok {
            if let Some(index) = index {
                self.high = self.high.max(index);
                self.seen[node].0 = self.seen[node].0.max(index);
            }
        } else {
            // A client with a list of nodes tries another one next, the one that failed
            // longest ago.
            self.failed[node] = Some(Instant::now());
            self.fail_over();
        }
        if op.counts_for_availability() {
            self.target.progress.record(class, ok);
        }
        self.events.push(Event {
            session: self.id,
            node: self.target.ids[node],
            incarnation,
            op,
            start_us,
            latency_us,
            attempt,
            operation: None,
            min_index,
            index,
            stale,
            outcome,
        });
        seen
    }
}

/// A client-library failure as the history names it: `timeout`, `connect`, `transport`,
/// or `grpc_<status>:<rowcall code>` (the HTTP sessions' `http_<status>:<code>`).
fn grpc_error(rejection: &Rejection) -> String {
    match rejection.status {
        _ if rejection.from_rowcall() => format!("grpc_{:?}:{}", rejection.status, rejection.code),
        // The client's own timer, or tonic's for the request's grpc-timeout.
        Code::DeadlineExceeded => "timeout".into(),
        Code::Cancelled if rejection.message.contains("Timeout expired") => "timeout".into(),
        Code::Unavailable if rejection.message.to_ascii_lowercase().contains("connect") => {
            "connect".into()
        }
        status => format!("grpc_{status:?}:transport"),
    }
}

/// Whether a write that failed so may still take effect: anything but a refusal the node
/// made before doing anything (as over HTTP, where only a 4xx is unambiguous).
fn may_have_applied(rejection: &Rejection) -> bool {
    let refused = matches!(
        rejection.status,
        Code::InvalidArgument
            | Code::NotFound
            | Code::AlreadyExists
            | Code::PermissionDenied
            | Code::Unauthenticated
            | Code::FailedPrecondition
            | Code::OutOfRange
            | Code::ResourceExhausted
    );
    !(rejection.from_rowcall() && refused)
}

async fn answer(response: Response) -> Answer {
    let status = response.status();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let index = header("x-rowcall-index").and_then(|v| v.parse().ok());
    let stale = header("x-rowcall-stale").as_deref() == Some("true");
    let body = response
        .bytes()
        .await
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null);
    Answer {
        status,
        index,
        stale,
        body,
    }
}

fn transport_kind(e: &reqwest::Error) -> &'static str {
    if e.is_timeout() {
        "timeout"
    } else if e.is_connect() {
        "connect"
    } else {
        "transport"
    }
}

/// The key of session `session`'s `n`th row (from 1).
fn row_key(session: u32, n: usize) -> String {
    format!("CH{session:02}_{n:05}")
}

/// `n` random lowercase letters: a word no other row has, so an ask for it must find the
/// row it was written into.
fn letters(rng: &mut Rng, n: usize) -> String {
    (0..n)
        .map(|_| char::from(b'a' + rng.below(26) as u8))
        .collect()
}
