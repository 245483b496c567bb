//! The leader checks a forwarded write again before it proposes it, as if it had arrived
//! over HTTP: a peer that passed authentication is still only trusted to send what the
//! protocol allows. Rows obey DESIGN §2.1, times are near the leader's clock, ids have their
//! shapes, a receipt is one its sender ran, and a share secret is one a node could have made.
//! (Only members may forward at all: see [`crate::api::peer`].)

use crate::catalogue::row::BUILTINS;
use crate::catalogue::row::{valid_key, validate_rows};
use crate::model::receipt::valid_receipt_id;
use crate::model::share::valid_token_id;
use crate::model::time::{parse_ms, MAX_MS};

use super::{Command, NodeId, Request, RequestId};

/// How far a time a proposer decided may be from the leader's clock.
pub const CLOCK_SKEW_MS: u64 = 5 * 60 * 1000;
/// Longest credential name a request may carry as its caller.
const MAX_CALLER: usize = 256;
/// Longest receipt field of free text (caller, error, called, upstream status).
const MAX_RECEIPT_TEXT: usize = 4 * 1024;
/// Largest stored input or output a receipt may carry, whatever a node's cap.
const MAX_RECEIPT_STORE: usize = 1024 * 1024;

/// Why a forwarded write was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A row broke a rule of DESIGN §2.1.
    #[error("row {position}: {reason}")]
    Row {
        /// Its position in the write.
        position: usize,
        /// The rule.
        reason: String,
    },
    /// A write of no rows.
    #[error("a write of no rows")]
    NoRows,
    /// A key that no row may have.
    #[error("key {key:?} is not a valid row key")]
    Key {
        /// The key.
        key: String,
    },
    /// A time too far from the leader's clock (a write's: too far behind it).
    #[error("{what} is {at_ms} ms since the epoch, more than {CLOCK_SKEW_MS} ms from the leader's clock ({now_ms})")]
    Time {
        /// Which time.
        what: &'static str,
        /// The time given.
        at_ms: u64,
        /// The leader's clock.
        now_ms: u64,
    },
    /// A receipt that its sender cannot have made.
    #[error("receipt {id:?}: {reason}")]
    Receipt {
        /// Its id.
        id: String,
        /// What is wrong.
        reason: String,
    },
    /// A share-token id of the wrong shape.
    #[error("share token id {id:?} has the wrong shape")]
    TokenId {
        /// The id.
        id: String,
    },
    /// A share secret no node makes.
    #[error("the share secret has the wrong shape")]
    ShareSecret,
    /// A batch: only the leader groups writes, never a peer that forwards them.
    #[error("a batch of writes cannot be forwarded")]
    Batch,
    /// A checkpoint signature forwarded by another node than its signer.
    /// A storage alarm of another node than its sender.
    #[error("a storage alarm of node {node} forwarded by node {sender}")]
    AlarmOf {
        /// The node the alarm names.
        node: NodeId,
        /// The node that forwarded it.
        sender: NodeId,
    },
    #[error("a checkpoint signature of node {node} forwarded by node {sender}")]
    Signer {
        /// The signer it names.
        node: NodeId,
        /// The node that forwarded it.
        sender: NodeId,
    },
    /// A request id a client could not have sent.
    #[error("request id: {reason}")]
    RequestId {
        /// What is wrong.
        reason: String,
    },
}

/// Refuses a time further than [`CLOCK_SKEW_MS`] behind the leader's clock, or one no clock
/// shows (past year 9999). One ahead of the leader's clock is not refused but held back when
/// proposed ([`hold_times`]): the sender's clock may be the fast one, or the leader's the
/// slow one, and neither is the writer's fault.
fn recent(what: &'static str, at_ms: u64, now_ms: u64) -> Result<(), Refusal> {
    if now_ms.saturating_sub(at_ms) > CLOCK_SKEW_MS || at_ms > MAX_MS {
        return Err(Refusal::Time {
            what,
            at_ms,
            now_ms,
        });
    }
    Ok(())
}

/// Holds the times a proposer decided in `command` (a write's `updated_at`, a revocation's
/// time) to `latest_ms`, the latest the leader accepts ([`crate::model::time::latest_stamp_ms`]):
/// a proposer whose clock runs ahead of the majority's cannot pin them in the future. Only
/// ever earlier, and never a receipt's start, which its invoker already showed the client
/// (receipts are deduplicated by content, and retention does not trust their clocks).
pub fn hold_times(command: &mut Command, latest_ms: u64) {
    match command {
        Command::PutRows { at_ms, .. } | Command::RevokeShare { at_ms, .. } => {
            *at_ms = (*at_ms).min(latest_ms);
        }
        Command::Batch { requests } => {
            for request in requests {
                hold_times(&mut request.command, latest_ms);
            }
        }
        Command::DeleteRow { .. }
        | Command::AppendReceipt { .. }
        | Command::SetShareSecret { .. }
        | Command::RotateShareSecret { .. }
        | Command::PruneReceipts { .. }
        | Command::Cosign { .. }
        | Command::Alarm { .. } => {}
    }
}

/// Checks `request`, forwarded by member `sender`, at the leader's time `now_ms`.
pub fn check_forwarded(request: &Request, sender: NodeId, now_ms: u64) -> Result<(), Refusal> {
    if let Some(id) = &request.request_id {
        RequestId::parse(id.as_str()).map_err(|e| Refusal::RequestId {
            reason: e.to_string(),
        })?;
    }
    if request
        .caller
        .as_ref()
        .is_some_and(|c| c.len() > MAX_CALLER)
    {
        return Err(Refusal::RequestId {
            reason: format!("a caller name is at most {MAX_CALLER} bytes"),
        });
    }
    match &request.command {
        Command::PutRows { at_ms, rows } => {
            if rows.is_empty() {
                return Err(Refusal::NoRows);
            }
            recent("the write's time", *at_ms, now_ms)?;
            validate_rows(rows, &BUILTINS).map_err(|(position, rule)| Refusal::Row {
                position,
                reason: rule.to_string(),
            })
        }
        Command::DeleteRow { key, .. } if !valid_key(key) => Err(Refusal::Key { key: key.clone() }),
        Command::DeleteRow { .. } => Ok(()),
        Command::AppendReceipt { receipt } => {
            let fail = |reason: String| Refusal::Receipt {
                id: receipt.id.clone(),
                reason,
            };
            if !valid_receipt_id(&receipt.id) {
                return Err(fail("not a receipt id".into()));
            }
            if !valid_key(&receipt.key) {
                return Err(fail(format!("row key {:?} is not valid", receipt.key)));
            }
            // A node forwards only the receipts of invocations it ran itself.
            if receipt.served_by != sender {
                return Err(fail(format!(
                    "served by node {}, but forwarded by node {sender}",
                    receipt.served_by
                )));
            }
            // Receipts may wait in an outbox for long, so only the future is bounded.
            let started = parse_ms(&receipt.started_at).ok_or_else(|| {
                fail(format!("started_at {:?} is not a time", receipt.started_at))
            })?;
            if started > now_ms + CLOCK_SKEW_MS {
                return Err(fail(format!(
                    "started_at {} is in the future",
                    receipt.started_at
                )));
            }
            let hashes = [&receipt.input_sha256, &receipt.output_sha256];
            if hashes
                .iter()
                .any(|h| h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()))
            {
                return Err(fail("a hash is not 64 hex characters".into()));
            }
            let texts = [
                Some(&receipt.caller),
                receipt.error.as_ref(),
                receipt.called.as_ref(),
                receipt.upstream_status.as_ref(),
            ];
            if receipt.caller.is_empty()
                || texts.iter().flatten().any(|t| t.len() > MAX_RECEIPT_TEXT)
            {
                return Err(fail(
                    "caller, error, called or upstream status is empty or too long".into(),
                ));
            }
            let cap = (receipt.store_cap_bytes as usize).min(MAX_RECEIPT_STORE);
            if receipt.input.len() > cap || receipt.output.len() > cap {
                return Err(fail(format!(
                    "stored input or output is over its cap of {cap} bytes"
                )));
            }
            if receipt.index != 0 {
                return Err(fail("the index is set by apply, not by the sender".into()));
            }
            Ok(())
        }
        Command::SetShareSecret { secret } if !secret.is_well_formed() => Err(Refusal::ShareSecret),
        Command::SetShareSecret { .. } => Ok(()),
        Command::RotateShareSecret { secret, .. } if !secret.is_well_formed() => {
            Err(Refusal::ShareSecret)
        }
        Command::RotateShareSecret { .. } => Ok(()),
        // Retention runs on the leader, but a leadership change between its check and its
        // write forwards the entry; its cut-off can lie in the past only.
        Command::PruneReceipts { before_ms, .. } if *before_ms > now_ms + CLOCK_SKEW_MS => {
            Err(Refusal::Time {
                what: "the retention cut-off",
                at_ms: *before_ms,
                now_ms,
            })
        }
        Command::PruneReceipts { .. } => Ok(()),
        Command::Batch { .. } => Err(Refusal::Batch),
        // A node forwards only its own signatures (apply checks them against its key).
        Command::Cosign { node, .. } if *node != sender => Err(Refusal::Signer {
            node: *node,
            sender,
        }),
        Command::Cosign { .. } => Ok(()),
        // A node raises and clears only its own alarm.
        Command::Alarm { node, .. } if *node != sender => Err(Refusal::AlarmOf {
            node: *node,
            sender,
        }),
        Command::Alarm { .. } => Ok(()),
        Command::RevokeShare { id, at_ms } => {
            if !valid_token_id(id) {
                return Err(Refusal::TokenId { id: id.clone() });
            }
            recent("the revocation's time", *at_ms, now_ms)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::row::RowInput;
    use crate::model::receipt::Receipt;
    use crate::model::share::ShareSecret;
    use crate::model::time::format_ms;

    const NOW: u64 = 1_800_000_000_000;

    fn row(key: &str) -> RowInput {
        serde_json::from_value(serde_json::json!({"key": key, "type": "static"})).unwrap()
    }

    fn put(rows: Vec<RowInput>, at_ms: u64) -> Request {
        Request::new(Command::PutRows { at_ms, rows })
    }

    fn receipt(served_by: NodeId) -> Receipt {
        Receipt {
            row_version: 3,
            input_sha256: "a".repeat(64),
            output_sha256: "b".repeat(64),
            started_at: format_ms(NOW - 3_600_000),
            served_by,
            store_cap_bytes: 16 * 1024,
            ..Receipt::sample("inv_0123456789")
        }
    }

    #[test]
    fn a_write_stamped_ahead_of_the_latest_time_is_held_back_to_it() {
        const DAY: u64 = 86_400_000;
        let mut batch = Command::Batch {
            requests: vec![
                put(vec![row("FAST")], NOW + DAY),
                put(vec![row("TRUE")], NOW - 5),
                Request::new(Command::RevokeShare {
                    id: "abc".into(),
                    at_ms: NOW + DAY,
                }),
            ],
        };
        hold_times(&mut batch, NOW + 2_000);
        let Command::Batch { requests } = batch else {
            panic!("a batch")
        };
        let times: Vec<u64> = requests
            .iter()
            .map(|r| match &r.command {
                Command::PutRows { at_ms, .. } | Command::RevokeShare { at_ms, .. } => *at_ms,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(times, [NOW + 2_000, NOW - 5, NOW + 2_000]);
    }

    #[test]
    fn rows_are_checked_as_over_http_and_times_near_the_leaders_clock() {
        assert_eq!(check_forwarded(&put(vec![row("OK")], NOW), 2, NOW), Ok(()));
        let bad = check_forwarded(&put(vec![row("OK"), row("lower")], NOW), 2, NOW);
        assert!(
            matches!(bad, Err(Refusal::Row { position: 1, .. })),
            "{bad:?}"
        );
        let twice = check_forwarded(&put(vec![row("A"), row("A")], NOW), 2, NOW);
        assert!(
            matches!(twice, Err(Refusal::Row { position: 1, .. })),
            "{twice:?}"
        );
        assert_eq!(
            check_forwarded(&put(vec![], NOW), 2, NOW),
            Err(Refusal::NoRows)
        );
        // Ahead (a fast clock): taken, and held back when proposed (see below); past year
        // 9999 or far behind: refused before it reaches the log.
        assert_eq!(
            check_forwarded(&put(vec![row("OK")], MAX_MS), 2, NOW),
            Ok(())
        );
        let far = check_forwarded(&put(vec![row("OK")], u64::MAX), 2, NOW);
        assert!(matches!(far, Err(Refusal::Time { .. })), "{far:?}");
        let late = check_forwarded(&put(vec![row("OK")], NOW - CLOCK_SKEW_MS - 1), 2, NOW);
        assert!(matches!(late, Err(Refusal::Time { .. })), "{late:?}");
        let delete = Request::new(Command::DeleteRow {
            key: "no such shape".into(),
            if_version: None,
        });
        assert!(matches!(
            check_forwarded(&delete, 2, NOW),
            Err(Refusal::Key { .. })
        ));
    }

    #[test]
    fn a_node_raises_and_clears_only_its_own_storage_alarm() {
        let alarm = |node: NodeId, raised: bool| {
            Request::new(Command::Alarm {
                node,
                alarm: raised.then_some(crate::model::alarm::StorageAlarm {
                    node,
                    raised_at_ms: NOW,
                    used_bytes: 2,
                    quota_bytes: 1,
                    free_bytes: 0,
                    min_free_bytes: 0,
                }),
            })
        };
        for raised in [true, false] {
            assert_eq!(check_forwarded(&alarm(2, raised), 2, NOW), Ok(()));
            assert_eq!(
                check_forwarded(&alarm(3, raised), 2, NOW),
                Err(Refusal::AlarmOf { node: 3, sender: 2 })
            );
        }
    }

    #[test]
    fn receipts_come_only_from_the_node_that_ran_them_and_secrets_are_well_formed() {
        let append = |r: Receipt| {
            Request::new(Command::AppendReceipt {
                receipt: Box::new(r),
            })
        };
        assert_eq!(check_forwarded(&append(receipt(2)), 2, NOW), Ok(()));
        let forged = check_forwarded(&append(receipt(3)), 2, NOW);
        assert!(matches!(forged, Err(Refusal::Receipt { .. })), "{forged:?}");
        let mut future = receipt(2);
        future.started_at = format_ms(NOW + 2 * CLOCK_SKEW_MS);
        assert!(check_forwarded(&append(future), 2, NOW).is_err());
        let mut indexed = receipt(2);
        indexed.index = 7;
        assert!(check_forwarded(&append(indexed), 2, NOW).is_err());

        let made = Request::new(Command::SetShareSecret {
            secret: ShareSecret::generate(),
        });
        assert_eq!(check_forwarded(&made, 2, NOW), Ok(()));
        let planted: ShareSecret = serde_json::from_value(serde_json::json!("attacker")).unwrap();
        let planted = Request::new(Command::SetShareSecret { secret: planted });
        assert_eq!(check_forwarded(&planted, 2, NOW), Err(Refusal::ShareSecret));
        let rotate = |secret| {
            Request::new(Command::RotateShareSecret {
                secret,
                keep_previous: true,
            })
        };
        assert_eq!(
            check_forwarded(&rotate(ShareSecret::generate()), 2, NOW),
            Ok(())
        );
        let weak: ShareSecret = serde_json::from_value(serde_json::json!("attacker")).unwrap();
        assert_eq!(
            check_forwarded(&rotate(weak), 2, NOW),
            Err(Refusal::ShareSecret)
        );
        let prune = |before_ms| {
            Request::new(Command::PruneReceipts {
                before_ms,
                max_age_ms: 0,
                keep_per_key: 0,
                limit: 100,
            })
        };
        assert_eq!(check_forwarded(&prune(NOW - 1), 2, NOW), Ok(()));
        assert!(matches!(
            check_forwarded(&prune(NOW + 2 * CLOCK_SKEW_MS), 2, NOW),
            Err(Refusal::Time { .. })
        ));
        let revoke = Request::new(Command::RevokeShare {
            id: "not-a-token".into(),
            at_ms: NOW,
        });
        assert!(matches!(
            check_forwarded(&revoke, 2, NOW),
            Err(Refusal::TokenId { .. })
        ));
        // Only the leader groups writes: a batch would carry writes past these checks.
        let delete = Request::new(Command::DeleteRow {
            key: "A_ROW".into(),
            if_version: None,
        });
        let batch = Request::new(Command::Batch {
            requests: vec![delete],
        });
        assert_eq!(check_forwarded(&batch, 2, NOW), Err(Refusal::Batch));
    }
}
