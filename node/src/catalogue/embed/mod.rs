//! Sentence embeddings for the resolver: a BERT-style model (all-MiniLM-L6-v2 and its
//! relatives) loaded from a local folder and run in the node with candle.
//!
//! A model folder is what sentence-transformers writes: `config.json`, `tokenizer.json`,
//! `model.safetensors`, optionally `sentence_bert_config.json` (the input length) and
//! `1_Pooling/config.json` (mean pooling, or the `[CLS]` token's) and
//! `config_sentence_transformers.json` (the prompts put before queries and documents).
//!
//! Rows are embedded with the full model. Queries are embedded one of two ways
//! ([`QueryMode`]):
//! - **model** (the default): the full forward pass, as rows get. A short ask costs about
//!   15-20 ms of one CPU core for MiniLM-L6 (the product is bound by reading the 44 MB of
//!   weights, not by arithmetic).
//! - **static**: every vocabulary token was run through the model once, alone
//!   between `[CLS]` and `[SEP]` (a distillation in the manner of Model2Vec), and a query is
//!   the mean of its tokens' vectors. Microseconds per query, no matrix product on the ask
//!   path. The vectors are computed at the first load and kept beside the model as
//!   `static-vectors.safetensors` (when the folder is writable; otherwise recomputed at
//!   each start). The token vectors are centred (their common mean removed). Far less
//!   accurate than the model on paraphrases (see the README's resolver section).
//!
//! Either way recent query vectors are kept in a small LRU, so an agent repeating a request
//! pays nothing.

mod bert;
mod int8;
pub(crate) use int8::ExactDot;
pub mod tiny;

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use candle_core::{DType, Device, Tensor};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};
use utoipa::ToSchema;

pub use bert::BertConfig;
use bert::{Bert, Pooling};

/// File name of the distilled token vectors inside a model folder.
pub const STATIC_FILE: &str = "static-vectors.safetensors";
/// Rows embedded per forward pass.
const BATCH: usize = 16;
/// Sequences per forward pass while distilling token vectors (each three tokens long).
const DISTILL_BATCH: usize = 512;
/// Query vectors kept in the LRU.
const QUERY_CACHE: usize = 4_096;

/// How a query becomes a vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, Default)]
#[serde(rename_all = "lowercase")]
pub enum QueryMode {
    /// The full model.
    #[default]
    Model,
    /// The mean of distilled token vectors.
    Static,
}

impl std::str::FromStr for QueryMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "static" => Ok(Self::Static),
            "model" => Ok(Self::Model),
            other => Err(format!(
                "query embedding {other:?} is not one of: static, model"
            )),
        }
    }
}

/// How the encoder's linear layers hold their weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, Default)]
#[serde(rename_all = "lowercase")]
pub enum Weights {
    /// As the model folder has them.
    F32,
    /// Quantized once at load to 8-bit blocks (the layout of GGML's Q8_0): a quarter of the
    /// bytes each product reads, integer products. Vectors differ slightly from f32 ones, so
    /// row vectors are kept apart. The default: as good on the public sets and faster (see
    /// the ranking chapter, "Quantized weights").
    #[default]
    Q8,
}

impl std::str::FromStr for Weights {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "f32" => Ok(Self::F32),
            "q8" => Ok(Self::Q8),
            other => Err(format!("weights {other:?} is not one of: f32, q8")),
        }
    }
}

impl Weights {
    /// What a node that predates the setting used (f32): how a status or setup without
    /// `weights` is read.
    pub fn predating() -> Self {
        Self::F32
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::Q8 => "q8",
        }
    }
}

/// Why a model folder could not be used.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error("running the model: {0}")]
    Run(String),
}

impl From<candle_core::Error> for EmbedError {
    fn from(e: candle_core::Error) -> Self {
        EmbedError::Run(e.to_string())
    }
}

/// What `/api/cluster` and the contract say about the resolver's model.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct ModelInfo {
    /// The folder's name, e.g. `all-minilm-l6-v2`.
    pub name: String,
    /// First 16 hex digits of SHA-256 over the config, tokenizer and weights, and the
    /// pooling and prompts where they are not the defaults (mean pooling, no prompts):
    /// nodes with the same fingerprint and weights rank identically.
    pub fingerprint: String,
    /// Vector length.
    pub dimensions: usize,
    /// How queries are embedded.
    pub query: QueryMode,
    /// How the encoder holds its weights (`f32` from nodes that predate the setting).
    #[serde(default = "Weights::predating")]
    pub weights: Weights,
}

impl ModelInfo {
    /// What names the vectors this model computes: the fingerprint, and a `-q8` suffix for
    /// quantized weights (whose vectors are not the f32 ones), with a letter for each
    /// change of the 8-bit products' arithmetic (`g`: one f32 sum per product, block by
    /// block), so a node never reads vectors an older build computed otherwise.
    pub fn vectors_id(&self) -> String {
        match self.weights {
            Weights::F32 => self.fingerprint.clone(),
            Weights::Q8 => format!("{}-q8g", self.fingerprint),
        }
    }
}

/// The kernel 8-bit products run on this CPU (`avx512-vnni`, `avx2` or `portable`; all give
/// the same bits): q8 weights pay off with the first two; on `portable` (CPUs without AVX2,
/// such as ARM servers) f32 may be faster (the ranking chapter, "The AVX2 kernel").
pub fn int8_kernel() -> &'static str {
    int8::kernel_name()
}

/// A loaded model: embeds row texts and queries.
pub struct Embedder {
    bert: Bert,
    tokenizer: Tokenizer,
    info: ModelInfo,
    /// What goes before a query's and a row's text (the model's own prompts).
    prompts: Prompts,
    /// Distilled token vectors, `vocab × dimensions` (static query mode only).
    token_vectors: Option<Vec<f32>>,
    queries: Mutex<Lru>,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("info", &self.info)
            .finish()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, EmbedError> {
    std::fs::read(path).map_err(|source| EmbedError::Read {
        path: path.to_owned(),
        source,
    })
}

/// The model folder's sentence-transformers settings, with the prompts it was trained to
/// see before queries and documents.
const PROMPTS_FILE: &str = "config_sentence_transformers.json";

/// How the model pools its tokens: `1_Pooling/config.json` if the folder has one (mean
/// pooling otherwise, as MiniLM's folders always had).
fn read_pooling(path: &Path) -> Result<Pooling, EmbedError> {
    if !path.is_file() {
        return Ok(Pooling::Mean);
    }
    let value: serde_json::Value =
        serde_json::from_slice(&read(path)?).map_err(|e| invalid(path, e))?;
    let on = |mode: &str| value.get(mode) == Some(&serde_json::Value::Bool(true));
    if value.get("include_prompt") == Some(&serde_json::Value::Bool(false)) {
        return Err(invalid(
            path,
            "pooling that leaves the prompt's tokens out (include_prompt: false) is not supported",
        ));
    }
    let others = [
        "pooling_mode_max_tokens",
        "pooling_mode_mean_sqrt_len_tokens",
        "pooling_mode_weightedmean_tokens",
        "pooling_mode_lasttoken",
    ];
    match (on("pooling_mode_mean_tokens"), on("pooling_mode_cls_token")) {
        _ if others.iter().any(|m| on(m)) => {}
        (true, false) => return Ok(Pooling::Mean),
        (false, true) => return Ok(Pooling::Cls),
        _ => {}
    }
    Err(invalid(
        path,
        "only mean pooling (pooling_mode_mean_tokens) or the [CLS] token's \
         (pooling_mode_cls_token), one of them alone, is supported",
    ))
}

/// Text a model was trained to see before queries and documents (e5's `query: ` and
/// `passage: `), from the `prompts` of `config_sentence_transformers.json`: `query`, and
/// `document` or `passage`. Absent, nothing is added.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Prompts {
    query: String,
    document: String,
}

impl Prompts {
    fn read(path: &Path) -> Result<Self, EmbedError> {
        if !path.is_file() {
            return Ok(Self::default());
        }
        let value: serde_json::Value =
            serde_json::from_slice(&read(path)?).map_err(|e| invalid(path, e))?;
        let prompt = |names: &[&str]| -> Result<String, EmbedError> {
            for name in names {
                match value.get("prompts").and_then(|p| p.get(*name)) {
                    None | Some(serde_json::Value::Null) => continue,
                    Some(serde_json::Value::String(s)) => return Ok(s.clone()),
                    Some(_) => {
                        return Err(invalid(path, format!("prompts.{name} is not a string")))
                    }
                }
            }
            Ok(String::new())
        };
        Ok(Self {
            query: prompt(&["query"])?,
            document: prompt(&["document", "passage"])?,
        })
    }

    fn is_empty(&self) -> bool {
        self.query.is_empty() && self.document.is_empty()
    }

    fn query<'t>(&self, text: &'t str) -> Cow<'t, str> {
        Self::prefixed(&self.query, text)
    }

    fn document<'t>(&self, text: &'t str) -> Cow<'t, str> {
        Self::prefixed(&self.document, text)
    }

    fn prefixed<'t>(prompt: &str, text: &'t str) -> Cow<'t, str> {
        if prompt.is_empty() {
            Cow::Borrowed(text)
        } else {
            Cow::Owned(format!("{prompt}{text}"))
        }
    }
}

fn invalid(path: &Path, message: impl std::fmt::Display) -> EmbedError {
    EmbedError::Invalid {
        path: path.to_owned(),
        message: message.to_string(),
    }
}

impl Embedder {
    /// Loads the model in `dir` with f32 weights (see [`Embedder::load_with`]).
    pub fn load(dir: &Path, query: QueryMode) -> Result<Self, EmbedError> {
        Self::load_with(dir, query, Weights::F32)
    }

    /// Loads the model in `dir`, its linear layers in `weights`, distilling its token
    /// vectors for static queries if the folder does not hold them yet.
    pub fn load_with(dir: &Path, query: QueryMode, weights: Weights) -> Result<Self, EmbedError> {
        let config_path = dir.join("config.json");
        let config_bytes = read(&config_path)?;
        let config: BertConfig =
            serde_json::from_slice(&config_bytes).map_err(|e| invalid(&config_path, e))?;
        config.check().map_err(|e| invalid(&config_path, e))?;

        let pooling = read_pooling(&dir.join("1_Pooling").join("config.json"))?;
        let prompts = Prompts::read(&dir.join(PROMPTS_FILE))?;
        let mut max_len = config.max_position_embeddings;
        let st_config = dir.join("sentence_bert_config.json");
        if st_config.is_file() {
            let value: serde_json::Value =
                serde_json::from_slice(&read(&st_config)?).map_err(|e| invalid(&st_config, e))?;
            if let Some(n) = value.get("max_seq_length").and_then(|v| v.as_u64()) {
                max_len = max_len.min(n as usize);
            }
        }

        let tokenizer_path = dir.join("tokenizer.json");
        let tokenizer_bytes = read(&tokenizer_path)?;
        let mut tokenizer =
            Tokenizer::from_bytes(&tokenizer_bytes).map_err(|e| invalid(&tokenizer_path, e))?;
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_len,
                ..Default::default()
            }))
            .map_err(|e| invalid(&tokenizer_path, e))?;
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..Default::default()
        }));

        let weights_path = dir.join("model.safetensors");
        let weight_bytes = read(&weights_path)?;
        let mut hash = Sha256::new();
        for part in [&config_bytes, &tokenizer_bytes, &weight_bytes] {
            hash.update((part.len() as u64).to_be_bytes());
            hash.update(part);
        }
        // What else changes the vectors, hashed only where it is not the default, so a mean-
        // pooled model without prompts (MiniLM) keeps the fingerprint it always had.
        if pooling == Pooling::Cls {
            hash.update(b"pooling: cls");
        }
        if !prompts.is_empty() {
            for prompt in [&prompts.query, &prompts.document] {
                hash.update((prompt.len() as u64).to_be_bytes());
                hash.update(prompt.as_bytes());
            }
        }
        let fingerprint = hex::encode(&hash.finalize()[..8]);
        let bert = Bert::load(weight_bytes, &config, weights, pooling)
            .map_err(|e| invalid(&weights_path, e))?;

        let name = dir
            .canonicalize()
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "model".into());
        let mut embedder = Self {
            bert,
            tokenizer,
            info: ModelInfo {
                name,
                fingerprint,
                dimensions: config.hidden_size,
                query,
                weights,
            },
            prompts,
            token_vectors: None,
            queries: Mutex::new(Lru::new(QUERY_CACHE)),
        };
        if query == QueryMode::Static {
            let mut table = embedder.static_vectors(dir, config.vocab_size)?;
            center(&mut table, config.hidden_size);
            embedder.token_vectors = Some(table);
        }
        Ok(embedder)
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    pub fn dimensions(&self) -> usize {
        self.info.dimensions
    }

    /// Vectors of row texts, in order, with the full model.
    pub fn embed_documents(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        // Similar lengths share a batch, so little of each pass is padding.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts[i].len());
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        for chunk in order.chunks(BATCH) {
            let prompted: Vec<Cow<'_, str>> = chunk
                .iter()
                .map(|&i| self.prompts.document(texts[i]))
                .collect();
            let batch: Vec<&str> = prompted.iter().map(AsRef::as_ref).collect();
            for (&i, v) in chunk.iter().zip(self.run(&batch)?) {
                out[i] = v;
            }
        }
        Ok(out)
    }

    /// The vector of a query if it is in the LRU (no model run).
    pub fn cached_query(&self, text: &str) -> Option<Arc<[f32]>> {
        self.lock_queries().get(text)
    }

    /// The vector of a query, from the LRU or as [`QueryMode`] says.
    pub fn embed_query(&self, text: &str) -> Result<Arc<[f32]>, EmbedError> {
        Ok(self
            .embed_queries(&[text])?
            .pop()
            .unwrap_or_else(|| vec![0.0; self.dimensions()].into()))
    }

    /// The vectors of several queries, in order: from the LRU, or as [`QueryMode`] says,
    /// the model running once for all that miss it. Each vector is the one
    /// [`Embedder::embed_query`] gives the query alone.
    pub fn embed_queries(&self, texts: &[&str]) -> Result<Vec<Arc<[f32]>>, EmbedError> {
        let mut out: Vec<Option<Arc<[f32]>>> = {
            let mut lru = self.lock_queries();
            texts.iter().map(|t| lru.get(t)).collect()
        };
        let mut missing: Vec<&str> = texts
            .iter()
            .zip(&out)
            .filter(|(_, v)| v.is_none())
            .map(|(t, _)| *t)
            .collect();
        missing.sort_unstable();
        missing.dedup();
        if !missing.is_empty() {
            let mode = match self.token_vectors {
                Some(_) => QueryMode::Static,
                None => QueryMode::Model,
            };
            let vectors = self.queries_with(&missing, mode)?;
            let mut lru = self.lock_queries();
            for (text, vector) in missing.iter().zip(vectors) {
                lru.put(text, vector.clone());
                for (slot, _) in out.iter_mut().zip(texts).filter(|(_, t)| *t == text) {
                    *slot = Some(vector.clone());
                }
            }
        }
        Ok(out
            .into_iter()
            .map(|v| v.unwrap_or_else(|| vec![0.0; self.dimensions()].into()))
            .collect())
    }

    /// A query vector computed the other way than configured, bypassing the LRU (for
    /// evaluation: `mode=model` on a static node and the reverse).
    pub fn embed_query_with(&self, text: &str, mode: QueryMode) -> Result<Arc<[f32]>, EmbedError> {
        Ok(self
            .queries_with(&[text], mode)?
            .pop()
            .unwrap_or_else(|| vec![0.0; self.dimensions()].into()))
    }

    /// Query vectors, bypassing the LRU. With the model, the queries run together without
    /// padding, so a query's vector does not depend on what it ran with.
    fn queries_with(&self, texts: &[&str], mode: QueryMode) -> Result<Vec<Arc<[f32]>>, EmbedError> {
        if let (QueryMode::Static, Some(table)) = (mode, &self.token_vectors) {
            return texts
                .iter()
                .map(|t| Ok(self.static_query(table, t)?.into()))
                .collect();
        }
        let sequences = texts
            .iter()
            .map(|text| {
                let encoding = self
                    .tokenizer
                    .encode(self.prompts.query(text), true)
                    .map_err(|e| EmbedError::Run(e.to_string()))?;
                Ok(encoding
                    .get_ids()
                    .iter()
                    .zip(encoding.get_attention_mask())
                    .filter(|(_, &m)| m == 1)
                    .map(|(&id, _)| id)
                    .collect())
            })
            .collect::<Result<Vec<Vec<u32>>, EmbedError>>()?;
        Ok(self
            .bert
            .sequence_vectors(&sequences)?
            .into_iter()
            .map(Into::into)
            .collect())
    }

    fn lock_queries(&self) -> std::sync::MutexGuard<'_, Lru> {
        self.queries.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn run(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| EmbedError::Run(e.to_string()))?;
        let batch = encodings.len();
        let mut ids = Vec::new();
        let mut mask = Vec::new();
        for e in &encodings {
            ids.extend_from_slice(e.get_ids());
            mask.extend_from_slice(e.get_attention_mask());
        }
        Ok(self.bert.sentence_vectors(ids, mask, batch)?)
    }

    /// The token ids of `text`, without special tokens.
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>, EmbedError> {
        Ok(self
            .tokenizer
            .encode(text, false)
            .map_err(|e| EmbedError::Run(e.to_string()))?
            .get_ids()
            .to_vec())
    }

    /// The mean of the distilled vectors of the query's tokens, normalised.
    fn static_query(&self, table: &[f32], text: &str) -> Result<Vec<f32>, EmbedError> {
        let dim = self.dimensions();
        let mut v = vec![0.0f32; dim];
        for id in self.token_ids(text)? {
            let start = id as usize * dim;
            if let Some(row) = table.get(start..start + dim) {
                for (a, b) in v.iter_mut().zip(row) {
                    *a += b;
                }
            }
        }
        normalise(&mut v);
        Ok(v)
    }

    /// The distilled token vectors: read from the folder, or computed and written there.
    fn static_vectors(&self, dir: &Path, vocab: usize) -> Result<Vec<f32>, EmbedError> {
        let path = dir.join(STATIC_FILE);
        let dim = self.dimensions();
        if let Ok(bytes) = std::fs::read(&path) {
            match load_static(&bytes, &self.info.vectors_id(), vocab, dim) {
                Ok(table) => return Ok(table),
                Err(reason) => {
                    tracing::warn!(path = %path.display(), %reason, "distilling the token vectors again")
                }
            }
        }
        let started = std::time::Instant::now();
        let table = self.distil(vocab)?;
        tracing::info!(
            tokens = vocab,
            seconds = started.elapsed().as_secs_f32(),
            "distilled the model's token vectors for static queries"
        );
        let tensor = Tensor::from_slice(&table, (vocab, dim), &Device::Cpu)?;
        let tensors = HashMap::from([(format!("v{}", self.info.vectors_id()), tensor)]);
        if let Err(error) = candle_core::safetensors::save(&tensors, &path) {
            tracing::warn!(path = %path.display(), %error, "could not keep the distilled vectors; they will be computed again at the next start");
        }
        Ok(table)
    }

    /// Every vocabulary token, alone between `[CLS]` and `[SEP]`, through the model.
    fn distil(&self, vocab: usize) -> Result<Vec<f32>, EmbedError> {
        let cls = self.special("[CLS]")?;
        let sep = self.special("[SEP]")?;
        let dim = self.dimensions();
        let mut table = Vec::with_capacity(vocab * dim);
        for start in (0..vocab).step_by(DISTILL_BATCH) {
            let end = (start + DISTILL_BATCH).min(vocab);
            let ids: Vec<u32> = (start..end).flat_map(|t| [cls, t as u32, sep]).collect();
            let mask = vec![1u32; ids.len()];
            for v in self.bert.sentence_vectors(ids, mask, end - start)? {
                table.extend(v);
            }
        }
        Ok(table)
    }

    fn special(&self, token: &str) -> Result<u32, EmbedError> {
        self.tokenizer
            .token_to_id(token)
            .ok_or_else(|| EmbedError::Run(format!("the tokenizer has no {token} token")))
    }
}

fn load_static(
    bytes: &[u8],
    fingerprint: &str,
    vocab: usize,
    dim: usize,
) -> Result<Vec<f32>, String> {
    let tensors =
        candle_core::safetensors::load_buffer(bytes, &Device::Cpu).map_err(|e| e.to_string())?;
    let tensor = tensors
        .get(&format!("v{fingerprint}"))
        .ok_or("made from another model")?;
    if tensor.dims() != [vocab, dim] || tensor.dtype() != DType::F32 {
        return Err(format!(
            "shape {:?}, expected [{vocab}, {dim}]",
            tensor.dims()
        ));
    }
    tensor
        .flatten_all()
        .and_then(|t| t.to_vec1::<f32>())
        .map_err(|e| e.to_string())
}

/// Subtracts the mean of the table's rows from each: what every token shares (the
/// `[CLS]`/`[SEP]` context they were distilled in) says nothing about a query.
fn center(table: &mut [f32], dim: usize) {
    let rows = table.len() / dim.max(1);
    if rows == 0 {
        return;
    }
    let mut mean = vec![0.0f64; dim];
    for row in table.chunks_exact(dim) {
        for (m, x) in mean.iter_mut().zip(row) {
            *m += f64::from(*x);
        }
    }
    let mean: Vec<f32> = mean.iter().map(|m| (m / rows as f64) as f32).collect();
    for row in table.chunks_exact_mut(dim) {
        for (x, m) in row.iter_mut().zip(&mean) {
            *x -= m;
        }
    }
}

/// Scales `v` to unit length (a zero vector stays zero).
pub fn normalise(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// Dot product of two vectors of one length (cosine, for unit vectors).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Eight lanes the compiler vectorises; the tail is summed apart.
    let mut lanes = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// A bounded map of recent query vectors. When full, the older half goes.
struct Lru {
    capacity: usize,
    tick: u64,
    entries: HashMap<String, (Arc<[f32]>, u64)>,
}

impl Lru {
    fn new(capacity: usize) -> Self {
        Self {
            capacity,
            tick: 0,
            entries: HashMap::new(),
        }
    }

    fn get(&mut self, key: &str) -> Option<Arc<[f32]>> {
        self.tick += 1;
        let tick = self.tick;
        self.entries.get_mut(key).map(|(v, used)| {
            *used = tick;
            v.clone()
        })
    }

    fn put(&mut self, key: &str, vector: Arc<[f32]>) {
        if self.entries.len() >= self.capacity {
            let mut ticks: Vec<u64> = self.entries.values().map(|e| e.1).collect();
            let (_, &mut median, _) = ticks.select_nth_unstable(self.capacity / 2);
            self.entries.retain(|_, e| e.1 > median);
        }
        self.tick += 1;
        self.entries.insert(key.to_owned(), (vector, self.tick));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(dir: &Path) {
        tiny::write(dir, &["weather", "forecast", "invoice", "pay"], 7).unwrap();
    }

    fn norm(v: &[f32]) -> f32 {
        v.iter().map(|x| x * x).sum::<f32>().sqrt()
    }

    #[test]
    fn a_batch_gives_each_text_the_vector_it_gets_alone() {
        let dir = tempfile::tempdir().unwrap();
        tiny(dir.path());
        let e = Embedder::load(dir.path(), QueryMode::Model).unwrap();
        assert_eq!(e.dimensions(), 32);
        let texts = [
            "weather",
            "pay the invoice before friday please",
            "forecast for paris",
        ];
        let together = e.embed_documents(&texts).unwrap();
        for (text, v) in texts.iter().zip(&together) {
            let alone = e.embed_documents(&[text]).unwrap().pop().unwrap();
            assert!((norm(v) - 1.0).abs() < 1e-4, "{text}: not unit length");
            // Padding to the longest text of the batch must not change a vector.
            let drift: f32 = v.iter().zip(&alone).map(|(a, b)| (a - b).abs()).sum();
            assert!(drift < 1e-3, "{text}: batch and alone differ by {drift}");
        }
        assert!(
            dot(&together[0], &together[1]) < 0.9999,
            "different texts, same vector"
        );
        let query = e
            .embed_query("pay the invoice before friday please")
            .unwrap();
        assert!(dot(&query, &together[1]) > 0.9999);
    }

    #[test]
    fn queries_run_together_get_the_bits_they_get_alone_in_f32_and_q8() {
        let dir = tempfile::tempdir().unwrap();
        tiny(dir.path());
        for weights in [Weights::F32, Weights::Q8] {
            let e = Embedder::load_with(dir.path(), QueryMode::Model, weights).unwrap();
            // Lengths differ (a batch with padding would change the shorter ones), and one
            // query comes twice.
            let texts = [
                "weather",
                "pay the invoice before friday please",
                "forecast for paris",
                "weather",
            ];
            let alone: Vec<Arc<[f32]>> = texts
                .iter()
                .map(|t| e.embed_query_with(t, QueryMode::Model).unwrap())
                .collect();
            let together = e.embed_queries(&texts).unwrap();
            assert_eq!(together.len(), texts.len());
            for ((text, a), b) in texts.iter().zip(&alone).zip(&together) {
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(a),
                    bits(b),
                    "{weights:?} {text:?}: together and alone differ"
                );
                assert!((norm(b) - 1.0).abs() < 1e-4);
            }
            assert_ne!(together[0], together[1], "different texts, same vector");
            // What ran together is remembered: the LRU answers each.
            for text in texts {
                assert!(e.cached_query(text).is_some(), "{text:?} not kept");
            }
        }
    }

    #[test]
    fn q8_weights_give_close_vectors_of_their_own_and_say_so() {
        let dir = tempfile::tempdir().unwrap();
        tiny(dir.path());
        let f32 = Embedder::load_with(dir.path(), QueryMode::Model, Weights::F32).unwrap();
        let q8 = Embedder::load_with(dir.path(), QueryMode::Model, Weights::Q8).unwrap();
        assert_eq!(q8.info().weights, Weights::Q8);
        assert_eq!(q8.info().fingerprint, f32.info().fingerprint, "same files");
        assert_ne!(q8.info().vectors_id(), f32.info().vectors_id());
        let texts = ["weather", "pay the invoice before friday please"];
        let exact = f32.embed_documents(&texts).unwrap();
        let quantized = q8.embed_documents(&texts).unwrap();
        for ((text, a), b) in texts.iter().zip(&exact).zip(&quantized) {
            assert!((norm(b) - 1.0).abs() < 1e-4, "{text}: not unit length");
            let cosine = dot(a, b);
            // The quantized layers run (the vector moved) and stay close to f32.
            assert!(a != b, "{text}: q8 gave the f32 vector");
            assert!(cosine > 0.99, "{text}: cosine {cosine} with the f32 vector");
        }
        // Batched and alone agree under q8 too (the input is quantized per row).
        let alone = q8.embed_documents(&texts[1..]).unwrap().pop().unwrap();
        let drift: f32 = alone
            .iter()
            .zip(&quantized[1])
            .map(|(a, b)| (a - b).abs())
            .sum();
        assert!(drift < 1e-3, "batch and alone differ by {drift}");
    }

    #[test]
    fn static_vectors_are_distilled_once_and_kept_beside_the_model() {
        let dir = tempfile::tempdir().unwrap();
        tiny(dir.path());
        let first = Embedder::load(dir.path(), QueryMode::Static).unwrap();
        assert!(dir.path().join(STATIC_FILE).is_file());
        let v = first.embed_query("weather forecast").unwrap();
        assert!((norm(&v) - 1.0).abs() < 1e-4);
        // Loaded, not distilled again: the same vectors from the file.
        let again = Embedder::load(dir.path(), QueryMode::Static).unwrap();
        assert_eq!(&*again.embed_query("weather forecast").unwrap(), &*v);
        // Another model's file is not used.
        tiny::write(dir.path(), &["weather", "forecast"], 8).unwrap();
        let other = Embedder::load(dir.path(), QueryMode::Static).unwrap();
        assert_ne!(other.info().fingerprint, first.info().fingerprint);
        assert_ne!(&*other.embed_query("weather forecast").unwrap(), &*v);
    }

    fn pooled_by(dir: &Path, pooling: &str) {
        std::fs::write(dir.join("1_Pooling").join("config.json"), pooling).unwrap();
    }

    #[test]
    fn a_mean_pooled_model_without_prompts_is_fingerprinted_by_its_three_files() {
        // Nodes of a release before pooling and prompts were read must keep counting a
        // MiniLM folder as the same model (and its stored vectors as current).
        let dir = tempfile::tempdir().unwrap();
        tiny(dir.path());
        std::fs::write(
            dir.path().join(PROMPTS_FILE),
            r#"{"__version__": {"sentence_transformers": "2.0.0"}}"#,
        )
        .unwrap();
        let mut hash = Sha256::new();
        for file in ["config.json", "tokenizer.json", "model.safetensors"] {
            let bytes = std::fs::read(dir.path().join(file)).unwrap();
            hash.update((bytes.len() as u64).to_be_bytes());
            hash.update(&bytes);
        }
        let want = hex::encode(&hash.finalize()[..8]);
        let model = Embedder::load(dir.path(), QueryMode::Model).unwrap();
        assert_eq!(model.info().fingerprint, want);
    }

    #[test]
    fn a_cls_pooled_model_takes_the_first_tokens_state_batched_or_alone() {
        let dir = tempfile::tempdir().unwrap();
        tiny(dir.path());
        let texts = ["weather forecast", "pay the invoice today", "forecast"];
        let mean = Embedder::load(dir.path(), QueryMode::Model).unwrap();
        pooled_by(
            dir.path(),
            r#"{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}"#,
        );
        let cls = Embedder::load(dir.path(), QueryMode::Model).unwrap();
        assert_ne!(
            cls.info().fingerprint,
            mean.info().fingerprint,
            "nodes pooling otherwise must not count as ranking alike"
        );
        let documents = cls.embed_documents(&texts).unwrap();
        for (text, document) in texts.iter().zip(&documents) {
            assert!((norm(document) - 1.0).abs() < 1e-4);
            // A padded batch and a query run alone pool the same token.
            let alone = cls.embed_query(text).unwrap();
            let drift: f32 = alone.iter().zip(document).map(|(a, b)| (a - b).abs()).sum();
            assert!(drift < 1e-3, "{text}: batch and alone differ by {drift}");
            let pooled_otherwise = &mean.embed_documents(&[text]).unwrap()[0];
            assert!(
                dot(document, pooled_otherwise) < 0.999,
                "{text}: mean-pooled"
            );
        }
        // The [CLS] state sees the whole sentence: texts that share their first word differ.
        let same_start = dot(&documents[0], &documents[2]);
        assert!(same_start < 0.999_99, "{same_start}");
    }

    #[test]
    fn a_models_prompts_go_before_queries_and_documents() {
        let dir = tempfile::tempdir().unwrap();
        tiny(dir.path());
        let plain = Embedder::load(dir.path(), QueryMode::Model).unwrap();
        std::fs::write(
            dir.path().join(PROMPTS_FILE),
            r#"{"prompts": {"query": "weather ", "passage": "invoice "}, "default_prompt_name": null}"#,
        )
        .unwrap();
        let prompted = Embedder::load(dir.path(), QueryMode::Model).unwrap();
        assert_ne!(prompted.info().fingerprint, plain.info().fingerprint);
        let close = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-4);
        let query = prompted.embed_query("pay").unwrap();
        assert!(close(&query, &plain.embed_query("weather pay").unwrap()));
        assert!(!close(&query, &plain.embed_query("pay").unwrap()));
        let document = &prompted.embed_documents(&["pay"]).unwrap()[0];
        assert!(close(
            document,
            &plain.embed_documents(&["invoice pay"]).unwrap()[0]
        ));
        // `document` is taken before `passage`.
        std::fs::write(
            dir.path().join(PROMPTS_FILE),
            r#"{"prompts": {"document": "forecast ", "passage": "invoice "}}"#,
        )
        .unwrap();
        let documents = Embedder::load(dir.path(), QueryMode::Model).unwrap();
        assert_ne!(documents.info().fingerprint, plain.info().fingerprint);
        assert!(close(
            &documents.embed_documents(&["pay"]).unwrap()[0],
            &plain.embed_documents(&["forecast pay"]).unwrap()[0]
        ));
        assert!(close(
            &documents.embed_query("pay").unwrap(),
            &plain.embed_query("pay").unwrap()
        ));
        // A file without prompts changes nothing, the fingerprint included.
        std::fs::write(dir.path().join(PROMPTS_FILE), r#"{"prompts": {}}"#).unwrap();
        let none = Embedder::load(dir.path(), QueryMode::Model).unwrap();
        assert_eq!(none.info().fingerprint, plain.info().fingerprint);
        std::fs::write(
            dir.path().join(PROMPTS_FILE),
            r#"{"prompts": {"query": 3}}"#,
        )
        .unwrap();
        let err = Embedder::load(dir.path(), QueryMode::Model)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(PROMPTS_FILE) && err.contains("prompts.query"),
            "{err}"
        );
    }

    #[test]
    fn an_unusable_folder_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let err = Embedder::load(dir.path(), QueryMode::Model)
            .unwrap_err()
            .to_string();
        assert!(err.contains("config.json"), "{err}");
        tiny(dir.path());
        for pooling in [
            r#"{"pooling_mode_max_tokens": true, "pooling_mode_mean_tokens": false}"#,
            r#"{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": true}"#,
            r#"{"pooling_mode_mean_tokens": true, "pooling_mode_lasttoken": true}"#,
            r#"{}"#,
            r#"{"pooling_mode_mean_tokens": true, "include_prompt": false}"#,
        ] {
            pooled_by(dir.path(), pooling);
            let err = Embedder::load(dir.path(), QueryMode::Model)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("1_Pooling") && err.contains("supported"),
                "{pooling}: {err}"
            );
        }
        tiny(dir.path());
        std::fs::write(dir.path().join("model.safetensors"), b"not weights").unwrap();
        let err = Embedder::load(dir.path(), QueryMode::Model)
            .unwrap_err()
            .to_string();
        assert!(err.contains("model.safetensors"), "{err}");
    }

    #[test]
    fn lru_keeps_recent_queries_and_drops_the_older_half_when_full() {
        let mut lru = Lru::new(4);
        for q in ["a", "b", "c", "d"] {
            lru.put(q, Arc::from(vec![1.0f32]));
        }
        assert!(lru.get("a").is_some()); // "a" is now the most recent
        lru.put("e", Arc::from(vec![2.0f32]));
        assert!(lru.get("a").is_some());
        assert!(lru.get("e").is_some());
        assert!(lru.get("b").is_none());
        assert!(lru.entries.len() <= 4);
    }

    #[test]
    fn dot_matches_a_plain_sum_at_every_length() {
        for n in [0, 1, 7, 8, 9, 384] {
            let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
            let b: Vec<f32> = (0..n).map(|i| 1.0 - i as f32 * 0.25).collect();
            let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!(
                (dot(&a, &b) - plain).abs() <= 1e-3 * plain.abs().max(1.0),
                "{n}"
            );
        }
    }
}
