//! Receipts: the forensic view (admin key), and the public fields behind the brochure page.

use super::{read_barrier, Admin, Freshness, ServiceError};
use crate::app::App;
use crate::model::receipt::{valid_receipt_id, Receipt};

/// Receipts of one row unless told otherwise.
pub const BY_KEY_DEFAULT: usize = 50;
/// Most receipts of one row in one answer.
pub const BY_KEY_MAX: usize = 1_000;

/// One receipt with its stored input and output; 404 for an unknown id.
pub async fn get(
    app: &App,
    _admin: &Admin,
    freshness: &Freshness,
    id: &str,
) -> Result<Receipt, ServiceError> {
    read_barrier(app, freshness).await?;
    lookup(app, id)?.ok_or_else(|| ServiceError::NotFound(format!("no receipt {id:?}")))
}

/// The receipts of row `key`, newest first, at most `limit` (default 50, at most 1000).
/// They outlive the row.
pub async fn by_key(
    app: &App,
    _admin: &Admin,
    freshness: &Freshness,
    key: &str,
    limit: Option<usize>,
) -> Result<Vec<Receipt>, ServiceError> {
    read_barrier(app, freshness).await?;
    let limit = limit.unwrap_or(BY_KEY_DEFAULT).clamp(1, BY_KEY_MAX);
    app.receipts
        .by_key(key, limit)
        .map_err(ServiceError::internal)
}

/// A committed receipt for its public page (no credential: the page shows only public
/// fields); `None` when unknown.
pub fn lookup(app: &App, id: &str) -> Result<Option<Receipt>, ServiceError> {
    if !valid_receipt_id(id) {
        return Ok(None);
    }
    app.receipts.get(id).map_err(ServiceError::internal)
}
