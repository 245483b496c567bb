//! A tiny model folder with random weights and real files — `config.json`,
//! `tokenizer.json` (a WordPiece tokenizer in Hugging Face's format), `model.safetensors`,
//! the sentence-transformers pooling and length files — so tests run the whole embedding
//! path (load, tokenise, forward pass, pooling) in milliseconds, without downloading a
//! model. Its vectors mean nothing; they are deterministic for a given seed.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Device, Tensor};
use serde_json::{json, Map, Value};

const HIDDEN: usize = 32;
const LAYERS: usize = 2;
const HEADS: usize = 4;
const INTERMEDIATE: usize = 64;
const POSITIONS: usize = 128;
const SPECIALS: [&str; 5] = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];

/// Writes the model folder to `dir` (created if needed). The vocabulary holds the special
/// tokens, single characters with their `##` continuations (so any ASCII word tokenises),
/// and `words`.
pub fn write(dir: &Path, words: &[&str], seed: u64) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join("1_Pooling"))?;
    let mut vocab: Vec<String> = SPECIALS.iter().map(|s| s.to_string()).collect();
    let chars = "abcdefghijklmnopqrstuvwxyz0123456789";
    vocab.extend(chars.chars().map(String::from));
    vocab.extend(chars.chars().map(|c| format!("##{c}")));
    vocab.extend(".,?!'-_/:()".chars().map(String::from));
    for w in words {
        let w = w.to_lowercase();
        if !vocab.contains(&w) {
            vocab.push(w);
        }
    }
    let config = json!({
        "architectures": ["BertModel"],
        "model_type": "bert",
        "hidden_act": "gelu",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "layer_norm_eps": 1e-12,
        "max_position_embeddings": POSITIONS,
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "pad_token_id": 0,
        "type_vocab_size": 2,
        "vocab_size": vocab.len(),
    });
    write_json(&dir.join("config.json"), &config)?;
    write_json(
        &dir.join("sentence_bert_config.json"),
        &json!({ "max_seq_length": 64, "do_lower_case": false }),
    )?;
    write_json(
        &dir.join("1_Pooling").join("config.json"),
        &json!({ "word_embedding_dimension": HIDDEN, "pooling_mode_mean_tokens": true }),
    )?;
    write_json(&dir.join("tokenizer.json"), &tokenizer(&vocab))?;

    let mut mix = Mix(seed);
    let mut tensors: HashMap<String, Tensor> = HashMap::new();
    let mut put = |name: String, shape: &[usize], fill: Fill| {
        let n: usize = shape.iter().product();
        let data: Vec<f32> = (0..n)
            .map(|_| match fill {
                Fill::Random => mix.weight(),
                Fill::Ones => 1.0,
                Fill::Zeros => 0.0,
            })
            .collect();
        let tensor = Tensor::from_vec(data, shape, &Device::Cpu).map_err(std::io::Error::other)?;
        tensors.insert(name, tensor);
        Ok::<(), std::io::Error>(())
    };
    let e = "embeddings";
    put(
        format!("{e}.word_embeddings.weight"),
        &[vocab.len(), HIDDEN],
        Fill::Random,
    )?;
    put(
        format!("{e}.position_embeddings.weight"),
        &[POSITIONS, HIDDEN],
        Fill::Random,
    )?;
    put(
        format!("{e}.token_type_embeddings.weight"),
        &[2, HIDDEN],
        Fill::Random,
    )?;
    put(format!("{e}.LayerNorm.weight"), &[HIDDEN], Fill::Ones)?;
    put(format!("{e}.LayerNorm.bias"), &[HIDDEN], Fill::Zeros)?;
    for layer in 0..LAYERS {
        let l = format!("encoder.layer.{layer}");
        for part in ["query", "key", "value"] {
            put(
                format!("{l}.attention.self.{part}.weight"),
                &[HIDDEN, HIDDEN],
                Fill::Random,
            )?;
            put(
                format!("{l}.attention.self.{part}.bias"),
                &[HIDDEN],
                Fill::Random,
            )?;
        }
        put(
            format!("{l}.attention.output.dense.weight"),
            &[HIDDEN, HIDDEN],
            Fill::Random,
        )?;
        put(
            format!("{l}.attention.output.dense.bias"),
            &[HIDDEN],
            Fill::Random,
        )?;
        put(
            format!("{l}.attention.output.LayerNorm.weight"),
            &[HIDDEN],
            Fill::Ones,
        )?;
        put(
            format!("{l}.attention.output.LayerNorm.bias"),
            &[HIDDEN],
            Fill::Zeros,
        )?;
        put(
            format!("{l}.intermediate.dense.weight"),
            &[INTERMEDIATE, HIDDEN],
            Fill::Random,
        )?;
        put(
            format!("{l}.intermediate.dense.bias"),
            &[INTERMEDIATE],
            Fill::Random,
        )?;
        put(
            format!("{l}.output.dense.weight"),
            &[HIDDEN, INTERMEDIATE],
            Fill::Random,
        )?;
        put(format!("{l}.output.dense.bias"), &[HIDDEN], Fill::Random)?;
        put(
            format!("{l}.output.LayerNorm.weight"),
            &[HIDDEN],
            Fill::Ones,
        )?;
        put(format!("{l}.output.LayerNorm.bias"), &[HIDDEN], Fill::Zeros)?;
    }
    candle_core::safetensors::save(&tensors, dir.join("model.safetensors"))
        .map_err(std::io::Error::other)
}

#[derive(Clone, Copy)]
enum Fill {
    Random,
    Ones,
    Zeros,
}

/// SplitMix64, for weights that are the same on every run.
struct Mix(u64);

impl Mix {
    /// Uniform in [-0.1, 0.1).
    fn weight(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((z >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.2
    }
}

fn write_json(path: &Path, value: &Value) -> std::io::Result<()> {
    std::fs::write(path, serde_json::to_vec_pretty(value)?)
}

/// A BERT WordPiece tokenizer over `vocab`, in the `tokenizer.json` format.
fn tokenizer(vocab: &[String]) -> Value {
    let ids: Map<String, Value> = vocab
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), json!(i)))
        .collect();
    let added: Vec<Value> = SPECIALS
        .iter()
        .enumerate()
        .map(|(i, t)| {
            json!({"id": i, "content": t, "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    let special = |t: &str| json!({"SpecialToken": {"id": t, "type_id": 0}});
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": {"type": "BertNormalizer", "clean_text": true,
                       "handle_chinese_chars": true, "strip_accents": null, "lowercase": true},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [special("[CLS]"), {"Sequence": {"id": "A", "type_id": 0}}, special("[SEP]")],
            "pair": [special("[CLS]"), {"Sequence": {"id": "A", "type_id": 0}}, special("[SEP]"),
                     {"Sequence": {"id": "B", "type_id": 1}}, {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
            "special_tokens": {
                "[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]},
            },
        },
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": ids},
    })
}
