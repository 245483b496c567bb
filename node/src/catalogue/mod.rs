//! The in-memory view of the applied directory: rows by key, the four counts, and the
//! resolver index. The state machine updates it as entries are applied; HTTP handlers read it.

pub mod demo;
pub mod resolver;
pub mod row;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use self::resolver::{Document, Hit, Resolver};
use self::row::Row;

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
    rows: BTreeMap<String, Arc<Row>>,
    counts: Counts,
    resolver: Resolver,
}

impl Catalogue {
    /// The row stored under `key`.
    pub fn get(&self, key: &str) -> Option<Arc<Row>> {
        self.rows.get(key).cloned()
    }

    /// Inserts or replaces a row, keeping counts and the resolver current.
    pub fn put(&mut self, row: Row) {
        if let Some(old) = self.rows.get(&row.key) {
            self.counts.add(&old.clone(), -1);
        }
        self.counts.add(&row, 1);
        if row.suggestible() {
            index_row(&mut self.resolver, &row);
        } else {
            self.resolver.remove(&row.key);
        }
        self.rows.insert(row.key.clone(), Arc::new(row));
    }

    /// Removes a row; returns it if it was there.
    pub fn remove(&mut self, key: &str) -> Option<Arc<Row>> {
        let old = self.rows.remove(key)?;
        self.counts.add(&old, -1);
        self.resolver.remove(key);
        Some(old)
    }

    /// Replaces everything (start-up and snapshot install): one full rebuild.
    pub fn replace_all(&mut self, rows: impl IntoIterator<Item = Row>) {
        *self = Self::default();
        for row in rows {
            self.put(row);
        }
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

    /// Ranked candidates for a plain-language request: suggestible rows only.
    pub fn ask(&self, query: &str, limit: usize) -> Vec<(Hit, Arc<Row>)> {
        self.resolver
            .search(query, limit)
            .into_iter()
            .filter_map(|hit| {
                let row = self.rows.get(&*hit.key)?.clone();
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
        let start = match after {
            Some(key) => Bound::Excluded(key.to_owned()),
            None => Bound::Unbounded,
        };
        let mut matching = self
            .rows
            .range((start, Bound::Unbounded))
            .map(|(_, row)| row)
            .filter(|row| category.is_none_or(|c| row.category.eq_ignore_ascii_case(c)));
        let page: Vec<Arc<Row>> = matching.by_ref().take(limit).cloned().collect();
        let next = match (page.last(), matching.next()) {
            (Some(last), Some(_)) => Some(last.key.clone()),
            _ => None,
        };
        (page, next)
    }

    /// Every row, in key order (for snapshots).
    pub fn all_rows(&self) -> Vec<Arc<Row>> {
        self.rows.values().cloned().collect()
    }

    /// Approximate heap bytes of the resolver index.
    pub fn index_bytes(&self) -> usize {
        self.resolver.memory_bytes()
    }
}

/// Hands the resolver what it indexes of a row.
fn index_row(resolver: &mut Resolver, row: &Row) {
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
    resolver.insert(&Document {
        key: &row.key,
        category: &row.category,
        what: docs.what(),
        doc: &doc,
        args,
        pins: &row.pins,
        demote: row.demote,
    });
}

/// The catalogue shared between the state machine (writer) and the handlers (readers).
#[derive(Clone, Default)]
pub struct SharedCatalogue(Arc<RwLock<Catalogue>>);

impl SharedCatalogue {
    /// Read access. A poisoned lock is recovered: the catalogue is rebuilt from storage on
    /// restart, and readers must keep serving.
    pub fn read(&self) -> RwLockReadGuard<'_, Catalogue> {
        self.0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Write access (the state machine only).
    pub fn write(&self) -> RwLockWriteGuard<'_, Catalogue> {
        self.0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
