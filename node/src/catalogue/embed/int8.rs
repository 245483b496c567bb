//! 8-bit matrix products for the encoder's linear layers (`[resolver] weights = "q8"`).
//!
//! Weights are quantized once at load, the input of each product as it comes, both in
//! blocks of values sharing one f32 scale (as GGML's Q8_0 does): a block's scale is its
//! largest magnitude over 127, and its values are rounded to `-127..=127`. A block is 128
//! values where the row length allows (fewer scales to apply; fused top-1 within 0.004 of
//! f32 on the five public sets), else 32.
//!
//! A product of an input row with a weight row is, block by block, an exact integer dot
//! product times the two blocks' scales, summed in f32.
//!
//! # Same bits on every CPU
//!
//! Nodes embed the rows they apply themselves, and every node of a cluster must rank alike,
//! so a product may not depend on the instructions a CPU has. The three kernels here
//! (portable; AVX2; AVX-512 VNNI, chosen at run time) compute the same bits:
//! - the integer part is exact in each (AVX2 multiplies `|x|` by `w` with `x`'s sign in
//!   pairs that fit an i16; VNNI multiplies `x + 128` by `w` into 32-bit sums and takes
//!   `128 · Σw` off);
//! - each block adds `(partial as f32) * scale` into one of eight lanes, lane `k` taking
//!   values `4k..4k+4` of every 32-value chunk, with a multiply and an add that are rounded
//!   each (never fused);
//! - the eight lanes are summed in one fixed order at the end.
//!
//! A test compares their bits on random data. (The rest of the encoder runs on candle,
//! whose softmax takes `exp` from the platform's math library.)

/// Values sharing one scale, largest first: a row takes the first that divides its length.
const BLOCKS: [usize; 2] = [128, 32];
/// Values one AVX2 instruction multiplies (32 bytes); a block is whole chunks.
const CHUNK: usize = 32;
/// Lanes of the f32 sums (the eight f32 of a 256-bit register).
const LANES: usize = 8;
/// Multiply-adds from which a product is shared out over threads (a short query's layer
/// is a few million).
const PARALLEL_WORK: usize = 1 << 20;
/// Weight rows per share.
const RUN_ROWS: usize = 64;
/// Bytes of input rows a kernel call takes at once (a tile kept in the first-level cache).
const TILE_BYTES: usize = 16 * 1024;
/// Largest magnitude of a quantized value. Never -128, so that the AVX2 kernel's pairs of
/// products stay within an i16 (2 · 127 · 127 < 32,768).
const MAX: f32 = 127.0;

/// A quantized matrix of `rows` rows of `cols` values (a linear layer's weight, one row per
/// output).
pub(super) struct Matrix8 {
    rows: usize,
    cols: usize,
    /// Values per scale.
    block: usize,
    values: Vec<i8>,
    /// One per block, row-major.
    scales: Vec<f32>,
    /// Per block, per lane: 128 × the sum of the lane's weights (see [`Dots`]).
    offsets: Vec<i32>,
}

/// Rows of input quantized alike, `cols` values each.
pub(super) struct Rows8 {
    cols: usize,
    block: usize,
    values: Vec<i8>,
    scales: Vec<f32>,
}

/// The block of rows of `cols` values, if any fits.
fn block_for(cols: usize) -> Option<usize> {
    BLOCKS
        .into_iter()
        .find(|&b| cols > 0 && cols.is_multiple_of(b))
}

/// Quantizes `values` (whole blocks of `size`) into `out`, one scale per block to `scales`.
fn quantize_into(values: &[f32], size: usize, out: &mut [i8], scales: &mut [f32]) {
    for ((block, out), scale) in values
        .chunks_exact(size)
        .zip(out.chunks_exact_mut(size))
        .zip(scales.iter_mut())
    {
        let largest = block.iter().fold(0f32, |m, v| m.max(v.abs()));
        let s = largest / MAX;
        *scale = s;
        let inverse = if s > 0.0 { 1.0 / s } else { 0.0 };
        for (q, v) in out.iter_mut().zip(block) {
            // Half away from zero, by a truncating conversion (`round` is a library call
            // on x86-64's baseline); the same bits on every CPU.
            let t = (v * inverse).clamp(-MAX, MAX);
            *q = (t + 0.5f32.copysign(t)) as i8;
        }
    }
}

impl Matrix8 {
    /// Whether a matrix of `cols` columns can be quantized (whole blocks per row).
    pub(super) fn fits(cols: usize) -> bool {
        block_for(cols).is_some()
    }

    /// Quantizes a row-major `rows × cols` matrix; `cols` must [fit](Self::fits).
    pub(super) fn quantize(values: &[f32], rows: usize, cols: usize) -> Self {
        let block = block_for(cols).expect("a row length that fits");
        assert_eq!(values.len(), rows * cols);
        let mut q = vec![0i8; values.len()];
        let mut scales = vec![0f32; values.len() / block];
        quantize_into(values, block, &mut q, &mut scales);
        let offsets = q
            .chunks_exact(block)
            .flat_map(|block| {
                let mut lanes = [0i32; LANES];
                for chunk in block.chunks_exact(CHUNK) {
                    for (lane, four) in lanes.iter_mut().zip(chunk.chunks_exact(CHUNK / LANES)) {
                        *lane += four.iter().map(|&w| i32::from(w)).sum::<i32>();
                    }
                }
                lanes.map(|sum| 128 * sum)
            })
            .collect();
        Self {
            rows,
            cols,
            block,
            values: q,
            scales,
            offsets,
        }
    }

    pub(super) fn rows(&self) -> usize {
        self.rows
    }

    pub(super) fn cols(&self) -> usize {
        self.cols
    }

    /// `input · selfᵀ + bias`: one output row of `self.rows` values per input row. Large
    /// products are shared out over rayon's threads by runs of weight rows; every output
    /// value is computed alike however the work is split.
    pub(super) fn product(&self, input: &Rows8, bias: &[f32]) -> Vec<f32> {
        use rayon::prelude::*;
        assert_eq!((input.cols, input.block), (self.cols, self.block));
        assert_eq!(bias.len(), self.rows);
        let n = input.values.len() / self.cols;
        let work = n * self.rows * self.cols;
        let run = if work >= PARALLEL_WORK {
            RUN_ROWS
        } else {
            self.rows.max(1)
        };
        let blocks = self.cols / self.block;
        // Each run's outputs, input row by input row: `n × run` values.
        let runs: Vec<Vec<f32>> = self
            .values
            .par_chunks(run * self.cols)
            .zip(self.scales.par_chunks(run * blocks))
            .zip(self.offsets.par_chunks(run * blocks * LANES))
            .zip(bias.par_chunks(run))
            .map(|(((values, scales), offsets), bias)| {
                self.run(
                    input,
                    Weights {
                        values,
                        scales,
                        offsets,
                    },
                    bias,
                )
            })
            .collect();
        let mut out = vec![0f32; n * self.rows];
        for (i, part) in runs.iter().enumerate() {
            let width = part.len() / n.max(1);
            for (r, values) in part.chunks_exact(width.max(1)).enumerate() {
                out[r * self.rows + i * run..][..width].copy_from_slice(values);
            }
        }
        out
    }

    /// The products of every input row with one run of weight rows: `n × width` values.
    fn run(&self, input: &Rows8, weights: Weights<'_>, bias: &[f32]) -> Vec<f32> {
        let blocks = self.cols / self.block;
        let n = input.values.len() / self.cols;
        let width = bias.len();
        let mut out = vec![0f32; n * width];
        let mut column = Vec::new();
        let dots = kernel();
        // Input rows in tiles that stay in the first-level cache while every weight row of
        // the run (in the second-level cache) meets them.
        let tile = (TILE_BYTES / self.cols).max(1);
        for (t, (x, xs)) in input
            .values
            .chunks(tile * self.cols)
            .zip(input.scales.chunks(tile * blocks))
            .enumerate()
        {
            let rows = xs.len() / blocks;
            column.resize(rows, 0.0);
            for (j, ((values, scales), offsets)) in weights
                .values
                .chunks_exact(self.cols)
                .zip(weights.scales.chunks_exact(blocks))
                .zip(weights.offsets.chunks_exact(blocks * LANES))
                .enumerate()
            {
                let w = Weights {
                    values,
                    scales,
                    offsets,
                };
                dots(x, xs, w, self.block, &mut column);
                for (r, value) in column.iter().enumerate() {
                    out[(t * tile + r) * width + j] = value + bias[j];
                }
            }
        }
        out
    }
}

impl Rows8 {
    /// Quantizes row-major input rows for a product with `matrix`.
    pub(super) fn quantize(values: &[f32], matrix: &Matrix8) -> Self {
        let (cols, block) = (matrix.cols, matrix.block);
        assert!(values.len().is_multiple_of(cols));
        let mut q = vec![0i8; values.len()];
        let mut scales = vec![0f32; values.len() / block];
        quantize_into(values, block, &mut q, &mut scales);
        Self {
            cols,
            block,
            values: q,
            scales,
        }
    }
}

/// Weight rows as a kernel reads them: values, block scales and lane offsets, row-major.
#[derive(Clone, Copy)]
struct Weights<'a> {
    values: &'a [i8],
    scales: &'a [f32],
    /// 128 × the sum of each lane's weights per block: the VNNI kernel multiplies `x + 128`
    /// (unsigned) by `w` and takes this off to get `x · w`.
    offsets: &'a [i32],
}

/// Dot products of input rows with one weight row `w`: `x` holds `out.len()` rows of
/// `w.values.len()` values with their block scales in `xs`; `size` values share a scale.
type Dots = fn(x: &[i8], xs: &[f32], w: Weights<'_>, size: usize, out: &mut [f32]);

/// Whether the arguments of a [`Dots`] agree (what the SIMD kernels need to stay in
/// bounds), without a division.
fn dots_fit(x: &[i8], xs: &[f32], w: Weights<'_>, size: usize, out: &[f32]) -> bool {
    size.is_multiple_of(CHUNK)
        && w.values.len() == w.scales.len() * size
        && w.offsets.len() == w.scales.len() * LANES
        && x.len() == out.len() * w.values.len()
        && xs.len() == out.len() * w.scales.len()
}

/// The fastest kernel this CPU runs (they all agree to the bit).
fn kernel() -> Dots {
    static CHOSEN: std::sync::OnceLock<Dots> = std::sync::OnceLock::new();
    *CHOSEN.get_or_init(choose)
}

#[cfg(target_arch = "x86_64")]
fn choose() -> Dots {
    if simd::has_vnni() {
        simd::dots_vnni
    } else if std::arch::is_x86_feature_detected!("avx2") {
        simd::dots_avx2
    } else {
        dots_portable
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn choose() -> Dots {
    dots_portable
}

/// Sums the lanes in the one order every kernel uses.
fn sum_lanes(l: &[f32; LANES]) -> f32 {
    ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
}

fn dots_portable(x: &[i8], xs: &[f32], w: Weights<'_>, size: usize, out: &mut [f32]) {
    assert!(dots_fit(x, xs, w, size, out));
    let (w, ws) = (w.values, w.scales);
    for ((x, xs), out) in x
        .chunks_exact(w.len().max(1))
        .zip(xs.chunks_exact(ws.len().max(1)))
        .zip(out.iter_mut())
    {
        let mut lanes = [0f32; LANES];
        for (((x, w), xs), ws) in x
            .chunks_exact(size)
            .zip(w.chunks_exact(size))
            .zip(xs)
            .zip(ws)
        {
            let mut partial = [0i32; LANES];
            for (x, w) in x.chunks_exact(CHUNK).zip(w.chunks_exact(CHUNK)) {
                for (sum, (x, w)) in partial.iter_mut().zip(
                    x.chunks_exact(CHUNK / LANES)
                        .zip(w.chunks_exact(CHUNK / LANES)),
                ) {
                    *sum += x
                        .iter()
                        .zip(w)
                        .map(|(&a, &b)| a as i32 * b as i32)
                        .sum::<i32>();
                }
            }
            let scale = xs * ws;
            for (lane, sum) in lanes.iter_mut().zip(partial) {
                *lane += sum as f32 * scale;
            }
        }
        *out = sum_lanes(&lanes);
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod simd {
    use std::arch::x86_64::{
        __m256, __m256i, _mm256_add_epi32, _mm256_add_ps, _mm256_cvtepi32_ps, _mm256_dpbusd_epi32,
        _mm256_loadu_si256, _mm256_madd_epi16, _mm256_maddubs_epi16, _mm256_mul_ps,
        _mm256_set1_epi16, _mm256_set1_epi8, _mm256_set1_ps, _mm256_setzero_ps,
        _mm256_setzero_si256, _mm256_sign_epi8, _mm256_storeu_ps, _mm256_sub_epi32,
        _mm256_xor_si256,
    };

    use super::{dots_fit, sum_lanes, Weights, CHUNK, LANES};

    /// Whether the CPU multiplies bytes into 32-bit sums in one instruction (AVX-512 VNNI
    /// on 256-bit registers).
    pub(super) fn has_vnni() -> bool {
        std::arch::is_x86_feature_detected!("avx512vnni")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx2")
    }

    /// The lanes' sum, in the order of [`sum_lanes`].
    ///
    /// # Safety
    /// The CPU has AVX.
    #[target_feature(enable = "avx")]
    unsafe fn total(lanes: __m256) -> f32 {
        let mut sum = [0f32; LANES];
        // SAFETY: `sum` holds eight f32.
        unsafe { _mm256_storeu_ps(sum.as_mut_ptr(), lanes) };
        sum_lanes(&sum)
    }

    /// [`super::dots_portable`] with AVX2; only chosen once the CPU is known to have it.
    pub(super) fn dots_avx2(x: &[i8], xs: &[f32], w: Weights<'_>, size: usize, out: &mut [f32]) {
        assert!(std::arch::is_x86_feature_detected!("avx2") && dots_fit(x, xs, w, size, out));
        // SAFETY: the CPU has AVX2, and `dots_fit` checked the lengths read within.
        unsafe { avx2(x, xs, w, size, out) }
    }

    /// [`super::dots_portable`] with VNNI; only chosen once the CPU is known to have it.
    pub(super) fn dots_vnni(x: &[i8], xs: &[f32], w: Weights<'_>, size: usize, out: &mut [f32]) {
        assert!(has_vnni() && dots_fit(x, xs, w, size, out));
        let rows = out.len() / 4 * 4;
        let (head, tail) = out.split_at_mut(rows);
        // SAFETY: the CPU has VNNI and AVX2, and `dots_fit` checked the lengths read within
        // (each call reads the rows of its own part of `out`).
        unsafe {
            vnni::<4>(x, xs, w, size, head);
            let cols = w.values.len();
            let blocks = w.scales.len();
            vnni::<1>(&x[rows * cols..], &xs[rows * blocks..], w, size, tail);
        }
    }

    /// # Safety
    /// The CPU has AVX2, and the arguments pass [`dots_fit`].
    #[target_feature(enable = "avx2")]
    unsafe fn avx2(x: &[i8], xs: &[f32], w: Weights<'_>, size: usize, out: &mut [f32]) {
        let ones = _mm256_set1_epi16(1);
        let (cols, blocks) = (w.values.len(), w.scales.len());
        for (r, out) in out.iter_mut().enumerate() {
            let mut lanes = _mm256_setzero_ps();
            for b in 0..blocks {
                let mut sums = _mm256_setzero_si256();
                for c in (b * size..(b + 1) * size).step_by(CHUNK) {
                    // SAFETY: input row `r` and column `c + CHUNK` lie within `x` and the
                    // weight row (`dots_fit`); unaligned loads are allowed.
                    let (xv, wv) = unsafe {
                        (
                            _mm256_loadu_si256(x.as_ptr().add(r * cols + c).cast::<__m256i>()),
                            _mm256_loadu_si256(w.values.as_ptr().add(c).cast::<__m256i>()),
                        )
                    };
                    // |x| · (w with x's sign) = x · w, as unsigned × signed bytes summed
                    // in pairs (within an i16: no value is -128), then in fours: lane k
                    // takes values 4k..4k+4 of each chunk.
                    let pairs =
                        _mm256_maddubs_epi16(_mm256_sign_epi8(xv, xv), _mm256_sign_epi8(wv, xv));
                    sums = _mm256_add_epi32(sums, _mm256_madd_epi16(pairs, ones));
                }
                let scale = _mm256_set1_ps(xs[r * blocks + b] * w.scales[b]);
                lanes = _mm256_add_ps(lanes, _mm256_mul_ps(_mm256_cvtepi32_ps(sums), scale));
            }
            // SAFETY: the CPU has AVX2, so AVX.
            *out = unsafe { total(lanes) };
        }
    }

    /// `K` input rows at a time (independent sums keep the multiplier busy).
    ///
    /// # Safety
    /// The CPU has AVX-512 VNNI and VL and AVX2, the arguments pass [`dots_fit`], and
    /// `out.len()` is a multiple of `K`.
    #[target_feature(enable = "avx2,avx512f,avx512vl,avx512vnni")]
    unsafe fn vnni<const K: usize>(
        x: &[i8],
        xs: &[f32],
        w: Weights<'_>,
        size: usize,
        out: &mut [f32],
    ) {
        // x XOR 0x80 is x + 128 as an unsigned byte.
        let flip = _mm256_set1_epi8(i8::MIN);
        let (cols, blocks) = (w.values.len(), w.scales.len());
        for (g, out) in out.chunks_exact_mut(K).enumerate() {
            let mut lanes = [_mm256_setzero_ps(); K];
            for b in 0..blocks {
                let mut sums = [_mm256_setzero_si256(); K];
                for c in (b * size..(b + 1) * size).step_by(CHUNK) {
                    // SAFETY: column `c + CHUNK` lies within the weight row (`dots_fit`).
                    let wv =
                        unsafe { _mm256_loadu_si256(w.values.as_ptr().add(c).cast::<__m256i>()) };
                    for (k, sum) in sums.iter_mut().enumerate() {
                        let row = g * K + k;
                        // SAFETY: input row `row` lies within `x` (`dots_fit`, and `out`
                        // has a value for it).
                        let xv = unsafe {
                            _mm256_loadu_si256(x.as_ptr().add(row * cols + c).cast::<__m256i>())
                        };
                        // (x + 128) · w in fours: lane k takes values 4k..4k+4 of a chunk.
                        *sum = _mm256_dpbusd_epi32(*sum, _mm256_xor_si256(xv, flip), wv);
                    }
                }
                // SAFETY: block `b`'s eight offsets lie within `w.offsets` (`dots_fit`).
                let offset = unsafe {
                    _mm256_loadu_si256(w.offsets.as_ptr().add(b * LANES).cast::<__m256i>())
                };
                for (k, (lane, sum)) in lanes.iter_mut().zip(sums).enumerate() {
                    // Σ (x + 128) · w − 128 · Σ w = Σ x · w: the integers the AVX2 kernel
                    // sums, so the same bits from here on.
                    let exact = _mm256_sub_epi32(sum, offset);
                    let scale = _mm256_set1_ps(xs[(g * K + k) * blocks + b] * w.scales[b]);
                    *lane = _mm256_add_ps(*lane, _mm256_mul_ps(_mm256_cvtepi32_ps(exact), scale));
                }
            }
            for (out, lanes) in out.iter_mut().zip(lanes) {
                // SAFETY: the CPU has AVX2, so AVX.
                *out = unsafe { total(lanes) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values in about ±1, with a few large ones (as activations have).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..n)
            .map(|i| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let v = (s >> 11) as f32 / (1u64 << 53) as f32 * 2.0 - 1.0;
                if i % 97 == 5 {
                    v * 40.0
                } else {
                    v
                }
            })
            .collect()
    }

    fn exact(x: &[f32], w: &[f32]) -> f32 {
        x.iter().zip(w).map(|(a, b)| a * b).sum()
    }

    /// The most rounding can move `x · w`: each value of a block moves by at most half its
    /// block's scale.
    fn rounding_bound(x: &[f32], w: &[f32], size: usize) -> f32 {
        let scale = |b: &[f32]| b.iter().fold(0f32, |m, v| m.max(v.abs())) / MAX;
        x.chunks_exact(size)
            .zip(w.chunks_exact(size))
            .map(|(x, w)| {
                let (sx, sw) = (scale(x), scale(w));
                x.iter()
                    .zip(w)
                    .map(|(a, b)| a.abs() * sw / 2.0 + b.abs() * sx / 2.0 + sx * sw / 4.0)
                    .sum::<f32>()
            })
            .sum()
    }

    #[test]
    fn a_product_is_within_rounding_of_the_f32_one_and_adds_the_bias() {
        // 96 columns take blocks of 32, 256 and 1536 blocks of 128; at 1536 the input rows
        // come in tiles of 10.
        for (cols, size, n) in [(96, 32, 5), (256, 128, 5), (1536, 128, 23)] {
            let rows = 24;
            let w = values(rows * cols, 1);
            let x = values(n * cols, 2);
            let bias: Vec<f32> = (0..rows).map(|j| j as f32 * 0.5).collect();
            let m = Matrix8::quantize(&w, rows, cols);
            assert_eq!(m.block, size);
            let out = m.product(&Rows8::quantize(&x, &m), &bias);
            assert_eq!(out.len(), n * rows);
            for r in 0..n {
                for j in 0..rows {
                    let (x, w) = (&x[r * cols..][..cols], &w[j * cols..][..cols]);
                    let want = exact(x, w) + bias[j];
                    let got = out[r * rows + j];
                    let bound = rounding_bound(x, w, size) + 1e-4 * (1.0 + want.abs());
                    assert!(
                        (got - want).abs() <= bound,
                        "{cols} columns, row {r}, output {j}: {got} vs {want} (bound {bound})"
                    );
                }
            }
        }
    }

    #[test]
    fn a_product_shared_over_threads_equals_one_computed_whole() {
        // Large enough to be shared out in runs of rows, with a last run cut short.
        let (rows, cols, n) = (RUN_ROWS * 3 + 7, 384, 16);
        assert!(rows * cols * n >= PARALLEL_WORK);
        let m = Matrix8::quantize(&values(rows * cols, 3), rows, cols);
        let input = Rows8::quantize(&values(n * cols, 4), &m);
        let bias: Vec<f32> = (0..rows).map(|j| j as f32).collect();
        let all = Weights {
            values: &m.values,
            scales: &m.scales,
            offsets: &m.offsets,
        };
        let whole = m.run(&input, all, &bias);
        let shared = m.product(&input, &bias);
        assert!(whole
            .iter()
            .zip(&shared)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
    }

    fn weights(m: &Matrix8) -> Weights<'_> {
        Weights {
            values: &m.values,
            scales: &m.scales,
            offsets: &m.offsets,
        }
    }

    #[test]
    fn every_kernel_gives_the_same_bits() {
        let mut kernels: Vec<(&str, Dots)> = vec![("chosen", kernel())];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                kernels.push(("avx2", simd::dots_avx2));
            }
            if simd::has_vnni() {
                kernels.push(("vnni", simd::dots_vnni));
            }
        }
        // Blocks of 128 and of 32; row counts with and without a remainder of four.
        for (cols, n) in [(1536, 7), (384, 8), (96, 5)] {
            for seed in 0..10 {
                let w = Matrix8::quantize(&values(cols, 2 * seed + 1), 1, cols);
                let x = Rows8::quantize(&values(n * cols, 2 * seed), &w);
                let mut portable = vec![0f32; n];
                dots_portable(&x.values, &x.scales, weights(&w), w.block, &mut portable);
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                for (name, dots) in &kernels {
                    let mut got = vec![0f32; n];
                    dots(&x.values, &x.scales, weights(&w), w.block, &mut got);
                    assert_eq!(
                        bits(&portable),
                        bits(&got),
                        "{name}, {cols} columns, seed {seed}"
                    );
                }
            }
        }
    }

    #[test]
    fn kernel_arguments_agree_only_when_every_length_does() {
        // `out` rows of x, `xs` scales, weight values, scales and offsets, block size; the
        // first agrees, each other breaks one agreement only.
        let cases = [
            (2, 128, 4, 64, 2, 16, 32, true),
            (2, 128, 8, 64, 4, 32, 16, false), // a block of part chunks
            (2, 128, 6, 64, 3, 24, 32, false), // values not the scales' blocks
            (2, 128, 4, 64, 2, 8, 32, false),  // offsets missing
            (2, 96, 4, 64, 2, 16, 32, false),  // an input row cut short
            (2, 128, 3, 64, 2, 16, 32, false), // an input scale missing
        ];
        for (rows, x, xs, values, scales, offsets, size, agree) in cases {
            let w = Weights {
                values: &vec![0i8; values],
                scales: &vec![0f32; scales],
                offsets: &vec![0i32; offsets],
            };
            let fit = dots_fit(&vec![0i8; x], &vec![0f32; xs], w, size, &vec![0f32; rows]);
            assert_eq!(
                fit, agree,
                "x {x}, xs {xs}, w {values}/{scales}/{offsets}, size {size}"
            );
        }
    }

    #[test]
    fn a_kernel_refuses_arguments_that_do_not_agree() {
        let w = Matrix8::quantize(&values(64, 1), 1, 64);
        let x = Rows8::quantize(&values(128, 2), &w);
        let mut out = vec![0f32; 3]; // two rows given, three asked for
        let call = std::panic::catch_unwind(move || {
            kernel()(&x.values, &x.scales, weights(&w), w.block, &mut out)
        });
        assert!(call.is_err());
    }

    #[test]
    fn only_rows_of_whole_blocks_are_quantized_in_the_largest_block_that_fits() {
        // A layer whose rows fit no block stays in f32 (the encoder asks `fits`).
        for cols in [0, 16, 48, 100] {
            assert!(!Matrix8::fits(cols), "{cols} columns");
        }
        for (cols, block) in [(32, 32), (96, 32), (128, 128), (384, 128), (1536, 128)] {
            assert!(Matrix8::fits(cols), "{cols} columns");
            assert_eq!(Matrix8::quantize(&values(cols, 5), 1, cols).block, block);
        }
    }

    #[test]
    fn extreme_blocks_quantize_without_overflow() {
        // A block of zeros has scale 0 and contributes nothing; a block at ±max stays ±127.
        let cols = 64;
        let mut w = vec![0f32; cols];
        w[32..]
            .iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = if i % 2 == 0 { 1e30 } else { -1.0 });
        let m = Matrix8::quantize(&w, 1, cols);
        assert_eq!(m.scales[0], 0.0);
        assert!(m.values[..32].iter().all(|&q| q == 0));
        assert_eq!(m.values[32], 127);
        assert!(m.values.iter().all(|&q| q != -128));
        let x = Rows8::quantize(&[-1f32; 64], &m);
        assert!(x.values.iter().all(|&q| q == -127));
        let out = m.product(&x, &[0.0]);
        assert!(out[0].is_finite() && out[0] < 0.0);
    }
}
