//! Wrapping an upstream MCP server as rows, one per tool (admin key). The import itself runs
//! in [`crate::dispatch::import`].

use super::{Admin, ServiceError};
use crate::app::App;
use crate::dispatch::import::{self, ImportReport, ImportRequest};

/// Imports (or re-imports) the upstream's tools in one bulk write.
pub async fn import_mcp(
    app: &App,
    _admin: &Admin,
    request: ImportRequest,
) -> Result<ImportReport, ServiceError> {
    crate::cluster::space::refuse_growth(app)?;
    Ok(import::import(app, request).await?)
}
