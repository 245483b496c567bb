//! Fault injection in front of the node-to-node transport: partitions, one-way loss, drops
//! and delays per directed link. In-process test clusters share one [`Faults`] so a test can
//! cut and heal links deterministically; production nodes run without one.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use rand::Rng;

use super::NodeId;

/// The faults currently in force, per directed link `(from, to)`.
#[derive(Debug, Default)]
pub struct Faults {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    blocked: HashSet<(NodeId, NodeId)>,
    loss: HashMap<(NodeId, NodeId), f64>,
    delay: HashMap<(NodeId, NodeId), Duration>,
    /// Nodes whose calls arrive but whose answers are lost on the way back.
    answers_lost: HashSet<NodeId>,
}

/// What happens to one message on a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Delivered after this delay (zero: at once).
    Deliver(Duration),
    /// Lost.
    Drop,
}

impl Faults {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Cuts every link between the two groups, both ways.
    pub fn partition(&self, a: &[NodeId], b: &[NodeId]) {
        let mut state = self.state();
        for &x in a {
            for &y in b {
                state.blocked.insert((x, y));
                state.blocked.insert((y, x));
            }
        }
    }

    /// Cuts `node` off from every node in `others`, both ways.
    pub fn isolate(&self, node: NodeId, others: &[NodeId]) {
        let rest: Vec<NodeId> = others.iter().copied().filter(|&o| o != node).collect();
        self.partition(&[node], &rest);
    }

    /// Loses every message from `from` to `to` (one way).
    pub fn block(&self, from: NodeId, to: NodeId) {
        self.state().blocked.insert((from, to));
    }

    /// Loses each message from `from` to `to` with probability `p`.
    pub fn lossy(&self, from: NodeId, to: NodeId, p: f64) {
        self.state().loss.insert((from, to), p.clamp(0.0, 1.0));
    }

    /// Delays each message from `from` to `to`.
    pub fn delay(&self, from: NodeId, to: NodeId, by: Duration) {
        self.state().delay.insert((from, to), by);
    }

    /// Loses the answer to every call `caller` makes, after the callee has handled it: its
    /// appends and votes arrive and count there, and it never learns that they did.
    pub fn lose_answers(&self, caller: NodeId) {
        self.state().answers_lost.insert(caller);
    }

    /// Whether answers to `caller`'s calls are lost ([`Self::lose_answers`]).
    pub fn answers_lost(&self, caller: NodeId) -> bool {
        self.state().answers_lost.contains(&caller)
    }

    /// Removes every fault.
    pub fn heal(&self) {
        *self.state() = State::default();
    }

    /// The fate of one message from `from` to `to`.
    pub fn verdict(&self, from: NodeId, to: NodeId) -> Verdict {
        let state = self.state();
        let link = (from, to);
        if state.blocked.contains(&link) {
            return Verdict::Drop;
        }
        if let Some(&p) = state.loss.get(&link) {
            if rand::rng().random_bool(p) {
                return Verdict::Drop;
            }
        }
        Verdict::Deliver(state.delay.get(&link).copied().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_cut_both_ways_and_heal() {
        let faults = Faults::default();
        faults.partition(&[1], &[2, 3]);
        assert_eq!(faults.verdict(1, 2), Verdict::Drop);
        assert_eq!(faults.verdict(3, 1), Verdict::Drop);
        assert_eq!(faults.verdict(2, 3), Verdict::Deliver(Duration::ZERO));
        faults.heal();
        assert_eq!(faults.verdict(1, 2), Verdict::Deliver(Duration::ZERO));
    }

    #[test]
    fn one_way_faults_leave_the_other_direction() {
        let faults = Faults::default();
        faults.block(1, 2);
        faults.delay(2, 1, Duration::from_millis(5));
        assert_eq!(faults.verdict(1, 2), Verdict::Drop);
        assert_eq!(
            faults.verdict(2, 1),
            Verdict::Deliver(Duration::from_millis(5))
        );
        faults.lossy(3, 1, 1.0);
        assert_eq!(faults.verdict(3, 1), Verdict::Drop);
    }

    #[test]
    fn lost_answers_are_a_callers_own_and_heal() {
        let faults = Faults::default();
        faults.lose_answers(1);
        assert!(faults.answers_lost(1));
        assert!(!faults.answers_lost(2));
        assert_eq!(faults.verdict(1, 2), Verdict::Deliver(Duration::ZERO));
        faults.heal();
        assert!(!faults.answers_lost(1));
    }
}
