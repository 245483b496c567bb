//! A BERT encoder (the architecture of all-MiniLM-L6-v2 and its relatives), forward pass
//! only, on candle's CPU tensors.
//!
//! ```text
//!  ids ─► word + position + token-type embeddings ─► LayerNorm
//!      ─► N × [ self-attention ─► add & LayerNorm ─► GELU feed-forward ─► add & LayerNorm ]
//!      ─► mean of the unpadded positions ─► L2 normalised sentence vector
//! ```
//!
//! Weights are read by the names Hugging Face's `BertModel` writes
//! (`embeddings.word_embeddings.weight`, `encoder.layer.0.attention.self.query.weight`, …),
//! with or without a leading `bert.`.

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, Module, Tensor, D};
use candle_nn::{embedding, layer_norm, Embedding, LayerNorm, VarBuilder};

use super::Weights;

/// A dense layer. In f32 the weight is kept transposed (`in × out`, contiguous), so a
/// product with a few rows of input reads it in the layout the matrix kernel packs from; in
/// q8 it is quantized once at load to GGML's Q8_0 blocks (32 weights sharing one scale), a
/// quarter of the bytes to read per product, and the input is quantized per row alike.
enum Linear {
    F32 { weight_t: Tensor, bias: Tensor },
    Q8 { weight: QMatMul, bias: Tensor },
}

fn linear(
    input: usize,
    output: usize,
    vb: VarBuilder,
    weights: Weights,
) -> candle_core::Result<Linear> {
    let weight = vb.get((output, input), "weight")?;
    let bias = vb.get(output, "bias")?;
    // Q8_0 needs the input length in whole blocks; a layer that has not stays in f32.
    if weights == Weights::Q8 && input.is_multiple_of(GgmlDType::Q8_0.block_size()) {
        let q = QTensor::quantize(&weight, GgmlDType::Q8_0)?;
        return Ok(Linear::Q8 {
            weight: QMatMul::QTensor(std::sync::Arc::new(q)),
            bias,
        });
    }
    Ok(Linear::F32 {
        weight_t: weight.t()?.contiguous()?,
        bias,
    })
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let dims = x.dims().to_vec();
        let (rows, input) = (
            dims[..dims.len() - 1].iter().product::<usize>(),
            dims[dims.len() - 1],
        );
        let x = x.reshape((rows, input))?;
        let (y, width) = match self {
            Linear::F32 { weight_t, bias } => {
                (x.matmul(weight_t)?.broadcast_add(bias)?, weight_t.dim(1)?)
            }
            Linear::Q8 { weight, bias } => (
                weight.forward(&x.contiguous()?)?.broadcast_add(bias)?,
                bias.dim(0)?,
            ),
        };
        let mut out = dims;
        let last = out.len() - 1;
        out[last] = width;
        y.reshape(out)
    }
}
use serde::Deserialize;

/// The fields of a Hugging Face `config.json` the forward pass needs.
#[derive(Debug, Clone, Deserialize)]
pub struct BertConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    #[serde(default = "default_act")]
    pub hidden_act: String,
    pub max_position_embeddings: usize,
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
}

fn default_act() -> String {
    "gelu".into()
}
fn default_type_vocab() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}

impl BertConfig {
    /// Refuses what this encoder does not implement, with the field named.
    pub fn check(&self) -> Result<(), String> {
        if !matches!(self.hidden_act.as_str(), "gelu" | "gelu_new" | "relu") {
            return Err(format!(
                "hidden_act {:?} is not supported (gelu, gelu_new, relu)",
                self.hidden_act
            ));
        }
        if self.num_attention_heads == 0
            || !self.hidden_size.is_multiple_of(self.num_attention_heads)
        {
            return Err(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        if self.hidden_size == 0 || self.vocab_size == 0 || self.max_position_embeddings == 0 {
            return Err("hidden_size, vocab_size and max_position_embeddings must be set".into());
        }
        Ok(())
    }
}

struct Embeddings {
    words: Embedding,
    positions: Embedding,
    token_types: Embedding,
    norm: LayerNorm,
}

impl Embeddings {
    fn load(vb: VarBuilder, c: &BertConfig) -> candle_core::Result<Self> {
        Ok(Self {
            words: embedding(c.vocab_size, c.hidden_size, vb.pp("word_embeddings"))?,
            positions: embedding(
                c.max_position_embeddings,
                c.hidden_size,
                vb.pp("position_embeddings"),
            )?,
            token_types: embedding(
                c.type_vocab_size,
                c.hidden_size,
                vb.pp("token_type_embeddings"),
            )?,
            norm: layer_norm(c.hidden_size, c.layer_norm_eps, vb.pp("LayerNorm"))?,
        })
    }

    fn forward(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        let (_, len) = ids.dims2()?;
        let device = ids.device();
        let positions = Tensor::arange(0u32, len as u32, device)?;
        let types = Tensor::zeros(len, DType::U32, device)?;
        let x = self
            .words
            .forward(ids)?
            .broadcast_add(&self.positions.forward(&positions)?)?
            .broadcast_add(&self.token_types.forward(&types)?)?;
        self.norm.forward(&x)
    }
}

struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    attention_out: Linear,
    attention_norm: LayerNorm,
    intermediate: Linear,
    out: Linear,
    out_norm: LayerNorm,
    heads: usize,
    head_dim: usize,
    act: Activation,
}

#[derive(Clone, Copy)]
enum Activation {
    Gelu,
    GeluTanh,
    Relu,
}

impl Layer {
    fn load(vb: VarBuilder, c: &BertConfig, w: Weights) -> candle_core::Result<Self> {
        let h = c.hidden_size;
        let attention = vb.pp("attention");
        let act = match c.hidden_act.as_str() {
            "gelu_new" => Activation::GeluTanh,
            "relu" => Activation::Relu,
            _ => Activation::Gelu,
        };
        Ok(Self {
            query: linear(h, h, attention.pp("self").pp("query"), w)?,
            key: linear(h, h, attention.pp("self").pp("key"), w)?,
            value: linear(h, h, attention.pp("self").pp("value"), w)?,
            attention_out: linear(h, h, attention.pp("output").pp("dense"), w)?,
            attention_norm: layer_norm(
                h,
                c.layer_norm_eps,
                attention.pp("output").pp("LayerNorm"),
            )?,
            intermediate: linear(h, c.intermediate_size, vb.pp("intermediate").pp("dense"), w)?,
            out: linear(c.intermediate_size, h, vb.pp("output").pp("dense"), w)?,
            out_norm: layer_norm(h, c.layer_norm_eps, vb.pp("output").pp("LayerNorm"))?,
            heads: c.num_attention_heads,
            head_dim: h / c.num_attention_heads,
            act,
        })
    }

    /// `x`: [batch, len, hidden]; `mask_bias`: [batch, 1, 1, len], 0 where attended and a
    /// large negative number at padding.
    fn forward(&self, x: &Tensor, mask_bias: &Tensor) -> candle_core::Result<Tensor> {
        let (b, len, hidden) = x.dims3()?;
        let split = |t: Tensor| -> candle_core::Result<Tensor> {
            t.reshape((b, len, self.heads, self.head_dim))?
                .transpose(1, 2)?
                .contiguous()
        };
        let q = split(self.query.forward(x)?)?;
        let k = split(self.key.forward(x)?)?;
        let v = split(self.value.forward(x)?)?;
        let scale = (self.head_dim as f64).sqrt();
        let scores = (q.matmul(&k.t()?)? / scale)?.broadcast_add(mask_bias)?;
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        let context = probs
            .matmul(&v)?
            .transpose(1, 2)?
            .contiguous()?
            .reshape((b, len, hidden))?;
        let x = self
            .attention_norm
            .forward(&(self.attention_out.forward(&context)? + x)?)?;
        let inner = self.intermediate.forward(&x)?;
        let inner = match self.act {
            Activation::Gelu => inner.gelu_erf()?,
            Activation::GeluTanh => inner.gelu()?,
            Activation::Relu => inner.relu()?,
        };
        self.out_norm.forward(&(self.out.forward(&inner)? + x)?)
    }
}

/// The encoder: embeddings and layers, no pooler (sentence vectors are mean-pooled).
pub struct Bert {
    embeddings: Embeddings,
    layers: Vec<Layer>,
    device: Device,
}

impl Bert {
    /// Builds the encoder from safetensors bytes, its linear layers in `kind` (embeddings
    /// and LayerNorms stay in f32 either way).
    pub fn load(weights: Vec<u8>, config: &BertConfig, kind: Weights) -> candle_core::Result<Self> {
        let device = Device::Cpu;
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &device)?;
        let vb = if vb.contains_tensor("bert.embeddings.word_embeddings.weight") {
            vb.pp("bert")
        } else {
            vb
        };
        let embeddings = Embeddings::load(vb.pp("embeddings"), config)?;
        let layers = (0..config.num_hidden_layers)
            .map(|i| Layer::load(vb.pp("encoder").pp("layer").pp(i), config, kind))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(Self {
            embeddings,
            layers,
            device,
        })
    }

    /// Mean-pooled, L2-normalised vectors of a padded batch: `ids` and `mask` are
    /// `batch × len`, row-major, `mask` 1 for a real token and 0 for padding.
    pub fn sentence_vectors(
        &self,
        ids: Vec<u32>,
        mask: Vec<u32>,
        batch: usize,
    ) -> candle_core::Result<Vec<Vec<f32>>> {
        if batch == 0 {
            return Ok(Vec::new());
        }
        let len = ids.len() / batch;
        let ids = Tensor::from_vec(ids, (batch, len), &self.device)?;
        let mask = Tensor::from_vec(mask, (batch, len), &self.device)?.to_dtype(DType::F32)?;
        // 0 where attended, -10000 at padding (BERT's own constant: large enough to vanish
        // in the softmax, small enough not to overflow).
        let bias = ((mask.clone() - 1.0)? * 10_000.0)?.reshape((batch, 1, 1, len))?;
        let mut x = self.embeddings.forward(&ids)?;
        for layer in &self.layers {
            x = layer.forward(&x, &bias)?;
        }
        let weights = mask.unsqueeze(2)?; // [batch, len, 1]
        let summed = x.broadcast_mul(&weights)?.sum(1)?; // [batch, hidden]
        let counts = weights.sum(1)?.clamp(1e-9, f64::MAX)?; // [batch, 1]
        let mean = summed.broadcast_div(&counts)?;
        let norms = mean
            .sqr()?
            .sum_keepdim(D::Minus1)?
            .sqrt()?
            .clamp(1e-12, f64::MAX)?;
        mean.broadcast_div(&norms)?.to_vec2::<f32>()
    }
}
