//! A BERT encoder (the architecture of all-MiniLM-L6-v2 and its relatives), forward pass
//! only, on candle's CPU tensors.
//!
//! ```text
//!  ids ─► word + position + token-type embeddings ─► LayerNorm
//!      ─► N × [ self-attention ─► add & LayerNorm ─► GELU feed-forward ─► add & LayerNorm ]
//!      ─► mean of the unpadded positions (or the [CLS] state) ─► L2 normalised sentence vector
//! ```
//!
//! Weights are read by the names Hugging Face's `BertModel` writes
//! (`embeddings.word_embeddings.weight`, `encoder.layer.0.attention.self.query.weight`, …),
//! with or without a leading `bert.`.

use candle_core::{DType, Device, Module, Tensor, D};
use candle_nn::{embedding, layer_norm, Embedding, LayerNorm, VarBuilder};

use super::int8::{Matrix8, Rows8};
use super::Weights;

/// A dense layer. In f32 the weight is kept transposed (`in × out`, contiguous), so a
/// product with a few rows of input reads it in the layout the matrix kernel packs from; in
/// q8 it is quantized once at load to 8-bit blocks ([`super::int8`]), a quarter of the
/// bytes to read per product, and the input is quantized per block alike.
enum Linear {
    F32 { weight_t: Tensor, bias: Tensor },
    Q8 { weight: Matrix8, bias: Vec<f32> },
}

fn linear(
    input: usize,
    output: usize,
    vb: VarBuilder,
    weights: Weights,
) -> candle_core::Result<Linear> {
    let weight = vb.get((output, input), "weight")?;
    let bias = vb.get(output, "bias")?;
    // The input length must be whole blocks; a layer that is not stays in f32.
    if weights == Weights::Q8 && Matrix8::fits(input) {
        let values = weight.flatten_all()?.to_vec1::<f32>()?;
        return Ok(Linear::Q8 {
            weight: Matrix8::quantize(&values, output, input),
            bias: bias.to_vec1::<f32>()?,
        });
    }
    Ok(Linear::F32 {
        weight_t: weight.t()?.contiguous()?,
        bias,
    })
}

/// GELU, `x · Φ(x)`, with erf from Abramowitz and Stegun's 7.1.28 (absolute error below
/// 3·10⁻⁷, far inside what 8-bit products move): multiplies, adds and one division, which
/// the compiler vectorises, where candle's exact erf costs about a quarter of a q8 query.
fn gelu_in_place(values: &mut [f32]) {
    const A: [f32; 6] = [
        0.070_523_08,
        0.042_282_01,
        0.009_270_527,
        0.000_152_014_3,
        0.000_276_567_2,
        0.000_043_063_8,
    ];
    for v in values {
        let x = *v;
        let z = x.abs() * std::f32::consts::FRAC_1_SQRT_2;
        let p = 1.0 + z * (A[0] + z * (A[1] + z * (A[2] + z * (A[3] + z * (A[4] + z * A[5])))));
        let p2 = p * p;
        let p4 = p2 * p2;
        let p8 = p4 * p4;
        let erf = 1.0 - 1.0 / (p8 * p8);
        *v = 0.5 * x * (1.0 + erf.copysign(x));
    }
}

/// The attention's query, key and value projections. In q8 they are one matrix of three
/// times the rows (the input quantized once, one product): each output value is computed
/// exactly as by its own layer, since a row's blocks are quantized on their own.
enum Projections {
    /// Query, key and value.
    Apart(Box<[Linear; 3]>),
    Fused {
        weight: Matrix8,
        bias: Vec<f32>,
    },
}

impl Projections {
    fn load(h: usize, vb: VarBuilder, weights: Weights) -> candle_core::Result<Self> {
        let names = ["query", "key", "value"];
        if weights == Weights::Q8 && Matrix8::fits(h) {
            let (mut values, mut bias) = (Vec::with_capacity(3 * h * h), Vec::with_capacity(3 * h));
            for name in names {
                let vb = vb.pp(name);
                values.extend(vb.get((h, h), "weight")?.flatten_all()?.to_vec1::<f32>()?);
                bias.extend(vb.get(h, "bias")?.to_vec1::<f32>()?);
            }
            return Ok(Self::Fused {
                weight: Matrix8::quantize(&values, 3 * h, h),
                bias,
            });
        }
        let [query, key, value] = names.map(|name| linear(h, h, vb.pp(name), weights));
        Ok(Self::Apart(Box::new([query?, key?, value?])))
    }

    /// The query, key and value of `x` (`[.., hidden]`), each shaped like `x`.
    fn forward(&self, x: &Tensor) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
        let (weight, bias) = match self {
            Self::Apart(apart) => {
                let [query, key, value] = &**apart;
                return Ok((query.forward(x)?, key.forward(x)?, value.forward(x)?));
            }
            Self::Fused { weight, bias } => (weight, bias),
        };
        let dims = x.dims().to_vec();
        let h = weight.cols();
        if dims.last() != Some(&h) {
            return Err(candle_core::Error::Msg(format!(
                "attention of {h} inputs was given {dims:?}"
            )));
        }
        let values = x.flatten_all()?.to_vec1::<f32>()?;
        let out = weight.product(&Rows8::quantize(&values, weight), bias);
        let rows = out.len() / (3 * h);
        let mut parts = [
            Vec::with_capacity(rows * h),
            Vec::with_capacity(rows * h),
            Vec::with_capacity(rows * h),
        ];
        for row in out.chunks_exact(3 * h) {
            for (part, values) in parts.iter_mut().zip(row.chunks_exact(h)) {
                part.extend_from_slice(values);
            }
        }
        let [q, k, v] = parts.map(|p| Tensor::from_vec(p, dims.as_slice(), x.device()));
        Ok((q?, k?, v?))
    }
}

impl Linear {
    /// `gelu(self(x))` with erf as the model defines it: exact in f32; in q8 by
    /// [`gelu_in_place`] on the product before it becomes a tensor.
    fn forward_gelu(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Linear::F32 { .. } => self.forward(x)?.gelu_erf(),
            Linear::Q8 { .. } => self.forward_q8(x, gelu_in_place),
        }
    }

    /// A q8 layer's product, `then` applied to it in place (an f32 layer ignores `then`:
    /// only q8 layers are given one that changes anything).
    fn forward_q8(&self, x: &Tensor, then: fn(&mut [f32])) -> candle_core::Result<Tensor> {
        let Linear::Q8 { weight, bias } = self else {
            return self.forward(x);
        };
        let mut dims = x.dims().to_vec();
        let input = dims.pop().unwrap_or(0);
        if input != weight.cols() {
            return Err(candle_core::Error::Msg(format!(
                "a q8 layer of {} inputs was given {input}",
                weight.cols()
            )));
        }
        let values = x.flatten_all()?.to_vec1::<f32>()?;
        let mut out = weight.product(&Rows8::quantize(&values, weight), bias);
        then(&mut out);
        dims.push(weight.rows());
        Tensor::from_vec(out, dims, x.device())
    }
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let Linear::F32 { weight_t, bias } = self else {
            return self.forward_q8(x, |_| {});
        };
        let mut dims = x.dims().to_vec();
        let input = dims.pop().unwrap_or(0);
        let rows = dims.iter().product::<usize>();
        let y = x
            .reshape((rows, input))?
            .matmul(weight_t)?
            .broadcast_add(bias)?;
        dims.push(weight_t.dim(1)?);
        y.reshape(dims)
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

    /// Token vectors of sequences laid end to end: `ids` and `positions` are `[tokens]`,
    /// each sequence's positions counting from 0.
    fn forward_flat(&self, ids: &Tensor, positions: &Tensor) -> candle_core::Result<Tensor> {
        let types = Tensor::zeros(ids.dims1()?, DType::U32, ids.device())?;
        let x = self
            .words
            .forward(ids)?
            .broadcast_add(&self.positions.forward(positions)?)?
            .broadcast_add(&self.token_types.forward(&types)?)?;
        self.norm.forward(&x)
    }

    /// Token vectors of a padded batch: `ids` is `[batch, len]`.
    fn forward(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        let (batch, len) = ids.dims2()?;
        let positions: Vec<u32> = (0..batch).flat_map(|_| 0..len as u32).collect();
        let positions = Tensor::from_vec(positions, batch * len, ids.device())?;
        let x = self.forward_flat(&ids.flatten_all()?, &positions)?;
        let hidden = x.dim(1)?;
        x.reshape((batch, len, hidden))
    }
}

struct Layer {
    projections: Projections,
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
            projections: Projections::load(h, attention.pp("self"), w)?,
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
        let (q, k, v) = self.projections.forward(x)?;
        let (q, k, v) = (split(q)?, split(k)?, split(v)?);
        let scale = (self.head_dim as f64).sqrt();
        let scores = (q.matmul(&k.t()?)? / scale)?.broadcast_add(mask_bias)?;
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        let context = probs
            .matmul(&v)?
            .transpose(1, 2)?
            .contiguous()?
            .reshape((b, len, hidden))?;
        self.after_attention(&context, x)
    }
}

impl Layer {
    /// What follows attention, row by row: the output projection added to `x` and
    /// normalised, then the feed-forward block added and normalised.
    fn after_attention(&self, context: &Tensor, x: &Tensor) -> candle_core::Result<Tensor> {
        let x = self
            .attention_norm
            .forward(&(self.attention_out.forward(context)? + x)?)?;
        let inner = match self.act {
            Activation::Gelu => self.intermediate.forward_gelu(&x)?,
            Activation::GeluTanh => self.intermediate.forward(&x)?.gelu()?,
            Activation::Relu => self.intermediate.forward(&x)?.relu()?,
        };
        self.out_norm.forward(&(self.out.forward(&inner)? + x)?)
    }

    /// [`Layer::forward`] for sequences laid end to end (`x`: `[tokens, hidden]`, `lengths`
    /// the sequences' token counts in order): each attends only to itself, so no padding
    /// is needed, and a sequence's rows come out the same whatever sequences it is run
    /// with (every other step works row by row).
    fn forward_flat(&self, x: &Tensor, lengths: &[usize]) -> candle_core::Result<Tensor> {
        let (_, hidden) = x.dims2()?;
        let (q, k, v) = self.projections.forward(x)?;
        let scale = (self.head_dim as f64).sqrt();
        let mut contexts = Vec::with_capacity(lengths.len());
        let mut start = 0;
        for &len in lengths {
            let heads = |t: &Tensor| -> candle_core::Result<Tensor> {
                t.narrow(0, start, len)?
                    .reshape((len, self.heads, self.head_dim))?
                    .transpose(0, 1)?
                    .contiguous()
            };
            let (q, k, v) = (heads(&q)?, heads(&k)?, heads(&v)?);
            let scores = (q.matmul(&k.t()?)? / scale)?;
            let probs = candle_nn::ops::softmax_last_dim(&scores)?;
            contexts.push(
                probs
                    .matmul(&v)?
                    .transpose(0, 1)?
                    .contiguous()?
                    .reshape((len, hidden))?,
            );
            start += len;
        }
        let context = Tensor::cat(&contexts, 0)?;
        self.after_attention(&context, x)
    }
}

/// How a sentence's vector is taken from its tokens' last hidden states (what the model was
/// trained with: sentence-transformers' `1_Pooling/config.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pooling {
    /// The mean over the sentence's tokens (MiniLM, gte, e5).
    #[default]
    Mean,
    /// The first token's state, the one of `[CLS]` (bge).
    Cls,
}

/// The encoder: embeddings and layers, no pooler layer (sentence vectors are pooled as
/// [`Pooling`] says, then L2-normalised).
pub struct Bert {
    embeddings: Embeddings,
    layers: Vec<Layer>,
    pooling: Pooling,
    device: Device,
}

impl Bert {
    /// Builds the encoder from safetensors bytes, its linear layers in `kind` (embeddings
    /// and LayerNorms stay in f32 either way).
    pub fn load(
        weights: Vec<u8>,
        config: &BertConfig,
        kind: Weights,
        pooling: Pooling,
    ) -> candle_core::Result<Self> {
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
            pooling,
            device,
        })
    }

    /// Pooled, L2-normalised vectors of token sequences, run together without padding:
    /// each sequence's vector is the one it gets run alone (see [`Layer::forward_flat`]).
    pub fn sequence_vectors(&self, sequences: &[Vec<u32>]) -> candle_core::Result<Vec<Vec<f32>>> {
        let lengths: Vec<usize> = sequences.iter().map(Vec::len).collect();
        if lengths.iter().all(|&n| n == 0) {
            return Ok(vec![Vec::new(); sequences.len()]);
        }
        if lengths.contains(&0) {
            return Err(candle_core::Error::Msg("an empty token sequence".into()));
        }
        let ids: Vec<u32> = sequences.concat();
        let positions: Vec<u32> = lengths.iter().flat_map(|&n| 0..n as u32).collect();
        let tokens = ids.len();
        let ids = Tensor::from_vec(ids, tokens, &self.device)?;
        let positions = Tensor::from_vec(positions, tokens, &self.device)?;
        let mut x = self.embeddings.forward_flat(&ids, &positions)?;
        for layer in &self.layers {
            x = layer.forward_flat(&x, &lengths)?;
        }
        let mut out = Vec::with_capacity(lengths.len());
        let mut start = 0;
        for &len in &lengths {
            let pooled = match self.pooling {
                Pooling::Mean => (x.narrow(0, start, len)?.sum(0)? / len as f64)?,
                Pooling::Cls => x.get(start)?,
            };
            let norm = pooled.sqr()?.sum_all()?.sqrt()?.clamp(1e-12, f64::MAX)?;
            out.push(pooled.broadcast_div(&norm)?.to_vec1::<f32>()?);
            start += len;
        }
        Ok(out)
    }

    /// Pooled, L2-normalised vectors of a padded batch: `ids` and `mask` are
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
        let pooled = match self.pooling {
            Pooling::Mean => {
                let weights = mask.unsqueeze(2)?; // [batch, len, 1]
                let summed = x.broadcast_mul(&weights)?.sum(1)?; // [batch, hidden]
                let counts = weights.sum(1)?.clamp(1e-9, f64::MAX)?; // [batch, 1]
                summed.broadcast_div(&counts)?
            }
            // Padding is at the end, so every sequence's first token is its own.
            Pooling::Cls => x.narrow(1, 0, 1)?.squeeze(1)?,
        };
        let norms = pooled
            .sqr()?
            .sum_keepdim(D::Minus1)?
            .sqrt()?
            .clamp(1e-12, f64::MAX)?;
        pooled.broadcast_div(&norms)?.to_vec2::<f32>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbers(n: usize, seed: u32) -> Vec<f32> {
        (0..n as u32)
            .map(|i| ((i.wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(40_503)) % 2001) as f32)
            .map(|v| v / 1000.0 - 1.0)
            .collect()
    }

    #[test]
    fn fused_q8_projections_give_each_layers_own_bits() {
        let h = 64;
        let mut tensors = std::collections::HashMap::new();
        for (i, name) in ["query", "key", "value"].into_iter().enumerate() {
            let weight = Tensor::from_vec(numbers(h * h, i as u32), (h, h), &Device::Cpu);
            let bias = Tensor::from_vec(numbers(h, 10 + i as u32), h, &Device::Cpu);
            tensors.insert(format!("{name}.weight"), weight.unwrap());
            tensors.insert(format!("{name}.bias"), bias.unwrap());
        }
        let vb = VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu);
        let fused = Projections::load(h, vb.clone(), Weights::Q8).unwrap();
        assert!(matches!(fused, Projections::Fused { .. }));
        let f32 = Projections::load(h, vb.clone(), Weights::F32).unwrap();
        assert!(
            matches!(f32, Projections::Apart(_)),
            "f32 layers stay apart"
        );
        let apart = ["query", "key", "value"].map(|n| linear(h, h, vb.pp(n), Weights::Q8).unwrap());
        let bits = |t: &Tensor| -> Vec<u32> {
            let v = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            v.into_iter().map(f32::to_bits).collect()
        };
        // Flat token rows and a padded batch.
        for dims in [vec![5, h], vec![2, 3, h]] {
            let n = dims.iter().product();
            let x = Tensor::from_vec(numbers(n, 99), dims.as_slice(), &Device::Cpu).unwrap();
            let (q, k, v) = fused.forward(&x).unwrap();
            for (got, layer) in [q, k, v].iter().zip(&apart) {
                assert_eq!(got.dims(), x.dims());
                assert_eq!(bits(got), bits(&layer.forward(&x).unwrap()), "{dims:?}");
            }
        }
        let wrong = Tensor::zeros((2, h + 32), DType::F32, &Device::Cpu).unwrap();
        assert!(fused.forward(&wrong).is_err());
    }

    #[test]
    fn the_q8_gelu_stays_within_a_millionth_of_candles_exact_one() {
        let xs: Vec<f32> = (-1200..=1200).map(|i| i as f32 / 100.0).collect();
        let exact = Tensor::new(xs.as_slice(), &Device::Cpu)
            .and_then(|t| t.gelu_erf())
            .and_then(|t| t.to_vec1::<f32>())
            .unwrap();
        let mut fast = xs.clone();
        gelu_in_place(&mut fast);
        for ((x, a), b) in xs.iter().zip(&exact).zip(&fast) {
            assert!(
                (a - b).abs() <= 1e-6 * (1.0 + x.abs()),
                "gelu({x}): {b} against {a}"
            );
        }
    }
}
