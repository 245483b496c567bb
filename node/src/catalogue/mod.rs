//! The in-memory view of the applied directory: rows by key, the four counts, and the
//! resolver index. The state machine updates it once an applied batch is durable, together
//! with the index it then shows; HTTP handlers read it.
//!
//! # Operator synonyms
//!
//! The resolver's synonym table is extended through the directory itself, with no command of
//! its own: a row with the reserved key [`SYNONYMS_KEY`] (`ROWCALL_SYNONYMS`, normally a
//! `static` row) whose payload — the content after the `# FIELD:` docstring lines — is a JSON
//! array of groups, each group words of one meaning:
//!
//! ```text
//! POST /api/directory
//! {"key":"ROWCALL_SYNONYMS","type":"static","planner_visible":false,
//!  "content":"# WHAT: operator synonyms\n\n[[\"k8s\",\"kubernetes\"],[\"invoice\",\"bill\"]]"}
//! ```
//!
//! Rows replicate through Raft and every node applies them through [`Catalogue::put`],
//! [`Catalogue::remove`] or [`Catalogue::replace_all`], so every node ends up with the same
//! table. Writing the row replaces the operator groups; deleting or disabling it leaves the
//! built-in groups only; a payload that is not such an array also leaves the built-ins only,
//! with a warning in the log. The row is never a candidate of ask, whatever its
//! `planner_visible`.

pub mod demo;
pub mod embed;
pub mod feed;
pub mod resolver;
pub mod row;
pub mod semantic;
pub mod setup;

#[cfg(test)]
mod properties;

use std::borrow::Borrow;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use self::feed::{ChangeOp, Feed};
use self::resolver::{Document, Hit, Resolver};
use self::row::Row;

/// The reserved key of the row whose payload holds the operator's synonym groups (see the
/// module documentation). This row is never indexed for ask.
pub const SYNONYMS_KEY: &str = "ROWCALL_SYNONYMS";

/// The four counts of one table (DESIGN §2.3): each a different predicate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Counts {
    /// Every row.
    pub rows_total: u64,
    /// Rows that may be invoked.
    pub enabled: u64,
    /// Enabled rows that ask may suggest.
    pub planner_visible: u64,
    /// Rows `tools/list` returns: planner-visible, with an object (or no) `args_schema`.
    pub mcp_projected: u64,
}

impl Counts {
    fn add(&mut self, row: &Row, sign: i64) {
        let bump = |n: &mut u64, on: bool| {
            if on {
                *n = n.saturating_add_signed(sign);
            }
        };
        bump(&mut self.rows_total, true);
        bump(&mut self.enabled, row.enabled);
        bump(&mut self.planner_visible, row.suggestible());
        bump(&mut self.mcp_projected, row.mcp_projected());
    }
}

/// The applied directory, as every node keeps it in memory.
#[derive(Default)]
pub struct Catalogue {
    rows: Rows,
    /// Approximate bytes `rows` holds ([`Catalogue::rows_bytes`]), kept as rows change.
    rows_bytes: usize,
    counts: Counts,
    resolver: Resolver,
    feed: Feed,
    /// The node's model, when it has one: row vectors for the resolver.
    semantic: Option<Arc<semantic::Semantic>>,
    /// Whether the resolver learns from asks that led to invocations (on unless the
    /// operator turned it off).
    unlearning: bool,
}

impl Catalogue {
    /// The row stored under `key`.
    pub fn get(&self, key: &str) -> Option<Arc<Row>> {
        self.rows.get(key).cloned()
    }

    /// Inserts or replaces a row, keeping counts and the resolver current, and publishes the
    /// change on the feed (at the row's version, the index of the write).
    pub fn put(&mut self, row: Row) {
        // The row's views, worked out once for the count and the vectors.
        let views = self.semantic.as_ref().map(|semantic| {
            let views = embed_views(&row);
            let old = self.rows.get(&row.key).map(|r| embed_views(r));
            semantic.published(old.as_deref().unwrap_or_default(), &views);
            (semantic, views)
        });
        let old = self.rows.get(&row.key).map(|r| &**r);
        let projection = feed::projection_changed(old, Some(&row));
        let listed = feed::Listed::of(old, Some(&row));
        self.feed
            .publish(row.version, ChangeOp::Put, &row.key, projection, listed);
        if let Some(old) = self.rows.get(&row.key) {
            self.counts.add(&old.clone(), -1);
            self.rows_bytes = self.rows_bytes.saturating_sub(entry_bytes(old));
        }
        self.rows_bytes += entry_bytes(&row);
        self.counts.add(&row, 1);
        if row.key == SYNONYMS_KEY {
            let groups = if row.enabled {
                operator_synonyms(&row)
            } else {
                Vec::new()
            };
            self.resolver.set_synonyms(&groups);
        } else if row.suggestible() {
            let views = views.and_then(|(semantic, texts)| semantic.vectors_for(&row.key, texts));
            let views: Vec<&[f32]> = views.iter().flatten().map(|v| &**v).collect();
            let indexed = index_row(&mut self.resolver, &row, &views);
            unpublishable(&row.key, row.version, indexed);
        } else {
            unpublishable(&row.key, row.version, self.resolver.remove(&row.key));
        }
        self.rows.insert(Arc::new(row));
    }

    /// Removes a row; returns it if it was there.
    pub fn remove(&mut self, key: &str) -> Option<Arc<Row>> {
        let index = self.feed.last_index();
        self.remove_at(key, index)
    }

    /// Removes a row as the entry at `index` asks, and publishes the change on the feed.
    pub fn remove_at(&mut self, key: &str, index: u64) -> Option<Arc<Row>> {
        let old = self.rows.remove(key)?;
        self.rows_bytes = self.rows_bytes.saturating_sub(entry_bytes(&old));
        if let Some(semantic) = &self.semantic {
            semantic.published(&embed_views(&old), &[]);
        }
        let projection = feed::projection_changed(Some(&old), None);
        let listed = feed::Listed::of(Some(&old), None);
        self.feed
            .publish(index, ChangeOp::Delete, key, projection, listed);
        self.counts.add(&old, -1);
        if key == SYNONYMS_KEY {
            self.resolver.set_synonyms(&[]);
        } else {
            unpublishable(key, index, self.resolver.remove(key));
        }
        Some(old)
    }

    /// Replaces everything (start-up and snapshot install): one full rebuild. The operator
    /// synonyms are reset too, and set again if `rows` holds [`SYNONYMS_KEY`].
    pub fn replace_all(&mut self, rows: impl IntoIterator<Item = Row>) {
        let mut fresh = self.empty_like();
        fresh.fill(rows);
        self.adopt(fresh);
    }

    /// An empty catalogue that ranks as this one does (its model, fusion and learning
    /// settings), to [`Catalogue::fill`] without a lock and [`Catalogue::adopt`] in a
    /// moment: a snapshot install of a million rows rebuilds for tens of seconds, and a
    /// rebuild in place would hold the write lock, and every ask, that long.
    pub fn empty_like(&self) -> Catalogue {
        let mut fresh = Catalogue {
            semantic: self.semantic.clone(),
            unlearning: self.unlearning,
            ..Catalogue::default()
        };
        fresh.resolver.set_fusion(self.resolver.fusion());
        fresh
    }

    /// Puts every row of `rows` into this catalogue, made by [`Catalogue::empty_like`]: the
    /// model's vector counts start over with them. Nothing may be put into the catalogue it
    /// replaces meanwhile (the state machine, which alone puts, is busy with the rebuild).
    pub fn fill(&mut self, rows: impl IntoIterator<Item = Row>) {
        if let Some(semantic) = &self.semantic {
            semantic.recount();
        }
        for row in rows {
            self.put(row);
        }
    }

    /// Takes the rows, counts and index of `fresh` (a [`Catalogue::fill`]ed one) in place
    /// of this one's. The feed outlives the rebuild: its subscribers are told to start over
    /// once. Row vectors no row needs any more are dropped.
    pub fn adopt(&mut self, mut fresh: Catalogue) {
        let index = fresh.rows.iter().map(|r| r.version).max().unwrap_or(0);
        fresh.feed = std::mem::take(&mut self.feed);
        fresh.feed.reset(index);
        *self = fresh;
        if let Some(semantic) = &self.semantic {
            let swept = semantic.sweep();
            if swept > 0 {
                tracing::info!(swept, "removed row vectors no row needs");
            }
        }
    }

    /// Subscribes to the change feed, first collecting what a subscriber that has seen
    /// everything up to `since` missed (see [`feed::Backlog`]). Subscribing and reading the
    /// backlog under one lock means no change is missed or repeated between them.
    pub fn watch(
        &self,
        since: Option<u64>,
        applied: u64,
    ) -> (
        feed::Backlog,
        tokio::sync::broadcast::Receiver<feed::Change>,
    ) {
        self.feed.watch(since, applied)
    }

    /// The MCP projection in key order: projected rows after the key `after`.
    pub fn projected_after<'a>(
        &'a self,
        after: Option<&str>,
    ) -> impl Iterator<Item = &'a Arc<Row>> + 'a {
        use std::ops::Bound;
        let start = after.map_or(Bound::Unbounded, Bound::Excluded);
        self.rows.after(start).filter(|row| row.mcp_projected())
    }

    /// The four counts.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The resolver over the suggestible rows.
    pub fn resolver(&self) -> &Resolver {
        &self.resolver
    }

    /// Ranked candidates for a plain-language request: suggestible rows only.
    pub fn ask(&self, query: &str, limit: usize) -> Vec<(Hit, Arc<Row>)> {
        self.ask_with(query, None, limit)
    }

    /// As [`Catalogue::ask`], with the query's embedding fused in.
    pub fn ask_with(
        &self,
        query: &str,
        vector: Option<&[f32]>,
        limit: usize,
    ) -> Vec<(Hit, Arc<Row>)> {
        self.ask_fused(query, vector, limit, None)
    }

    /// As [`Catalogue::ask_with`], with other fusion weights than the resolver's own.
    pub fn ask_fused(
        &self,
        query: &str,
        vector: Option<&[f32]>,
        limit: usize,
        fusion: Option<&resolver::Fusion>,
    ) -> Vec<(Hit, Arc<Row>)> {
        let own = self.resolver.fusion();
        self.resolver
            .search_fused(query, vector, limit, fusion.unwrap_or(&own))
            .into_iter()
            .filter_map(|hit| {
                let row = self.rows.get(&hit.key)?.clone();
                Some((hit, row))
            })
            .collect()
    }

    /// One page of rows in key order, after `after`, optionally in one category.
    /// Returns the rows and the cursor of the next page.
    pub fn page(
        &self,
        category: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> (Vec<Arc<Row>>, Option<String>) {
        use std::ops::Bound;
        let start = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut matching = self
            .rows
            .after(start)
            .filter(|row| category.is_none_or(|c| row.category.eq_ignore_ascii_case(c)));
        let page: Vec<Arc<Row>> = matching.by_ref().take(limit).cloned().collect();
        let next = match (page.last(), matching.next()) {
            (Some(last), Some(_)) => Some(last.key.clone()),
            _ => None,
        };
        (page, next)
    }

    /// A SHA-256 over every row in key order, for comparing nodes' directories.
    pub fn digest(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut hasher = Sha256::new();
        for row in self.rows.iter() {
            if let Ok(bytes) = serde_json::to_vec(&**row) {
                hasher.update(&bytes);
            }
            hasher.update(b"\n");
        }
        hex::encode(hasher.finalize())
    }

    /// Every row, in key order (for snapshots).
    pub fn all_rows(&self) -> Vec<Arc<Row>> {
        self.rows.iter().cloned().collect()
    }

    /// Sets the vector of row `key` seen from one side (see [`Resolver::set_vector`]).
    pub fn set_vector(&mut self, key: &str, vector: &[f32]) -> bool {
        self.resolver.set_vector(key, vector)
    }

    /// Sets the vectors of row `key`'s views (see [`Resolver::set_views`]).
    pub fn set_views(&mut self, key: &str, views: &[&[f32]]) -> bool {
        self.resolver.set_views(key, views)
    }

    /// Learns (`delta` 1) or forgets (-1) that an ask with `words` led to an invocation of
    /// row `key` (a receipt that carries its ask was applied, or pruned).
    pub fn learn(&mut self, key: &str, words: &str, delta: i32) {
        if !self.unlearning {
            self.resolver.learn(key, words, delta);
        }
    }

    /// Turns learning from use on or off; off forgets what was learned.
    pub fn set_learning(&mut self, on: bool) {
        self.unlearning = !on;
        if !on {
            self.resolver.forget_learned();
        }
    }

    /// Whether the resolver learns from use.
    pub fn learning(&self) -> bool {
        !self.unlearning
    }

    /// Gives the catalogue the node's model: rows put from now on get vectors.
    pub fn set_semantic(&mut self, semantic: Arc<semantic::Semantic>) {
        self.semantic = Some(semantic);
    }

    /// The node's model, if it has one.
    pub fn semantic(&self) -> Option<&Arc<semantic::Semantic>> {
        self.semantic.as_ref()
    }

    /// Whether row `key` has its vector (is askable by meaning).
    pub fn has_vector(&self, key: &str) -> bool {
        self.resolver.has_vector(key)
    }

    /// Rows that have a vector.
    pub fn embedded(&self) -> usize {
        self.resolver.embedded()
    }

    /// Replaces the resolver's fusion weights.
    pub fn set_fusion(&mut self, fusion: resolver::Fusion) {
        self.resolver.set_fusion(fusion);
    }

    /// Approximate heap bytes of the resolver index.
    pub fn index_bytes(&self) -> usize {
        self.resolver.memory_bytes()
    }

    /// Approximate heap bytes of the rows themselves (the resolver's index apart).
    pub fn rows_bytes(&self) -> usize {
        self.rows_bytes
    }
}

/// What one row costs the catalogue: the row ([`Row::heap_bytes`]), its `Arc`'s counts, and
/// its entry in the set of rows (B-tree nodes at about two-thirds full).
fn entry_bytes(row: &Row) -> usize {
    row.heap_bytes() + 16 + std::mem::size_of::<Arc<Row>>() * 3 / 2
}

/// The rows in key order, each found by its own key: a set of the rows rather than a map
/// from a copy of the key (at a million rows, about 60 bytes a row less).
#[derive(Debug, Default)]
struct Rows(BTreeSet<Keyed>);

/// A row, ordered and found by its key.
#[derive(Debug, Clone)]
struct Keyed(Arc<Row>);

impl Borrow<str> for Keyed {
    fn borrow(&self) -> &str {
        &self.0.key
    }
}

impl PartialEq for Keyed {
    fn eq(&self, other: &Self) -> bool {
        self.0.key == other.0.key
    }
}

impl Eq for Keyed {}

impl PartialOrd for Keyed {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Keyed {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.key.cmp(&other.0.key)
    }
}

impl Rows {
    fn get(&self, key: &str) -> Option<&Arc<Row>> {
        self.0.get(key).map(|k| &k.0)
    }

    /// Inserts `row`, replacing the row with its key.
    fn insert(&mut self, row: Arc<Row>) {
        self.0.replace(Keyed(row));
    }

    fn remove(&mut self, key: &str) -> Option<Arc<Row>> {
        self.0.take(key).map(|k| k.0)
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every row in key order.
    fn iter(&self) -> impl DoubleEndedIterator<Item = &Arc<Row>> {
        self.0.iter().map(|k| &k.0)
    }

    /// The rows from `start` on, in key order.
    fn after<'a>(&'a self, start: std::ops::Bound<&str>) -> impl Iterator<Item = &'a Arc<Row>> {
        self.0
            .range::<str, _>((start, std::ops::Bound::Unbounded))
            .map(|k| &k.0)
    }
}

/// The synonym groups in the payload of the [`SYNONYMS_KEY`] row. An empty payload means no
/// groups; anything but a JSON array of arrays of strings is logged and means no groups, so
/// a typo by the operator never takes ask down (the built-in groups still apply).
fn operator_synonyms(row: &Row) -> Vec<Vec<String>> {
    let payload = row.docs().payload.trim();
    if payload.is_empty() {
        return Vec::new();
    }
    match serde_json::from_str::<Vec<Vec<String>>>(payload) {
        Ok(groups) => groups,
        Err(error) => {
            tracing::warn!(
                key = SYNONYMS_KEY,
                version = row.version,
                %error,
                "operator synonyms are not a JSON array of word groups; using built-in synonyms only"
            );
            Vec::new()
        }
    }
}

/// Logs and counts a row the resolver could not index whole. Publishing runs inside the
/// state machine's apply and again at every start, on every node: a panic here would be a
/// crash loop of the whole cluster, so the row stays stored and readable, askable as far
/// as the index allows, and the operator hears of it.
fn unpublishable(key: &str, version: u64, outcome: Result<(), resolver::Inconsistent>) {
    if let Err(error) = outcome {
        tracing::error!(key, version, %error, "a row could not be indexed whole; it stays stored");
        metrics::counter!(crate::metrics::ROWS_UNPUBLISHABLE_TOTAL).increment(1);
    }
}

/// Hands the resolver what it indexes of a row.
fn index_row(
    resolver: &mut Resolver,
    row: &Row,
    views: &[&[f32]],
) -> Result<(), resolver::Inconsistent> {
    let docs = row.docs();
    let doc = docs
        .fields
        .iter()
        .filter(|(field, _)| *field != "WHAT")
        .map(|(_, value)| *value)
        .collect::<Vec<_>>()
        .join("\n");
    let args = row
        .args_schema
        .as_ref()
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
        .map(|props| {
            props
                .iter()
                .map(|(name, prop)| {
                    let description = prop
                        .get("description")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    (name.as_str(), description)
                })
                .collect()
        })
        .unwrap_or_default();
    resolver.insert_embedded(
        &Document {
            key: &row.key,
            category: &row.category,
            what: docs.what(),
            doc: &doc,
            args,
            pins: &row.pins,
            demote: row.demote,
        },
        views,
    )
}

/// The text a model embeds for a row (see [`semantic::embed_text`]).
pub fn embed_text(row: &Row) -> String {
    semantic::embed_text(
        &row.key,
        &row.category,
        &row.content,
        row.args_schema.as_deref(),
    )
}

/// The texts a model embeds for a row, one per side it is seen from (see
/// [`semantic::embed_views`]).
pub fn embed_views(row: &Row) -> Vec<String> {
    semantic::embed_views(
        &row.key,
        &row.category,
        &row.content,
        row.args_schema.as_deref(),
    )
}

/// The catalogue shared between the state machine (writer) and the handlers (readers),
/// with the applied index it shows.
#[derive(Clone, Default)]
pub struct SharedCatalogue {
    rows: Arc<RwLock<Catalogue>>,
    /// The index of the last entry the catalogue shows; set by the state machine while it
    /// holds the write lock, so a reader holding a read guard sees the index of exactly what
    /// it reads, and one reading it after the catalogue sees an index at least as new.
    index: Arc<AtomicU64>,
}

impl SharedCatalogue {
    /// Read access. A poisoned lock is recovered: the catalogue is rebuilt from storage on
    /// restart, and readers must keep serving.
    pub fn read(&self) -> RwLockReadGuard<'_, Catalogue> {
        self.rows
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Write access (the state machine only).
    pub fn write(&self) -> RwLockWriteGuard<'_, Catalogue> {
        self.rows
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The index of the last applied entry the catalogue shows.
    pub fn index(&self) -> u64 {
        self.index.load(Ordering::Acquire)
    }

    /// Sets [`SharedCatalogue::index`]; the state machine calls it while holding the
    /// write guard of the changes up to `index`.
    pub fn publish_index(&self, index: u64) {
        self.index.store(index, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::row::RowType;
    use super::*;

    fn row(key: &str, content: &str) -> Row {
        Row {
            category: "Operations".into(),
            ..Row::fixture(key, RowType::Static, content)
        }
    }

    fn keys(catalogue: &Catalogue, query: &str) -> Vec<String> {
        catalogue
            .ask(query, 10)
            .into_iter()
            .map(|(hit, _)| hit.key.to_string())
            .collect()
    }

    fn catalogue() -> Catalogue {
        let mut c = Catalogue::default();
        c.put(row("KUBE_SCALE", "# WHAT: Scale a kubernetes deployment\n"));
        c.put(row(
            "DEPLOY_LOG",
            "# WHAT: Deployment log of the deployment pipeline\n",
        ));
        c
    }

    const SYNONYMS: &str = "# WHAT: Operator synonyms\n\n[[\"k8s\", \"kubernetes\"]]\n";

    #[test]
    fn rows_are_found_replaced_removed_and_paged_by_their_own_key() {
        let mut c = Catalogue::default();
        for key in ["B_ROW", "A_ROW", "C_ROW"] {
            c.put(row(key, "# WHAT: First\n"));
        }
        c.put(row("B_ROW", "# WHAT: Second\n"));
        assert_eq!(c.len(), 3, "a put of a key already there replaces its row");
        assert_eq!(c.get("B_ROW").unwrap().content, "# WHAT: Second\n");
        let all: Vec<String> = c.all_rows().iter().map(|r| r.key.clone()).collect();
        assert_eq!(all, ["A_ROW", "B_ROW", "C_ROW"]);
        let (page, next) = c.page(None, Some("A_ROW"), 1);
        assert_eq!(page[0].key, "B_ROW");
        assert_eq!(next.as_deref(), Some("B_ROW"));
        let (page, next) = c.page(None, next.as_deref(), 5);
        assert_eq!(page.len(), 1);
        assert_eq!(page[0].key, "C_ROW");
        assert_eq!(next, None);
        assert_eq!(c.remove("B_ROW").unwrap().content, "# WHAT: Second\n");
        assert!(c.get("B_ROW").is_none());
        assert!(c.remove("B_ROW").is_none());
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn the_rows_bytes_follow_the_rows_through_puts_replacements_and_removals() {
        let mut c = Catalogue::default();
        assert_eq!(c.rows_bytes(), 0);
        let short = "# WHAT: Scale a deployment\n";
        let long = format!(
            "# WHAT: Scale a deployment\n\n{}\n",
            "Payload. ".repeat(500)
        );
        for i in 0..10 {
            c.put(row(&format!("ROW_{i}"), short));
        }
        let ten = c.rows_bytes();
        assert!(ten > 10 * short.len(), "{ten}");
        let mut schema = row("ROW_0", short);
        schema.args_schema = Some(Box::new(serde_json::json!({
            "type": "object",
            "properties": {"replicas": {"type": "integer", "description": "How many to run"}}
        })));
        c.put(schema);
        assert!(c.rows_bytes() > ten, "a schema is counted");
        c.put(row("ROW_0", &long));
        assert!(
            c.rows_bytes() >= ten + long.len() - short.len(),
            "a replacement counts its new size"
        );
        c.put(row("ROW_0", short));
        assert_eq!(c.rows_bytes(), ten, "and no longer the old one");
        for i in 0..10 {
            c.remove(&format!("ROW_{i}"));
        }
        assert_eq!(c.rows_bytes(), 0);
        c.put(row("ROW_0", short));
        c.replace_all(Vec::new());
        assert_eq!(c.rows_bytes(), 0);
    }

    #[test]
    fn synonyms_row_changes_ranking_and_deleting_it_restores_it() {
        let mut c = catalogue();
        assert!(keys(&c, "k8s").is_empty());
        let before = keys(&c, "k8s deployment");
        assert_eq!(before.first().map(String::as_str), Some("DEPLOY_LOG"));

        c.put(row(SYNONYMS_KEY, SYNONYMS));
        assert_eq!(keys(&c, "k8s"), ["KUBE_SCALE"]);
        let with = keys(&c, "k8s deployment");
        assert_eq!(with.first().map(String::as_str), Some("KUBE_SCALE"));

        assert!(c.remove(SYNONYMS_KEY).is_some());
        assert!(keys(&c, "k8s").is_empty());
        assert_eq!(keys(&c, "k8s deployment"), before);
    }

    #[test]
    fn synonyms_survive_replace_all_and_follow_enabled() {
        let mut c = catalogue();
        let mut rows: Vec<Row> = c.all_rows().iter().map(|r| (**r).clone()).collect();
        rows.push(row(SYNONYMS_KEY, SYNONYMS));
        c.replace_all(rows.clone());
        assert_eq!(keys(&c, "k8s"), ["KUBE_SCALE"]);

        let mut disabled = row(SYNONYMS_KEY, SYNONYMS);
        disabled.enabled = false;
        c.put(disabled);
        assert!(keys(&c, "k8s").is_empty());

        // A snapshot without the row resets the operator groups.
        rows.pop();
        c.put(row(SYNONYMS_KEY, SYNONYMS));
        c.replace_all(rows);
        assert!(keys(&c, "k8s").is_empty());
    }

    #[test]
    fn malformed_synonyms_keep_built_ins_only() {
        let mut c = catalogue();
        c.put(row(SYNONYMS_KEY, SYNONYMS));
        c.put(row(
            SYNONYMS_KEY,
            "# WHAT: Operator synonyms\n\n{\"k8s\": \"kubernetes\"}",
        ));
        assert!(keys(&c, "k8s").is_empty());
        // The built-in groups still apply: "modify" reaches "edit".
        c.put(row("EDIT_NOTE", "# WHAT: Edit a note\n"));
        assert_eq!(keys(&c, "modify note"), ["EDIT_NOTE"]);
    }

    #[test]
    fn synonyms_row_is_never_a_candidate() {
        let mut c = catalogue();
        c.put(row(SYNONYMS_KEY, SYNONYMS));
        assert!(c.get(SYNONYMS_KEY).is_some());
        assert_eq!(c.counts().rows_total, 3);
        for query in ["operator synonyms", "rowcall synonyms", "kubernetes"] {
            assert!(
                !keys(&c, query).iter().any(|k| k == SYNONYMS_KEY),
                "{query}"
            );
        }
    }

    #[test]
    fn words_that_led_to_a_row_are_learned_capped_and_forgotten_when_their_receipts_go() {
        let mut c = catalogue();
        c.put(row("PARCEL_TRACK", "# WHAT: Track a parcel on its way\n"));
        c.put(row("BEAUTY_SHOP", "# WHAT: Buy beauty products\n"));
        assert_eq!(keys(&c, "glamour"), Vec::<String>::new());
        c.learn("PARCEL_TRACK", "where is my glamour box", 1);
        let hits = c.ask("glamour", 5);
        assert_eq!(hits.len(), 1);
        assert_eq!(&*hits[0].0.key, "PARCEL_TRACK");
        assert_eq!(hits[0].0.learned, ["glamour"]);
        assert!(hits[0].0.matched.is_empty());

        // Many clicks still cannot bury a clear match of the words themselves.
        for _ in 0..1_000 {
            c.learn("PARCEL_TRACK", "beauty products", 1);
        }
        assert_eq!(keys(&c, "buy beauty products")[0], "BEAUTY_SHOP");
        // ...but they lift the row among the candidates for those words.
        assert!(keys(&c, "beauty").contains(&"PARCEL_TRACK".to_owned()));

        c.learn("PARCEL_TRACK", "where is my glamour box", -1);
        assert!(keys(&c, "glamour").is_empty());
        // Turned off, nothing is learned and what was is forgotten.
        c.set_learning(false);
        c.learn("PARCEL_TRACK", "where is my glamour box", 1);
        assert!(keys(&c, "glamour").is_empty());
        assert!(!keys(&c, "beauty").contains(&"PARCEL_TRACK".to_owned()));
    }
}
