//! Group proposals: concurrent directory writes on the leader share one Raft entry, and so
//! one log append, one replication round and one sync on every node.
//!
//! openraft 0.9 takes one client write at a time from its queue and awaits the log store's
//! flush before it takes the next (`RaftCore::append_to_log` waits for the append callback),
//! so on the leader every write cost one append and one fdatasync in turn, however many
//! clients were waiting: writes per sync stayed at 1.0 at 16 clients. Followers already
//! receive many entries per AppendEntries; the leader's append was the serial step.
//!
//! The batcher sits in front of `client_write`. A write joins a queue; the batcher takes
//! everything queued (up to [`MAX_WRITES`] writes, [`MAX_ROWS`] rows and the entry size
//! limit, `raft.max_entry_bytes`) as one
//! [`Command::Batch`] and proposes it, with at most [`IN_FLIGHT`] batches proposed at a
//! time, so while those commit the next batch fills. An idle node proposes a lone write at
//! once and as it is (no batch entry, no wait). Each caller gets its own write's result.
//!
//! Durability is unchanged: a batch is one log entry, appended and synced before it counts
//! for the quorum, and applied before any of its writers is answered. Each write keeps its request id, so a retry is recognised inside a batch too.
//! Two writes of one row never share a batch (the second waits for the next): a row's
//! version is the index of the entry that wrote it, and must name one content.

use std::collections::HashSet;
use std::sync::Arc;

use openraft::error::{ClientWriteError, Fatal, RaftError};
use openraft::raft::ClientWriteResponse;
use tokio::sync::{mpsc, oneshot, Semaphore};

use super::{Command, CommandResult, Request, TypeConfig};
use crate::store::Raft;

/// Batches proposed and not yet answered, at most.
const IN_FLIGHT: usize = 2;
/// Writes in one batch, at most.
pub const MAX_WRITES: usize = 128;
/// Rows in one batch, at most (a bulk write over this goes alone, as before).
pub const MAX_ROWS: usize = 512;

/// What `client_write` answers.
pub type Outcome =
    Result<ClientWriteResponse<TypeConfig>, RaftError<TypeConfig, ClientWriteError<TypeConfig>>>;

/// A write waiting for a batch.
struct Pending {
    request: Request,
    /// Its size as an entry.
    bytes: usize,
    reply: oneshot::Sender<Outcome>,
}

/// The rows a directory write touches, or `None` for a command that is not batched.
fn rows_of(request: &Request) -> Option<Vec<&str>> {
    match &request.command {
        Command::PutRows { rows, .. } => Some(rows.iter().map(|r| r.key.as_str()).collect()),
        Command::DeleteRow { key, .. } => Some(vec![key.as_str()]),
        _ => None,
    }
}

/// Proposes through openraft, grouping concurrent directory writes.
#[derive(Clone)]
pub struct Batcher {
    raft: Raft,
    queue: mpsc::UnboundedSender<Pending>,
}

impl Batcher {
    /// Starts the batching task (it ends when every `Batcher` clone is dropped); a batch
    /// entry holds at most `max_bytes` of writes.
    pub fn start(raft: Raft, max_bytes: usize) -> Batcher {
        let (queue, waiting) = mpsc::unbounded_channel();
        tokio::spawn(run(raft.clone(), waiting, max_bytes));
        Batcher { raft, queue }
    }

    /// `Raft::client_write`, answered with this request's own result; `bytes` is its size as
    /// an entry ([`Command::entry_bytes`]). Commands other than directory writes (receipts,
    /// share secrets, revocations) are proposed on their own.
    pub async fn client_write(&self, request: Request, bytes: usize) -> Outcome {
        if rows_of(&request).is_none() {
            return self.raft.client_write(request).await;
        }
        let (reply, answer) = oneshot::channel();
        if self
            .queue
            .send(Pending {
                request,
                bytes,
                reply,
            })
            .is_err()
        {
            return Err(RaftError::Fatal(Fatal::Stopped));
        }
        answer
            .await
            .unwrap_or(Err(RaftError::Fatal(Fatal::Stopped)))
    }
}

/// Takes queued writes into batches and proposes them, [`IN_FLIGHT`] at a time.
async fn run(raft: Raft, mut waiting: mpsc::UnboundedReceiver<Pending>, max_bytes: usize) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut carried: Option<Pending> = None;
    loop {
        let first = match carried.take() {
            Some(first) => first,
            None => match waiting.recv().await {
                Some(first) => first,
                None => return,
            },
        };
        // Writes queue up while every slot is busy: that wait is what fills a batch.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let mut bytes = first.bytes;
        let mut batch = vec![first];
        let mut rows: HashSet<String> = HashSet::new();
        let mut row_count = 0;
        for key in rows_of(&batch[0].request).unwrap_or_default() {
            rows.insert(key.to_owned());
            row_count += 1;
        }
        while batch.len() < MAX_WRITES {
            let Ok(next) = waiting.try_recv() else { break };
            // Its writer gave up waiting and was told the outcome is unknown: proposing it
            // now would only apply a write nobody waits for, long after it was asked.
            if next.reply.is_closed() {
                continue;
            }
            let keys = rows_of(&next.request).unwrap_or_default();
            let fits = row_count + keys.len() <= MAX_ROWS && bytes + next.bytes <= max_bytes;
            if !fits || keys.iter().any(|k| rows.contains(*k)) {
                carried = Some(next);
                break;
            }
            row_count += keys.len();
            bytes += next.bytes;
            rows.extend(keys.into_iter().map(str::to_owned));
            batch.push(next);
        }
        let raft = raft.clone();
        tokio::spawn(async move {
            propose(&raft, batch).await;
            drop(slot);
        });
    }
}

/// Proposes `batch` as one entry (a lone write as itself) and answers every writer.
async fn propose(raft: &Raft, mut batch: Vec<Pending>) {
    metrics::histogram!(crate::metrics::WRITE_BATCH_SIZE).record(batch.len() as f64);
    if batch.len() == 1 {
        let Pending { request, reply, .. } = batch.remove(0);
        let _ = reply.send(raft.client_write(request).await);
        return;
    }
    let (requests, replies): (Vec<_>, Vec<_>) =
        batch.into_iter().map(|p| (p.request, p.reply)).unzip();
    let count = replies.len();
    let outcome = raft
        .client_write(Request {
            request_id: None,
            caller: None,
            command: Command::Batch { requests },
            trace: None,
            trace_context: Default::default(),
        })
        .await;
    match outcome {
        Ok(response) => {
            let results = match response.data {
                CommandResult::Batch { results } if results.len() == count => results,
                // Applying a batch always gives one result per write; anything else is a
                // bug, reported to each writer rather than answered with someone else's.
                other => {
                    tracing::error!(?other, count, "a batch applied with the wrong results");
                    let fatal = RaftError::Fatal(Fatal::Panicked);
                    for reply in replies {
                        let _ = reply.send(Err(fatal.clone()));
                    }
                    return;
                }
            };
            for (reply, data) in replies.into_iter().zip(results) {
                let _ = reply.send(Ok(ClientWriteResponse {
                    log_id: response.log_id,
                    data,
                    membership: None,
                }));
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}
