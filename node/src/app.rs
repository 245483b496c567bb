//! The state every request handler shares, and the one write path into Raft.

use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use tokio::sync::watch;

use crate::auth::Credentials;
use crate::catalogue::SharedCatalogue;
use crate::config::Config;
use crate::raft::{Command, CommandResult, NodeId, Raft};
use crate::store::state_machine::ReceiptReader;

/// Shared node state.
pub struct App {
    /// This node's id.
    pub node_id: NodeId,
    /// The Raft handle.
    pub raft: Raft,
    /// The applied directory in memory.
    pub catalogue: SharedCatalogue,
    /// Stored receipts.
    pub receipts: ReceiptReader,
    /// The applied index, as the state machine publishes it.
    pub applied: watch::Receiver<u64>,
    /// Who may do what.
    pub credentials: Credentials,
    /// The configuration the node started with.
    pub config: Arc<Config>,
}

/// A write that took effect.
#[derive(Debug)]
pub struct Written {
    /// What applying it did.
    pub result: CommandResult,
    /// Its log index; this node has applied it.
    pub index: u64,
}

/// Why a write did not take effect.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// No quorum answered in time, or there is no leader: try again later.
    #[error("no quorum: the write was not committed within {waited_ms} ms")]
    Unavailable {
        /// How long it waited.
        waited_ms: u64,
    },
    /// Another node leads and this node cannot forward the write.
    #[error("this node does not lead (leader: {leader:?})")]
    NotLeader {
        /// The leader, if known.
        leader: Option<NodeId>,
    },
    /// Raft stopped: the node is shutting down or storage failed.
    #[error("raft stopped: {0}")]
    Fatal(String),
}

impl App {
    /// The index this node has applied.
    pub fn applied_index(&self) -> u64 {
        *self.applied.borrow()
    }

    /// Proposes `command` and returns once it is committed and applied on this node.
    pub async fn write(&self, command: Command) -> Result<Written, WriteError> {
        let name = command.name();
        let timeout = Duration::from_millis(self.config.limits.write_timeout_ms);
        let started = std::time::Instant::now();
        let outcome = tokio::time::timeout(timeout, self.raft.client_write(command)).await;
        metrics::histogram!(crate::metrics::WRITE_SECONDS, "op" => name)
            .record(started.elapsed().as_secs_f64());
        let response = match outcome {
            Err(_) => {
                return Err(WriteError::Unavailable {
                    waited_ms: self.config.limits.write_timeout_ms,
                })
            }
            Ok(Ok(response)) => response,
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward)))) => {
                return Err(WriteError::NotLeader {
                    leader: forward.leader_id,
                })
            }
            Ok(Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e)))) => {
                return Err(WriteError::Fatal(e.to_string()))
            }
            Ok(Err(RaftError::Fatal(fatal))) => return Err(WriteError::Fatal(fatal.to_string())),
        };
        let index = response.log_id.index;
        // client_write answers after the leader applied the entry; make the promise explicit
        // for any path where this node is not the one that applied it.
        self.wait_applied(index, timeout).await;
        Ok(Written {
            result: response.data,
            index,
        })
    }

    /// Waits until this node has applied `index`, at most `timeout`. Returns whether it has.
    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> bool {
        let mut applied = self.applied.clone();
        let reached = tokio::time::timeout(timeout, applied.wait_for(|a| *a >= index)).await;
        matches!(reached, Ok(Ok(_)))
    }

    /// The leader this node knows of.
    pub fn leader(&self) -> Option<NodeId> {
        self.raft.metrics().borrow().current_leader
    }
}
