//! Whether this node is in touch with its cluster: when each peer last answered, and when the
//! leader last reached us. The basis of `x-rowcall-stale`, of `/readyz`, and of failing
//! writes fast without a quorum.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::raft::NodeId;

/// When this node last heard from its peers; the basis of `x-rowcall-stale` and of failing
/// fast without a quorum.
#[derive(Debug)]
pub struct Liveness {
    stale_after: Duration,
    peers: Mutex<HashMap<NodeId, Instant>>,
    leader_contact: Mutex<Option<Instant>>,
}

impl Liveness {
    /// A tracker that calls contact older than `stale_after` lost.
    pub fn new(stale_after: Duration) -> Self {
        Self {
            stale_after,
            peers: Mutex::default(),
            leader_contact: Mutex::default(),
        }
    }

    /// A peer answered one of our calls.
    pub fn peer_answered(&self, peer: NodeId) {
        self.peers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(peer, Instant::now());
    }

    /// The leader reached us (append entries or heartbeat accepted).
    pub fn leader_contacted(&self) {
        *self
            .leader_contact
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    fn fresh(&self, at: Option<Instant>) -> bool {
        at.is_some_and(|t| t.elapsed() <= self.stale_after)
    }

    /// Whether `peer` answered recently.
    pub fn peer_fresh(&self, peer: NodeId) -> bool {
        let at = self
            .peers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&peer)
            .copied();
        self.fresh(at)
    }

    /// Whether the leader reached us recently.
    pub fn leader_fresh(&self) -> bool {
        let at = *self
            .leader_contact
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        self.fresh(at)
    }
}
