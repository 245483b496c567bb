//! Proposing the outbox's receipts ([`super::outbox`]) again until the cluster commits them,
//! and what becomes of each once its proposal is answered.

use std::time::Duration;

use super::outbox::{Outbox, OutboxError};
use crate::app::{App, Written};
use crate::model::receipt::Receipt;
use crate::raft::{Command, CommandResult};

/// Proposes outbox receipts again whenever this node has a quorum, until none is left.
pub async fn drain(app: &App) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if app.outbox.is_empty() || app.is_cut_off() {
            continue;
        }
        let pending = match app.outbox.pending() {
            Ok(pending) => pending,
            Err(e) => {
                tracing::error!(error = %e, "reading the outbox");
                continue;
            }
        };
        for receipt in pending {
            if let Err(e) = deliver(app, receipt).await {
                tracing::debug!(error = %e, "outbox receipt not replicated yet");
                break;
            }
        }
    }
}

/// Why one outbox receipt is still there.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Undelivered {
    #[error("receipt {id}: {source}")]
    Write {
        id: String,
        source: crate::raft::calls::WriteError,
    },
    #[error("receipt {id}: committed at index {index}, not applied here yet")]
    NotApplied { id: String, index: u64 },
    #[error(transparent)]
    Storage(#[from] OutboxError),
}

/// Proposes one outbox receipt; removes it once committed and applied here.
async fn deliver(app: &App, receipt: Receipt) -> Result<(), Undelivered> {
    let command = Command::AppendReceipt {
        receipt: Box::new(receipt.clone()),
    };
    let written = app
        .write(command)
        .await
        .map_err(|source| Undelivered::Write {
            id: receipt.id.clone(),
            source,
        })?;
    settle(&app.outbox, receipt, &written).await
}

/// What the outbox does with `receipt` once its proposal was `written`: renamed when its id
/// was taken, kept while this node has not applied it (so a confirm here never falls
/// between the outbox and the log), removed once it has.
pub(crate) async fn settle(
    outbox: &Outbox,
    receipt: Receipt,
    written: &Written,
) -> Result<(), Undelivered> {
    let id = receipt.id.clone();
    if let CommandResult::ReceiptIdTaken { .. } = written.result {
        // Another receipt holds the id: keep this one under a new id (the next round
        // proposes it), rather than drop either.
        let renamed = outbox.rename(&id, receipt).await?;
        tracing::warn!(%id, %renamed, "outbox receipt id was taken by another receipt; kept under a new id");
        return Ok(());
    }
    if !written.applied_here {
        return Err(Undelivered::NotApplied {
            id,
            index: written.index,
        });
    }
    outbox.remove(&id).await?;
    tracing::info!(%id, "outbox receipt replicated");
    Ok(())
}
