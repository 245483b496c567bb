//! How a node ranks an ask, besides the replicated rows and receipts: what members compare
//! to find those that rank otherwise (`cluster::ranking`), and tell each other in `Hello`.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::embed::{QueryMode, Weights};

/// A member's node id.
type NodeId = u64;

/// What decides how a node ranks an ask, besides the replicated rows and receipts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankingSetup {
    /// `lexical` or `hybrid`.
    pub mode: String,
    /// The model's fingerprint, in hybrid mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// How queries are embedded, in hybrid mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<QueryMode>,
    /// Whether asks that led to invocations boost their rows (`[resolver] learn`).
    pub learn: bool,
    /// How the model holds its weights, in hybrid mode (`[resolver] weights`): q8 vectors
    /// are close to f32 ones but not equal, so the rankings can differ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<Weights>,
    /// How the build ranks with a model, in hybrid mode
    /// ([`crate::catalogue::resolver::HYBRID_REVISION`]); a build before revisions were
    /// told (revision 1) says nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u32>,
}

impl fmt::Display for RankingSetup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.model, self.query) {
            (Some(model), Some(QueryMode::Static)) => {
                write!(f, "model {model} with static query vectors")?
            }
            (Some(model), _) => write!(f, "model {model}")?,
            (None, _) => write!(f, "words only")?,
        }
        if self.weights == Some(Weights::Q8) {
            write!(f, ", q8 weights")?;
        }
        if self.model.is_some() {
            write!(f, ", ranking revision {}", self.revision.unwrap_or(1))?;
        }
        let learn = if self.learn { "on" } else { "off" };
        write!(f, ", learning from use {learn}")
    }
}

/// The members that rank otherwise than this node, as last heard.
#[derive(Debug, Default)]
pub struct RankingPeers {
    otherwise: Mutex<BTreeMap<NodeId, RankingSetup>>,
}

impl RankingPeers {
    /// Each member that ranks otherwise, with its setup.
    pub fn otherwise(&self) -> BTreeMap<NodeId, RankingSetup> {
        self.lock().clone()
    }

    /// Replaces what was heard with one round's answers.
    pub fn replace(&self, otherwise: BTreeMap<NodeId, RankingSetup>) {
        *self.lock() = otherwise;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<NodeId, RankingSetup>> {
        // The map is replaced whole under the lock: a panic elsewhere cannot leave it torn.
        self.otherwise
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
