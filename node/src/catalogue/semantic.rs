//! The resolver's model on one node: row vectors computed once, kept, and handed to the
//! index as rows are applied; query vectors for ask.
//!
//! # Where row vectors come from
//!
//! Each node computes the vectors of the rows it applies; they are **not** replicated. A
//! vector is a function of the row's text and the model, so nodes with the same model
//! (`ModelInfo::fingerprint`) hold the same vectors and rank identically, and a Raft entry
//! or snapshot is no bigger for having a model (a vector is 1.5 KB against a row's few
//! hundred bytes; replicating them would triple what every write sends, and tie every
//! node's disk format to one model). The cost is that each node runs the model once per
//! distinct row text, and that a row another node wrote is askable by its words at once but
//! by meaning only once this node has embedded it (a background task, milliseconds per
//! row).
//!
//! The node that takes a write embeds its rows *before* proposing them
//! ([`Semantic::prepare`]), so when it applies them their vectors are there: an insert is
//! askable by meaning at once on the node that took it, as read-your-writes promises.
//!
//! Vectors are kept in the node's database (tree `embed-vectors`, keyed by the model's
//! fingerprint and the SHA-256 of the text), so a restart or a snapshot install re-indexes
//! from disk instead of running the model again. The tree is a cache: it is not part of the
//! state machine, snapshots or backups, and losing it costs only time.
//!
//! # Cleaning
//!
//! The cache keeps only vectors that a published row needs. The catalogue tells the model
//! of every change to a published row's texts ([`Semantic::published`]: a put, a replace, a
//! delete), and it counts the rows per text (rows can share a view's text, such as one
//! example or one argument with the same WHAT): the vector of a text no row has any more
//! is removed at once. A whole rebuild of the
//! catalogue (start, snapshot install) counts again from the rows and then sweeps the tree
//! of everything else, such as vectors of another model or of writes embedded before they
//! were proposed that never applied. A vector removed while a write with that text was on
//! its way is computed again: the tree is a cache.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::{oneshot, Notify, OwnedSemaphorePermit, Semaphore};

use super::embed::{EmbedError, Embedder};
use super::row::Docstring;
use super::SharedCatalogue;

/// Name of the sled tree holding row vectors.
pub const TREE: &str = "embed-vectors";
/// Rows embedded per pass of the background task.
const PASS: usize = 64;

/// The text a model embeds for a row: the key's words, the WHAT line, the category, the
/// other docstring values and the argument names, as sentences.
pub fn embed_text(key: &str, category: &str, content: &str, args_schema: Option<&Value>) -> String {
    whole_text(key, category, &Docstring::parse(content), args_schema)
}

/// [`embed_text`] of a docstring already parsed.
fn whole_text(
    key: &str,
    category: &str,
    docs: &Docstring<'_>,
    args_schema: Option<&Value>,
) -> String {
    let mut parts: Vec<String> = vec![words(key)];
    if let Some((_, what)) = docs.fields.iter().find(|(f, _)| *f == "WHAT") {
        parts.push((*what).to_owned());
    }
    if !category.is_empty() {
        parts.push(category.to_owned());
    }
    for (field, value) in &docs.fields {
        if !matches!(*field, "WHAT" | "ARGS") && !value.is_empty() {
            parts.push((*value).to_owned());
        }
    }
    let args: Vec<String> = args_schema
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
        .map(|props| props.keys().map(|k| words(k)).collect())
        .unwrap_or_default();
    if !args.is_empty() {
        parts.push(args.join(", "));
    }
    parts.join(". ")
}

/// The texts a model embeds for a row, one per side a request may see it from: first
/// [`embed_text`] (everything at once), then what the row does by its name's words, each
/// described argument with what the row does, and each example; at most [`MAX_VIEWS`]. A
/// request often reads like one argument or one example, not like the whole row, so a row
/// is as close to a request as its closest view (see `resolver::dense`).
pub fn embed_views(
    key: &str,
    category: &str,
    content: &str,
    args_schema: Option<&Value>,
) -> Vec<String> {
    let docs = Docstring::parse(content);
    let mut views = vec![whole_text(key, category, &docs, args_schema)];
    let what = docs.what();
    if !what.is_empty() {
        views.push(format!("{}. {what}", words(key)));
    }
    let properties = args_schema
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object);
    for (name, property) in properties.into_iter().flatten() {
        let Some(description) = property.get("description").and_then(Value::as_str) else {
            continue;
        };
        let description = description.trim();
        if !description.is_empty() {
            views.push(format!("{what}. {}: {description}", words(name)));
        }
    }
    for (field, value) in &docs.fields {
        if *field == "EXAMPLE" && !value.is_empty() {
            views.push((*value).to_owned());
        }
    }
    views.truncate(MAX_VIEWS);
    let mut seen = std::collections::HashSet::new();
    views.retain(|view| seen.insert(view.clone()));
    views
}

/// Views embedded per row at most: each is a vector in memory on every node, and a pass of
/// the model when the row is written.
pub const MAX_VIEWS: usize = 6;

/// `GET_USER_TOKEN`, `getUserToken`, `user-token.v2` → "get user token", "user token v2".
fn words(name: &str) -> String {
    let mut out = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if matches!(c, '_' | '-' | '.' | '/') {
            out.push(' ');
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower {
            out.push(' ');
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        out.extend(c.to_lowercase());
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// One row waiting for its views' vectors.
struct Pending {
    key: String,
    texts: Vec<String>,
}

/// An ask waiting for the model, and where its vector goes.
type WaitingAsk = (String, oneshot::Sender<Result<Arc<[f32]>, EmbedError>>);

/// Asks one pass of the model takes at most.
const ASK_BATCH: usize = 32;

/// The model, its kept vectors, and the rows waiting to be embedded.
pub struct Semantic {
    embedder: Arc<Embedder>,
    store: Store,
    queue: Mutex<Vec<Pending>>,
    wake: Notify,
    /// Row texts run through the model since the node started.
    computed: AtomicU64,
    /// Passes of the model over waiting asks since the node started.
    ask_passes: AtomicU64,
    /// Asks waiting for the model (see [`Semantic::embed_ask`]).
    asks: Mutex<Vec<WaitingAsk>>,
    /// Threads running the model over waiting asks: one per core, so a burst of asks
    /// queues for the model instead of filling the blocking pool with threads that share
    /// the cores.
    ask_runners: Arc<Semaphore>,
    /// Published rows per text (by store key); see "Cleaning".
    live: Mutex<HashMap<Vec<u8>, u32>>,
}

impl std::fmt::Debug for Semantic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semantic")
            .field("model", self.embedder.info())
            .finish_non_exhaustive()
    }
}

enum Store {
    Tree(sled::Tree),
    Memory(Mutex<HashMap<Vec<u8>, Arc<[f32]>>>),
}

impl Semantic {
    /// Vectors kept in `tree` (the node's database), or in memory when `None` (tests).
    pub fn new(embedder: Arc<Embedder>, tree: Option<sled::Tree>) -> Arc<Self> {
        Arc::new(Self {
            embedder,
            store: match tree {
                Some(tree) => Store::Tree(tree),
                None => Store::Memory(Mutex::default()),
            },
            queue: Mutex::default(),
            wake: Notify::new(),
            computed: AtomicU64::new(0),
            ask_passes: AtomicU64::new(0),
            asks: Mutex::default(),
            ask_runners: Arc::new(Semaphore::new(
                std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
            )),
            live: Mutex::default(),
        })
    }

    /// A published row's views went from the texts `old` to `new` (none: the row was
    /// absent, or is gone): counts the rows per text, and removes the kept vector of a text
    /// no published row has any more.
    pub fn published(&self, old: &[String], new: &[String]) {
        let keys_of = |texts: &[String]| -> Vec<Vec<u8>> {
            texts.iter().map(|text| self.store_key(text)).collect()
        };
        let (old, new) = (keys_of(old), keys_of(new));
        if old == new {
            return;
        }
        let mut live = lock(&self.live);
        for key in new {
            *live.entry(key).or_default() += 1;
        }
        for key in old {
            let left = live.get_mut(&key).map_or(0, |n| {
                *n = n.saturating_sub(1);
                *n
            });
            if left == 0 {
                live.remove(&key);
                self.forget(&key);
            }
        }
    }

    /// Forgets every count: the catalogue is about to publish all its rows again.
    pub fn recount(&self) {
        lock(&self.live).clear();
    }

    /// Removes every kept vector that no published row has (after a whole rebuild has
    /// counted them all); returns how many went.
    pub fn sweep(&self) -> usize {
        let live = lock(&self.live);
        let dead: Vec<Vec<u8>> = match &self.store {
            Store::Tree(tree) => tree
                .iter()
                .keys()
                .filter_map(Result::ok)
                .map(|k| k.to_vec())
                .filter(|k| !live.contains_key(k))
                .collect(),
            Store::Memory(map) => lock(map)
                .keys()
                .filter(|k| !live.contains_key(*k))
                .cloned()
                .collect(),
        };
        for key in &dead {
            self.forget(key);
        }
        dead.len()
    }

    /// Removes the kept vector of `text` unless a published row has that text.
    fn forget_unless_live(&self, text: &str) {
        let key = self.store_key(text);
        if !lock(&self.live).contains_key(&key) {
            self.forget(&key);
        }
    }

    fn forget(&self, key: &[u8]) {
        match &self.store {
            Store::Tree(tree) => {
                if let Err(error) = tree.remove(key) {
                    tracing::warn!(%error, "could not remove a row vector no row needs");
                }
            }
            Store::Memory(map) => {
                lock(map).remove(key);
            }
        }
    }

    pub fn embedder(&self) -> &Arc<Embedder> {
        &self.embedder
    }

    fn store_key(&self, text: &str) -> Vec<u8> {
        let mut key = self.embedder.info().vectors_id().into_bytes();
        key.extend_from_slice(&Sha256::digest(text.as_bytes()));
        key
    }

    fn kept(&self, text: &str) -> Option<Arc<[f32]>> {
        let key = self.store_key(text);
        match &self.store {
            Store::Tree(tree) => {
                let bytes = tree.get(key).ok().flatten()?;
                let v: Vec<f32> = bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect();
                (v.len() == self.embedder.dimensions()).then(|| v.into())
            }
            Store::Memory(map) => lock(map).get(&key).cloned(),
        }
    }

    fn keep(&self, text: &str, vector: &[f32]) {
        let key = self.store_key(text);
        match &self.store {
            Store::Tree(tree) => {
                let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
                if let Err(error) = tree.insert(key, bytes) {
                    tracing::warn!(%error, "could not keep a row vector; it will be computed again");
                }
            }
            Store::Memory(map) => {
                lock(map).insert(key, vector.into());
            }
        }
    }

    /// The vectors of the views `texts` of row `key` if every one is kept; otherwise the
    /// row is queued for the background task and `None` is returned (the row is askable by
    /// its words meanwhile).
    pub fn vectors_for(&self, key: &str, texts: Vec<String>) -> Option<Vec<Arc<[f32]>>> {
        if let Some(vectors) = self.all_kept(&texts) {
            return Some(vectors);
        }
        lock(&self.queue).push(Pending {
            key: key.to_owned(),
            texts,
        });
        self.wake.notify_one();
        None
    }

    /// The kept vectors of `texts`, if every one is kept.
    fn all_kept(&self, texts: &[String]) -> Option<Vec<Arc<[f32]>>> {
        texts.iter().map(|text| self.kept(text)).collect()
    }

    /// Embeds and keeps the texts that are not kept yet (blocking: run it off the async
    /// threads). The node taking a write calls it before proposing.
    pub fn prepare(&self, texts: &[String]) -> Result<(), EmbedError> {
        let missing: Vec<&str> = texts
            .iter()
            .filter(|t| self.kept(t).is_none())
            .map(String::as_str)
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let vectors = self.embedder.embed_documents(&missing)?;
        for (text, v) in missing.iter().zip(&vectors) {
            self.keep(text, v);
        }
        metrics::counter!(crate::metrics::ROWS_EMBEDDED_TOTAL).increment(missing.len() as u64);
        self.computed
            .fetch_add(missing.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// The vector of an ask: from the LRU at once, else from the model on a blocking
    /// thread.
    ///
    /// Asks that wait for the model share its passes: a free runner (one per core) takes
    /// every ask waiting (up to [`ASK_BATCH`]) and runs them in one pass, then takes those
    /// that came meanwhile, until none wait. A lone ask never waits for company; under load
    /// the weights are read once per pass instead of once per ask. A batched ask's vector is
    /// the one it gets alone ([`Embedder::embed_queries`]).
    pub async fn embed_ask(self: &Arc<Self>, ask: &str) -> Result<Arc<[f32]>, EmbedError> {
        if let Some(v) = self.embedder.cached_query(ask) {
            return Ok(v);
        }
        let (tx, rx) = oneshot::channel();
        lock(&self.asks).push((ask.to_owned(), tx));
        self.start_ask_runner();
        rx.await
            .map_err(|_| EmbedError::Run("the model's runner stopped".into()))?
    }

    /// Starts a runner over the waiting asks if a core is free (else a running one takes
    /// them when its pass ends).
    fn start_ask_runner(self: &Arc<Self>) {
        if let Ok(permit) = self.ask_runners.clone().try_acquire_owned() {
            self.spawn_pass(permit);
        }
    }

    /// Runs a runner's next pass on one of rayon's threads: the model's products share
    /// their work out over the pool, and a runner inside it keeps its shares when the other
    /// threads are busy (with other runners) instead of handing each over and sleeping
    /// until it is done. rayon aborts the process on a panic in a spawned job; a pass's is
    /// caught, and its asks are answered that the runner stopped.
    fn spawn_pass(self: &Arc<Self>, permit: OwnedSemaphorePermit) {
        let me = self.clone();
        rayon::spawn(move || {
            let pass = std::panic::AssertUnwindSafe(|| me.pass(permit));
            if std::panic::catch_unwind(pass).is_err() {
                tracing::error!("the model's ask runner panicked");
            }
        });
    }

    /// One pass over the waiting asks. The runner goes on in a new job rather than in a
    /// loop: a thread waiting for a share of its own product may take another runner's job
    /// meanwhile, and is then held for one pass, not for as long as asks keep coming.
    fn pass(self: &Arc<Self>, permit: OwnedSemaphorePermit) {
        let batch = take_front(&self.asks, ASK_BATCH);
        if !batch.is_empty() {
            self.answer(batch);
            return self.spawn_pass(permit);
        }
        drop(permit);
        // An ask queued between the drain and the release found every runner busy and
        // started none: it is this runner's, if no other took it.
        if !lock(&self.asks).is_empty() {
            self.start_ask_runner();
        }
    }

    /// Runs the model once over `batch` and sends each ask its vector.
    fn answer(&self, batch: Vec<WaitingAsk>) {
        let texts: Vec<&str> = batch.iter().map(|(text, _)| text.as_str()).collect();
        self.ask_passes.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(crate::metrics::ASK_PASSES_TOTAL).increment(1);
        metrics::counter!(crate::metrics::ASKS_EMBEDDED_TOTAL).increment(batch.len() as u64);
        match self.embedder.embed_queries(&texts) {
            Ok(vectors) => {
                for ((_, tx), vector) in batch.into_iter().zip(vectors) {
                    // The asker may have gone (its request was cancelled): nothing to do.
                    let _ = tx.send(Ok(vector));
                }
            }
            Err(e) => {
                let message = e.to_string();
                for (_, tx) in batch {
                    let _ = tx.send(Err(EmbedError::Run(message.clone())));
                }
            }
        }
    }

    /// Row texts run through the model since the node started (a restart finds the
    /// vectors it computed before in its database, and runs none again).
    pub fn computed(&self) -> u64 {
        self.computed.load(Ordering::Relaxed)
    }

    /// Rows waiting for their vectors.
    pub fn waiting(&self) -> usize {
        lock(&self.queue).len()
    }

    /// The background task: embeds queued rows and hands their vectors to the catalogue,
    /// unless the row changed meanwhile (then its new text is queued already).
    pub async fn run(self: Arc<Self>, catalogue: SharedCatalogue) {
        loop {
            let batch = take_front(&self.queue, PASS);
            if batch.is_empty() {
                self.wake.notified().await;
                continue;
            }
            let texts: Vec<String> = batch.iter().flat_map(|p| p.texts.clone()).collect();
            let me = self.clone();
            let prepared = tokio::task::spawn_blocking(move || me.prepare(&texts)).await;
            match prepared {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    tracing::error!(%error, rows = batch.len(), "embedding rows failed; they stay askable by their words");
                    continue;
                }
                Err(error) => {
                    tracing::error!(%error, "the embedding task stopped");
                    continue;
                }
            }
            let mut c = catalogue.write();
            for p in &batch {
                let current = c.get(&p.key).map(|row| super::embed_views(&row));
                if current.as_ref() == Some(&p.texts) {
                    if let Some(vectors) = self.all_kept(&p.texts) {
                        let views: Vec<&[f32]> = vectors.iter().map(|v| &**v).collect();
                        c.set_views(&p.key, &views);
                    }
                } else {
                    // The row changed or went while it was embedded.
                    for text in &p.texts {
                        self.forget_unless_live(text);
                    }
                }
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The oldest `n` items of a queue (fewer if it holds fewer), taken out of it.
fn take_front<T>(queue: &Mutex<Vec<T>>, n: usize) -> Vec<T> {
    let mut queue = lock(queue);
    let n = queue.len().min(n);
    queue.drain(..n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::embed::{tiny, QueryMode};
    use crate::catalogue::row::{Row, RowType};
    use crate::catalogue::Catalogue;

    fn row(key: &str, what: &str) -> Row {
        Row {
            category: "Operations".into(),
            ..Row::fixture(key, RowType::Static, &format!("# WHAT: {what}\n"))
        }
    }

    fn semantic(dir: &std::path::Path, tree: Option<sled::Tree>) -> Arc<Semantic> {
        tiny::write(dir, &["weather", "forecast", "invoice", "pay", "rain"], 3).unwrap();
        Semantic::new(
            Arc::new(Embedder::load(dir, QueryMode::Model).unwrap()),
            tree,
        )
    }

    /// A model whose vectors are kept in a sled tree, and a catalogue that uses it (the
    /// folder holds both; keep it while they are used).
    fn kept_in_a_tree() -> (tempfile::TempDir, sled::Tree, Arc<Semantic>, Catalogue) {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::open(dir.path().join("db")).unwrap();
        let tree = db.open_tree(TREE).unwrap();
        let s = semantic(&dir.path().join("m"), Some(tree.clone()));
        let mut c = Catalogue::default();
        c.set_semantic(s.clone());
        (dir, tree, s, c)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn asks_waiting_for_the_model_share_one_pass_and_get_their_own_vectors() {
        let dir = tempfile::tempdir().unwrap();
        let s = semantic(dir.path(), None);
        let asks: Vec<String> = (0..12).map(|i| format!("weather forecast {i}")).collect();
        let alone: Vec<Arc<[f32]>> = asks
            .iter()
            .map(|a| s.embedder.embed_query_with(a, QueryMode::Model).unwrap())
            .collect();
        // Every runner busy: the asks queue.
        let busy = s
            .ask_runners
            .clone()
            .acquire_many_owned(s.ask_runners.available_permits() as u32)
            .await
            .unwrap();
        let waiting: Vec<_> = asks
            .iter()
            .map(|a| {
                let (s, a) = (s.clone(), a.clone());
                tokio::spawn(async move { s.embed_ask(&a).await })
            })
            .collect();
        while lock(&s.asks).len() < asks.len() {
            tokio::task::yield_now().await;
        }
        let passes = s.ask_passes.load(Ordering::Relaxed);
        // A runner freed: it takes every waiting ask in one pass.
        drop(busy);
        s.start_ask_runner();
        for (task, want) in waiting.into_iter().zip(&alone) {
            let got = task.await.unwrap().unwrap();
            assert_eq!(&got, want, "a batched ask got another vector than alone");
        }
        assert_eq!(s.ask_passes.load(Ordering::Relaxed) - passes, 1);
        assert!(lock(&s.asks).is_empty());
        // A lone ask, nothing waiting: answered at once in a pass of its own.
        let lone = s.embed_ask("rain tomorrow").await.unwrap();
        assert_eq!(
            lone,
            s.embedder
                .embed_query_with("rain tomorrow", QueryMode::Model)
                .unwrap()
        );
        assert_eq!(s.ask_passes.load(Ordering::Relaxed) - passes, 2);
    }

    #[test]
    fn embed_text_reads_key_words_what_category_docs_and_argument_names() {
        let schema = serde_json::json!({"properties": {"cityName": {}, "days_ahead": {}}});
        let text = embed_text(
            "WEATHER_FORECAST",
            "Weather",
            "# WHAT: Forecast for a city\n# RETURNS: daily highs\n# ARGS: cityName\n\n{}",
            Some(&schema),
        );
        assert_eq!(
            text,
            "weather forecast. Forecast for a city. Weather. daily highs. city name, days ahead"
        );
    }

    #[test]
    fn embed_views_sees_a_row_whole_by_what_it_does_by_each_argument_and_example() {
        let schema = serde_json::json!({"properties": {
            "cityName": {"description": "The city, e.g. Lisbon"},
            "days": {"description": " "},
            "units": {}
        }});
        let views = embed_views(
            "WEATHER_FORECAST",
            "Weather",
            "# WHAT: Forecast for a city
# EXAMPLE: will it rain in Porto

{}",
            Some(&schema),
        );
        assert_eq!(
            views,
            [
                "weather forecast. Forecast for a city. Weather. will it rain in Porto. city \
                 name, days, units",
                "weather forecast. Forecast for a city",
                "Forecast for a city. city name: The city, e.g. Lisbon",
                "will it rain in Porto",
            ]
        );
        // A row with nothing but a key is seen from one side; views never repeat.
        assert_eq!(embed_views("PING", "", "", None), ["ping"]);
        let properties: serde_json::Map<String, Value> = (0..20)
            .map(|i| {
                (
                    format!("a{i:02}"),
                    serde_json::json!({"description": format!("arg {i}")}),
                )
            })
            .collect();
        let schema = serde_json::json!({ "properties": properties });
        let views = embed_views("MANY", "", "# WHAT: x\n", Some(&schema));
        assert_eq!(views.len(), MAX_VIEWS);
        assert_eq!(views[2], "x. a00: arg 0");
    }

    #[test]
    fn a_row_is_queued_until_embedded_then_indexed_with_its_vector() {
        let dir = tempfile::tempdir().unwrap();
        let s = semantic(dir.path(), None);
        let mut c = Catalogue::default();
        c.set_semantic(s.clone());
        c.put(row("WEATHER_NOW", "Current weather and rain"));
        assert!(!c.has_vector("WEATHER_NOW"));
        assert_eq!(s.waiting(), 1);

        s.prepare(&crate::catalogue::embed_views(
            &c.get("WEATHER_NOW").unwrap(),
        ))
        .unwrap();
        assert_eq!(s.computed(), 2, "the row whole, and what it does");
        c.put(row("WEATHER_NOW", "Current weather and rain"));
        assert!(c.has_vector("WEATHER_NOW"));
        // Prepared texts are not run again.
        s.prepare(&crate::catalogue::embed_views(
            &c.get("WEATHER_NOW").unwrap(),
        ))
        .unwrap();
        assert_eq!(s.computed(), 2);
        // A changed row loses its old vector until its new text is embedded.
        c.put(row("WEATHER_NOW", "Current weather, rain and wind"));
        assert!(!c.has_vector("WEATHER_NOW"));
        // A snapshot install (replace_all) keeps the model and finds kept vectors (the text
        // changed back, and its vector, removed with the old text, is embedded again).
        c.put(row("WEATHER_NOW", "Current weather and rain"));
        s.prepare(&crate::catalogue::embed_views(
            &c.get("WEATHER_NOW").unwrap(),
        ))
        .unwrap();
        let rows: Vec<Row> = c.all_rows().iter().map(|r| (**r).clone()).collect();
        c.replace_all(rows);
        assert!(c.semantic().is_some());
        assert!(c.has_vector("WEATHER_NOW"));
    }

    #[test]
    fn vectors_of_replaced_and_deleted_rows_leave_the_cache() {
        let (_dir, tree, s, mut c) = kept_in_a_tree();
        let embedded = |r: &Row| {
            s.prepare(&crate::catalogue::embed_views(r)).unwrap();
        };
        let (first, second) = (
            row("WEATHER_NOW", "Current weather and rain"),
            row("WEATHER_NOW", "Current weather, rain and wind"),
        );
        embedded(&first);
        c.put(first.clone());
        assert_eq!(tree.len(), 2, "the row whole, and what it does");
        embedded(&second);
        c.put(second.clone());
        for text in crate::catalogue::embed_views(&first) {
            assert!(
                s.kept(&text).is_none(),
                "the replaced text's vector is gone"
            );
        }
        assert_eq!(tree.len(), 2);
        c.remove_at("WEATHER_NOW", 3);
        assert_eq!(
            tree.len(),
            0,
            "the cache is empty once no row needs a vector"
        );
        // A whole rebuild sweeps what no row needs (a write embedded but never applied).
        embedded(&row("ORPHAN", "Pay an invoice"));
        embedded(&first);
        c.replace_all([first]);
        assert_eq!(tree.len(), 2);
        assert!(c.has_vector("WEATHER_NOW"));
    }

    #[test]
    fn a_view_two_rows_share_stays_kept_until_neither_has_it() {
        let (_dir, tree, s, mut c) = kept_in_a_tree();
        let content = "# WHAT: Weather\n# EXAMPLE: will it rain\n";
        let (a, b) = (
            Row::fixture("RAIN_A", RowType::Static, content),
            Row::fixture("RAIN_B", RowType::Static, content),
        );
        for r in [&a, &b] {
            s.prepare(&crate::catalogue::embed_views(r)).unwrap();
            c.put(r.clone());
        }
        assert!(c.has_vector("RAIN_A") && c.has_vector("RAIN_B"));
        assert_eq!(
            tree.len(),
            5,
            "two views of each row's own, one example of both"
        );
        c.remove_at("RAIN_A", 5);
        assert!(
            s.kept("will it rain").is_some(),
            "RAIN_B still has the example"
        );
        assert_eq!(tree.len(), 3);
        c.remove_at("RAIN_B", 6);
        assert_eq!(tree.len(), 0);
    }

    #[test]
    fn vectors_kept_in_the_database_outlive_the_process() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::open(dir.path().join("db")).unwrap();
        let text = "weather forecast. Forecast for a city".to_owned();
        {
            let s = semantic(&dir.path().join("m"), Some(db.open_tree(TREE).unwrap()));
            s.prepare(std::slice::from_ref(&text)).unwrap();
            assert_eq!(s.computed(), 1);
        }
        let s = semantic(&dir.path().join("m"), Some(db.open_tree(TREE).unwrap()));
        s.prepare(std::slice::from_ref(&text)).unwrap();
        assert_eq!(s.computed(), 0, "the kept vector was computed again");
        assert!(s.kept(&text).is_some());
    }

    #[test]
    fn a_row_no_word_matches_is_found_by_meaning_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let s = semantic(dir.path(), None);
        let mut c = Catalogue::default();
        c.set_semantic(s.clone());
        let rows = [
            row("WEATHER_NOW", "Current weather and rain"),
            row("PAY_INVOICE", "Pay an invoice"),
        ];
        let texts: Vec<String> = rows
            .iter()
            .flat_map(crate::catalogue::embed_views)
            .collect();
        s.prepare(&texts).unwrap();
        for r in rows {
            c.put(r);
        }
        let query = "zzqx wobble";
        assert!(
            c.ask(query, 5).is_empty(),
            "no word of the query is indexed"
        );
        let v = s.embedder().embed_query(query).unwrap();
        let hits = c.ask_with(query, Some(&v), 5);
        assert!(!hits.is_empty());
        assert!(hits.iter().all(|(h, _)| h.similar && h.matched.is_empty()));
        // A word match is still named, not called "similar meaning".
        let v = s.embedder().embed_query("pay").unwrap();
        let hits = c.ask_with("pay", Some(&v), 5);
        assert_eq!(&*hits[0].0.key, "PAY_INVOICE");
        assert_eq!(hits[0].0.matched, ["pay"]);
        assert!(!hits[0].0.similar);
    }
}
