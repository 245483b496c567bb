//! 8-bit matrix products for the encoder's linear layers (`[resolver] weights = "q8"`).
//!
//! Weights are quantized once at load, the input of each product as it comes, both in
//! blocks of values sharing one f32 scale (as GGML's Q8_0 does): a block's scale is its
//! largest magnitude over 127, and its values are rounded to `-127..=127`. A block is 128
//! values where the row length allows (fewer scales to apply; fused top-1 within 0.004 of
//! f32 on the five public sets), else 32.
//!
//! A product of an input row with a weight row is, block by block, the block's exact
//! integer dot product (as f32: at most 128 · 127² < 2²⁴, so exact) times the input block's
//! scale times the weight block's, added in block order into one f32 sum from zero.
//!
//! # Same bits on every CPU
//!
//! Nodes embed the rows they apply themselves, and every node of a cluster must rank alike,
//! so a product may not depend on the instructions a CPU has. The three kernels here
//! (portable; AVX2; AVX-512 VNNI, chosen at run time) compute the same bits: a block's
//! integer is exact in each, and the f32 steps after it are the ones above, each multiply
//! and add rounded on its own (never fused), in the same order. A test compares their bits
//! on random data. Inputs are quantized by portable code or with AVX-512 where the CPU has
//! it, to the same bits (a test compares those too).
//!
//! # Layout and work
//!
//! The VNNI kernel keeps its weights interleaved: 16 weight rows at a time, four bytes of
//! each in turn ([`GROUP`]), so one 512-bit register holds four values of 16 rows and one
//! `dpbusd` adds the products of four input values with each of the 16 rows into its own
//! lane (the input's four bytes broadcast). Each lane is one output, so a block ends with
//! one vector of 16 integers to scale, and no sum across lanes. It takes tiles of 4 input
//! rows by 32 weight rows, so each register of weights loaded serves four inputs. The AVX2
//! kernel keeps the same layout, a group's 16 rows in two 256-bit registers: without
//! `dpbusd`, four values take a sign, a `maddubs` and a `madd` per register, but still no sum
//! across lanes (which cost it as much as its products when it read weights row by row).
//! The portable kernel reads weights row by row.
//!
//! A large product is shared out over rayon's threads by runs of weight rows, a few per
//! thread. Ask runners run on rayon's threads themselves (see `semantic`), so when the
//! other threads are busy a runner computes its own shares instead of handing them over and
//! waiting. (The rest of the encoder runs on candle, whose softmax takes `exp` from the
//! platform's math library.)

/// Values sharing one scale, largest first: a row takes the first that divides its length.
const BLOCKS: [usize; 2] = [128, 32];
/// A block is whole chunks of this many values.
const CHUNK: usize = 32;
/// Weight rows the VNNI kernel interleaves (the 16 i32 lanes of a 512-bit register); runs
/// of a product shared over threads are whole groups.
const GROUP: usize = 16;
/// Multiply-adds from which a product is shared out over threads (a short query's layer
/// is a few million).
const PARALLEL_WORK: usize = 1 << 20;
/// Bytes of input rows a kernel call takes at once (a tile kept in the first-level cache).
const TILE_BYTES: usize = 16 * 1024;
/// Largest magnitude of a quantized value. Never -128, so that the AVX2 kernel's pairs of
/// products stay within an i16 (2 · 127 · 127 < 32,768).
const MAX: f32 = 127.0;

/// A quantized matrix of `rows` rows of `cols` values (a linear layer's weight, one row per
/// output), laid out for the kernel that multiplies by it.
pub(super) struct Matrix8 {
    rows: usize,
    cols: usize,
    /// Values per scale.
    block: usize,
    kernel: Kernel,
    /// `rows × cols` values in the kernel's layout ([`Kernel::group`]), with zero rows up
    /// to a whole group.
    values: Vec<i8>,
    /// One per block of every stored row, in the kernel's layout.
    scales: Vec<f32>,
    /// 128 × the sum of each block's values, laid out as `scales`: the VNNI kernel
    /// multiplies `x + 128` by `w` and takes this off to get `x · w`.
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

/// Quantizes `values` (whole blocks of `size`) into `out`, one scale per block to `scales`:
/// with AVX-512 where the CPU has it and the blocks are whole registers, else
/// [`quantize_portable`]; both give the same bits.
fn quantize_into(values: &[f32], size: usize, out: &mut [i8], scales: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if simd::quantizes(size) {
        return simd::quantize(values, size, out, scales);
    }
    quantize_portable(values, size, out, scales);
}

fn quantize_portable(values: &[f32], size: usize, out: &mut [i8], scales: &mut [f32]) {
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

/// Row-major `rows × cols` values and their per-block `scales` and `offsets`, interleaved
/// by `group` rows (four values of each row in turn; per block, one scale of each row in
/// turn), with zero rows added up to a whole group. A group of 1 is row-major.
fn interleave(
    (values, scales, offsets): (Vec<i8>, Vec<f32>, Vec<i32>),
    rows: usize,
    cols: usize,
    group: usize,
) -> (Vec<i8>, Vec<f32>, Vec<i32>) {
    if group == 1 {
        return (values, scales, offsets);
    }
    let blocks = scales.len() / rows.max(1);
    let stored = rows.next_multiple_of(group);
    let mut v = vec![0i8; stored * cols];
    let mut s = vec![0f32; stored * blocks];
    let mut o = vec![0i32; stored * blocks];
    for row in 0..rows {
        let (g, lane) = (row / group, row % group);
        for q in 0..cols / 4 {
            let at = ((g * cols / 4 + q) * group + lane) * 4;
            v[at..at + 4].copy_from_slice(&values[row * cols + 4 * q..][..4]);
        }
        for b in 0..blocks {
            let at = (g * blocks + b) * group + lane;
            s[at] = scales[row * blocks + b];
            o[at] = offsets[row * blocks + b];
        }
    }
    (v, s, o)
}

impl Matrix8 {
    /// Whether a matrix of `cols` columns can be quantized (whole blocks per row).
    pub(super) fn fits(cols: usize) -> bool {
        block_for(cols).is_some()
    }

    /// Quantizes a row-major `rows × cols` matrix for this CPU's kernel; `cols` must
    /// [fit](Self::fits).
    pub(super) fn quantize(values: &[f32], rows: usize, cols: usize) -> Self {
        Self::quantize_for(kernel(), values, rows, cols)
    }

    /// [`Matrix8::quantize`] for `kernel`.
    fn quantize_for(kernel: Kernel, values: &[f32], rows: usize, cols: usize) -> Self {
        let block = block_for(cols).expect("a row length that fits");
        assert_eq!(values.len(), rows * cols);
        let mut q = vec![0i8; values.len()];
        let mut scales = vec![0f32; values.len() / block];
        quantize_into(values, block, &mut q, &mut scales);
        let offsets = q
            .chunks_exact(block)
            .map(|block| 128 * block.iter().map(|&w| i32::from(w)).sum::<i32>())
            .collect();
        let (values, scales, offsets) = interleave((q, scales, offsets), rows, cols, kernel.group);
        Self {
            rows,
            cols,
            block,
            kernel,
            values,
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
        let run = self.run_rows(n);
        let blocks = self.cols / self.block;
        let x = self.kernel.input(&input.values);
        if run >= self.rows {
            // One share: computed here, without a hand-over to the pool and back.
            return self.run(&x, &input.scales, self.weights(), bias);
        }
        // Each run's outputs, input row by input row: `n × run` values (fewer in the last).
        let runs: Vec<Vec<f32>> = self
            .values
            .par_chunks(run * self.cols)
            .zip(self.scales.par_chunks(run * blocks))
            .zip(self.offsets.par_chunks(run * blocks))
            .zip(bias.par_chunks(run))
            .map(|(((values, scales), offsets), bias)| {
                let weights = Weights {
                    rows: bias.len(),
                    cols: self.cols,
                    group: self.kernel.group,
                    values,
                    scales,
                    offsets,
                };
                self.run(&x, &input.scales, weights, bias)
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

    fn weights(&self) -> Weights<'_> {
        Weights {
            rows: self.rows,
            cols: self.cols,
            group: self.kernel.group,
            values: &self.values,
            scales: &self.scales,
            offsets: &self.offsets,
        }
    }

    /// Weight rows per share of a product with `n` input rows: all of them when the product
    /// is small, else a few shares per thread (whole [`GROUP`]s), each large enough that
    /// handing it to a thread costs little beside it.
    fn run_rows(&self, n: usize) -> usize {
        let work = n * self.rows * self.cols;
        if work < PARALLEL_WORK {
            return self.rows.max(1);
        }
        let shares = (2 * rayon::current_num_threads()).max(1);
        let fewest = PARALLEL_WORK.div_ceil((n * self.cols).max(1));
        self.rows
            .div_ceil(shares)
            .max(fewest)
            .next_multiple_of(GROUP)
            .min(self.rows.max(1))
    }

    /// The products of every input row (`x`, as the kernel takes it) with one run of weight
    /// rows: `n × width` values.
    fn run(&self, x: &[i8], xs: &[f32], weights: Weights<'_>, bias: &[f32]) -> Vec<f32> {
        let blocks = self.cols / self.block;
        let n = x.len() / self.cols;
        let width = bias.len();
        let mut out = vec![0f32; n * width];
        // Input rows in tiles that stay in the first-level cache while every weight row of
        // the run (in the second-level cache) meets them.
        let tile = (TILE_BYTES / self.cols).max(1);
        for ((x, xs), out) in x
            .chunks(tile * self.cols)
            .zip(xs.chunks(tile * blocks))
            .zip(out.chunks_mut(tile * width))
        {
            (self.kernel.dots)(x, xs, weights, self.block, out);
        }
        for row in out.chunks_exact_mut(width.max(1)) {
            for (value, bias) in row.iter_mut().zip(bias) {
                *value += bias;
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

/// A vector of 8-bit codes (−127..=127) prepared for exact integer dot products with many
/// others of its length (the dense half of the resolver scans every row's views with one).
/// The products are exact integers, so every CPU and kernel gives the same.
#[derive(Debug, Clone)]
pub(crate) struct ExactDot {
    codes: Vec<i8>,
    /// `code + 128` as unsigned bytes, the side VNNI multiplies unsigned.
    biased: Vec<i8>,
    simd: bool,
}

impl ExactDot {
    /// `codes` must lie within −127..=127 (what [`ExactDot::dot`] needs for exact sums).
    pub(crate) fn new(codes: &[i8]) -> Self {
        #[cfg(target_arch = "x86_64")]
        let simd = simd::has_vnni();
        #[cfg(not(target_arch = "x86_64"))]
        let simd = false;
        Self {
            codes: codes.to_vec(),
            biased: codes.iter().map(|&c| c ^ i8::MIN).collect(),
            simd,
        }
    }

    /// `Σ self[i] · other[i]`; `other` has this vector's length and its codes lie within
    /// −127..=127.
    #[cfg(test)]
    pub(crate) fn dot(&self, other: &[i8]) -> i32 {
        let mut out = [0];
        self.dots(other, &mut out);
        out[0]
    }

    /// [`ExactDot::dot`] of each of the vectors laid one after the other in `vectors`, into
    /// `out` (one per vector).
    pub(crate) fn dots(&self, vectors: &[i8], out: &mut [i32]) {
        assert_eq!(vectors.len(), out.len() * self.codes.len());
        #[cfg(target_arch = "x86_64")]
        if self.simd {
            return simd::exact_dots(&self.codes, &self.biased, vectors, out);
        }
        if self.codes.is_empty() {
            return out.fill(0);
        }
        for (v, out) in vectors.chunks_exact(self.codes.len()).zip(out) {
            *out = exact_dot_portable(&self.codes, v);
        }
    }
}

/// The integer dot product of two codes vectors of one length. Sixteen lanes the compiler
/// vectorises; the sum of 384 products of at most 127² is far inside `i32`.
fn exact_dot_portable(a: &[i8], b: &[i8]) -> i32 {
    let mut lanes = [0i32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let tail: i32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(&x, &y)| i32::from(x) * i32::from(y))
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..16 {
            lanes[i] += i32::from(x[i]) * i32::from(y[i]);
        }
    }
    lanes.iter().sum::<i32>() + tail
}

/// Weight rows as a kernel reads them: values, block scales and offsets, in the layout of
/// the kernel's [`Kernel::group`].
#[derive(Clone, Copy)]
struct Weights<'a> {
    /// Rows (outputs); the layout holds them rounded up to whole groups.
    rows: usize,
    /// Values per row.
    cols: usize,
    /// Rows interleaved together (1: row-major); see [`interleave`].
    group: usize,
    values: &'a [i8],
    scales: &'a [f32],
    /// 128 × the sum of each block's values (see [`Matrix8::offsets`]).
    offsets: &'a [i32],
}

/// Dot products of input rows with weight rows: `x` holds rows of `w.cols` values with
/// their block scales in `xs`, `size` values sharing a scale; `out[r · m + j]` is the
/// product of input row `r` with weight row `j` of `m`.
type Dots = fn(x: &[i8], xs: &[f32], w: Weights<'_>, size: usize, out: &mut [f32]);

/// A kernel, and the forms it takes its input and its weights in.
#[derive(Clone, Copy)]
struct Kernel {
    /// What the node's log calls it.
    name: &'static str,
    dots: Dots,
    /// Whether input values come plus 128, as unsigned bytes (each stored in an `i8`).
    biased: bool,
    /// Weight rows interleaved together ([`interleave`]).
    group: usize,
}

impl Kernel {
    /// The input values as this kernel takes them.
    fn input<'a>(&self, values: &'a [i8]) -> std::borrow::Cow<'a, [i8]> {
        if self.biased {
            // x XOR 0x80 is x + 128 as an unsigned byte.
            values.iter().map(|&v| v ^ i8::MIN).collect()
        } else {
            values.into()
        }
    }
}

/// Whether the arguments of a [`Dots`] agree (what the SIMD kernels need to stay in
/// bounds).
fn dots_fit(x: &[i8], xs: &[f32], w: Weights<'_>, size: usize, out: &[f32]) -> bool {
    let Some(blocks) = w.cols.checked_div(size) else {
        return false;
    };
    if !size.is_multiple_of(CHUNK) || w.cols != blocks * size || blocks == 0 || w.group == 0 {
        return false;
    }
    let n = x.len() / w.cols;
    let stored = w.rows.next_multiple_of(w.group);
    x.len() == n * w.cols
        && w.values.len() == stored * w.cols
        && w.scales.len() == stored * blocks
        && w.offsets.len() == w.scales.len()
        && xs.len() == n * blocks
        && out.len() == n * w.rows
}

/// The name of the kernel q8 products run on this CPU: `avx512-vnni`, `avx2` or
/// `portable`.
pub(super) fn kernel_name() -> &'static str {
    kernel().name
}

/// The fastest kernel this CPU runs (they all agree to the bit).
fn kernel() -> Kernel {
    static CHOSEN: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();
    *CHOSEN.get_or_init(choose)
}

const PORTABLE: Kernel = Kernel {
    name: "portable",
    dots: dots_portable,
    biased: false,
    group: 1,
};

#[cfg(target_arch = "x86_64")]
fn choose() -> Kernel {
    if simd::has_vnni() {
        simd::VNNI
    } else if std::arch::is_x86_feature_detected!("avx2") {
        simd::AVX2
    } else {
        PORTABLE
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn choose() -> Kernel {
    PORTABLE
}

/// One block's step of a product: its exact integer `sum` scaled by the input block's and
/// the weight block's scales, added to `acc`. Every kernel takes exactly these steps.
#[inline]
fn add_block(acc: f32, sum: i32, xs: f32, ws: f32) -> f32 {
    acc + sum as f32 * (xs * ws)
}

fn dots_portable(x: &[i8], xs: &[f32], w: Weights<'_>, size: usize, out: &mut [f32]) {
    assert!(w.group == 1 && dots_fit(x, xs, w, size, out));
    let blocks = w.cols / size;
    for ((x, xs), out) in x
        .chunks_exact(w.cols)
        .zip(xs.chunks_exact(blocks))
        .zip(out.chunks_exact_mut(w.rows.max(1)))
    {
        for ((w, ws), out) in w
            .values
            .chunks_exact(w.cols)
            .zip(w.scales.chunks_exact(blocks))
            .zip(out.iter_mut())
        {
            let mut acc = 0f32;
            for (((x, w), xs), ws) in x
                .chunks_exact(size)
                .zip(w.chunks_exact(size))
                .zip(xs)
                .zip(ws)
            {
                let sum = x
                    .iter()
                    .zip(w)
                    .map(|(&a, &b)| i32::from(a) * i32::from(b))
                    .sum::<i32>();
                acc = add_block(acc, sum, *xs, *ws);
            }
            *out = acc;
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod simd {
    use std::arch::x86_64::{
        __m256, __m256i, __m512, __m512i, _mm256_add_epi32, _mm256_add_ps, _mm256_cvtepi32_ps,
        _mm256_loadu_ps, _mm256_loadu_si256, _mm256_madd_epi16, _mm256_maddubs_epi16,
        _mm256_mul_ps, _mm256_set1_epi16, _mm256_set1_epi32, _mm256_set1_ps, _mm256_setzero_ps,
        _mm256_setzero_si256, _mm256_sign_epi8, _mm256_storeu_ps, _mm512_add_ps,
        _mm512_cvtepi32_ps, _mm512_dpbusd_epi32, _mm512_loadu_ps, _mm512_loadu_si512,
        _mm512_mask_storeu_ps, _mm512_mul_ps, _mm512_reduce_add_epi32, _mm512_set1_epi32,
        _mm512_set1_epi8, _mm512_set1_ps, _mm512_setzero_ps, _mm512_setzero_si512,
        _mm512_slli_epi32, _mm512_sub_epi32,
    };

    use std::arch::x86_64::{
        __m128i, _mm512_and_si512, _mm512_castps_si512, _mm512_castsi512_ps, _mm512_cvtepi32_epi8,
        _mm512_cvttps_epi32, _mm512_max_ps, _mm512_min_ps, _mm512_or_si512, _mm512_reduce_max_ps,
        _mm_storeu_si128,
    };

    use super::{dots_fit, Kernel, Weights, GROUP, MAX};

    pub(super) const AVX2: Kernel = Kernel {
        name: "avx2",
        dots: dots_avx2,
        biased: false,
        group: GROUP,
    };

    /// Input rows of the AVX2 kernel's tile: 8 integer sums (a group's 16 rows are two
    /// registers), 2 loaded weight registers and 3 temporaries in AVX2's 16 registers.
    const AVX2_INPUTS: usize = 4;

    pub(super) const VNNI: Kernel = Kernel {
        name: "avx512-vnni",
        dots: dots_vnni,
        biased: true,
        group: GROUP,
    };

    /// Input rows of the VNNI kernel's tile: with [`TILE_GROUPS`] groups of weight rows, 8
    /// integer and 8 f32 sums, 2 loaded weight registers and a broadcast input, in
    /// AVX-512's 32 registers.
    const TILE_INPUTS: usize = 4;
    /// Groups of [`GROUP`] weight rows in the VNNI kernel's tile.
    const TILE_GROUPS: usize = 2;

    /// Values of one AVX-512 register of f32.
    const F32S: usize = 16;
    /// Whether [`quantize`] takes blocks of `size` on this CPU.
    pub(super) fn quantizes(size: usize) -> bool {
        static AVX512: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        size.is_multiple_of(F32S)
            && size > 0
            && *AVX512.get_or_init(|| {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512vl")
            })
    }

    /// [`super::quantize_portable`] with AVX-512, for blocks [`quantizes`] takes.
    pub(super) fn quantize(values: &[f32], size: usize, out: &mut [i8], scales: &mut [f32]) {
        assert!(quantizes(size));
        // SAFETY: the CPU has AVX-512F and VL; the loop reads and writes whole blocks of
        // whole registers within the slices it zips.
        unsafe { quantize_avx512(values, size, out, scales) }
    }

    /// # Safety
    /// The CPU has AVX-512F and VL, and `size` is a non-zero multiple of [`F32S`].
    #[target_feature(enable = "avx512f,avx512vl")]
    unsafe fn quantize_avx512(values: &[f32], size: usize, out: &mut [i8], scales: &mut [f32]) {
        let magnitude = _mm512_set1_epi32(i32::MAX);
        let sign = _mm512_set1_epi32(i32::MIN);
        let half = _mm512_set1_ps(0.5);
        let (low, high) = (_mm512_set1_ps(-MAX), _mm512_set1_ps(MAX));
        for ((block, out), scale) in values
            .chunks_exact(size)
            .zip(out.chunks_exact_mut(size))
            .zip(scales.iter_mut())
        {
            // The largest magnitude. `max(|v|, m)` gives `m` where `|v|` is NaN, as
            // `f32::max` does; maxima of non-NaN values are exact in any order.
            let mut largest = _mm512_setzero_ps();
            for v in block.chunks_exact(F32S) {
                // SAFETY: `v` holds 16 f32.
                let v = unsafe { _mm512_loadu_ps(v.as_ptr()) };
                let abs = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), magnitude));
                largest = _mm512_max_ps(abs, largest);
            }
            let s = _mm512_reduce_max_ps(largest) / MAX;
            *scale = s;
            let inverse = _mm512_set1_ps(if s > 0.0 { 1.0 / s } else { 0.0 });
            for (v, out) in block.chunks_exact(F32S).zip(out.chunks_exact_mut(F32S)) {
                // SAFETY: `v` holds 16 f32.
                let t = _mm512_mul_ps(unsafe { _mm512_loadu_ps(v.as_ptr()) }, inverse);
                // `clamp`, keeping NaN: `max`/`min` give their second operand for a NaN.
                let t = _mm512_min_ps(high, _mm512_max_ps(low, t));
                let signed_half = _mm512_castsi512_ps(_mm512_or_si512(
                    _mm512_and_si512(_mm512_castps_si512(t), sign),
                    _mm512_castps_si512(half),
                ));
                // Truncation toward zero, as `as i8` does within range. NaN converts to
                // 0x8000_0000, whose low byte (all the narrowing below keeps) is 0, as
                // `as i8` gives for NaN.
                let q = _mm512_cvttps_epi32(_mm512_add_ps(t, signed_half));
                // SAFETY: `out` holds 16 bytes.
                unsafe {
                    _mm_storeu_si128(out.as_mut_ptr().cast::<__m128i>(), _mm512_cvtepi32_epi8(q))
                };
            }
        }
    }

    /// [`super::ExactDot::dots`] with VNNI: per vector `v`, `Σ (a + 128) · v − 128 · Σ v`
    /// over whole 64-byte chunks (the first as unsigned by signed bytes, the second as ones
    /// by signed bytes, into 32-bit sums: exact), then the rest one by one.
    pub(super) fn exact_dots(a: &[i8], biased: &[i8], vectors: &[i8], out: &mut [i32]) {
        assert!(has_vnni() && biased.len() == a.len() && vectors.len() == out.len() * a.len());
        // SAFETY: the CPU has VNNI and AVX-512F, and the lengths agree.
        unsafe { exact_dots_vnni(a, biased, vectors, out) }
    }

    /// # Safety
    /// The CPU has AVX-512 VNNI and F; `biased` has `a`'s length and `vectors` holds
    /// `out.len()` vectors of it.
    #[target_feature(enable = "avx512f,avx512vnni")]
    unsafe fn exact_dots_vnni(a: &[i8], biased: &[i8], vectors: &[i8], out: &mut [i32]) {
        const WIDE: usize = 64;
        let dim = a.len();
        let whole = dim / WIDE * WIDE;
        let ones = _mm512_set1_epi8(1);
        for (i, out) in out.iter_mut().enumerate() {
            let v = &vectors[i * dim..][..dim];
            let (mut products, mut sums) = (_mm512_setzero_si512(), _mm512_setzero_si512());
            for c in (0..whole).step_by(WIDE) {
                // SAFETY: `c + WIDE <= whole <= dim`, the length of `v` and `biased`.
                let (bv, vv) = unsafe {
                    (
                        _mm512_loadu_si512(biased.as_ptr().add(c).cast::<__m512i>()),
                        _mm512_loadu_si512(v.as_ptr().add(c).cast::<__m512i>()),
                    )
                };
                products = _mm512_dpbusd_epi32(products, bv, vv);
                sums = _mm512_dpbusd_epi32(sums, ones, vv);
            }
            let tail: i32 = a[whole..]
                .iter()
                .zip(&v[whole..])
                .map(|(&x, &y)| i32::from(x) * i32::from(y))
                .sum();
            // Each lane: Σ (a + 128) · v − 128 · Σ v of its values, within an i32.
            let exact = _mm512_sub_epi32(products, _mm512_slli_epi32::<7>(sums));
            *out = _mm512_reduce_add_epi32(exact) + tail;
        }
    }

    /// Whether the CPU multiplies bytes into 32-bit sums in one instruction (AVX-512 VNNI,
    /// on 256- and 512-bit registers).
    pub(super) fn has_vnni() -> bool {
        std::arch::is_x86_feature_detected!("avx512vnni")
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx2")
    }

    /// Input values `at..at + 4` as one i32, to broadcast against four values of each row
    /// of an interleaved group.
    ///
    /// # Safety
    /// `at + 4` is at most `x.len()`.
    #[inline(always)]
    unsafe fn four_values(x: &[i8], at: usize) -> i32 {
        debug_assert!(at + 4 <= x.len());
        // SAFETY: the caller keeps the four bytes within `x`; the read may be unaligned.
        unsafe { x.as_ptr().add(at).cast::<i32>().read_unaligned() }
    }

    /// [`super::dots_portable`] with AVX2; only chosen once the CPU is known to have it.
    fn dots_avx2(x: &[i8], xs: &[f32], w: Weights<'_>, size: usize, out: &mut [f32]) {
        const K: usize = AVX2_INPUTS;
        assert!(
            std::arch::is_x86_feature_detected!("avx2")
                && w.group == GROUP
                && dots_fit(x, xs, w, size, out)
        );
        let n = x.len() / w.cols;
        let whole_n = n / K * K;
        // SAFETY: the CPU has AVX2, `dots_fit` checked the lengths, and every call's tile
        // lies within the `n` input rows and the stored groups.
        unsafe {
            for g in 0..w.rows.div_ceil(GROUP) {
                for r in (0..whole_n).step_by(K) {
                    avx2::<K>(x, xs, w, size, out, r, g);
                }
                for r in whole_n..n {
                    avx2::<1>(x, xs, w, size, out, r, g);
                }
            }
        }
    }

    /// The products of input rows `r..r + K` with the 16 weight rows of group `g`, held in
    /// two registers of eight: per four input values, |x| (broadcast) times each row's
    /// four values with x's signs, summed in pairs then in fours into the row's own lane
    /// (no value is −128, so a pair stays within an i16); then the block's step
    /// ([`super::add_block`]) on eight rows at once.
    ///
    /// # Safety
    /// The CPU has AVX2, the arguments pass [`dots_fit`] with weights interleaved by
    /// [`GROUP`], and `r + K` and `g + 1` are at most the input rows and the stored groups.
    #[target_feature(enable = "avx2")]
    unsafe fn avx2<const K: usize>(
        x: &[i8],
        xs: &[f32],
        w: Weights<'_>,
        size: usize,
        out: &mut [f32],
        r: usize,
        g: usize,
    ) {
        const HALF: usize = GROUP / 2;
        let ones = _mm256_set1_epi16(1);
        let cols = w.cols;
        let blocks = cols / size;
        let mut acc: [[__m256; 2]; K] = [[_mm256_setzero_ps(); 2]; K];
        for b in 0..blocks {
            let mut sums = [[_mm256_setzero_si256(); 2]; K];
            for q in (b * size / 4)..((b + 1) * size / 4) {
                // SAFETY: group `g` holds `cols / 4` runs of 64 bytes (four values of its
                // 16 rows) within the weights (`dots_fit`, the caller's bound).
                let wv = unsafe {
                    let at = w.values.as_ptr().add((g * cols / 4 + q) * 4 * GROUP);
                    [
                        _mm256_loadu_si256(at.cast::<__m256i>()),
                        _mm256_loadu_si256(at.add(4 * HALF).cast::<__m256i>()),
                    ]
                };
                for (k, sums) in sums.iter_mut().enumerate() {
                    // SAFETY: values `4q..4q + 4` of input row `r + k` lie within `x`.
                    let xv = _mm256_set1_epi32(unsafe { four_values(x, (r + k) * cols + 4 * q) });
                    let magnitude = _mm256_sign_epi8(xv, xv);
                    for (sum, wv) in sums.iter_mut().zip(wv) {
                        let pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(wv, xv));
                        *sum = _mm256_add_epi32(*sum, _mm256_madd_epi16(pairs, ones));
                    }
                }
            }
            let at = (g * blocks + b) * GROUP;
            // SAFETY: block `b` of group `g` has 16 scales within `w.scales` (`dots_fit`).
            let ws = unsafe {
                [
                    _mm256_loadu_ps(w.scales.as_ptr().add(at)),
                    _mm256_loadu_ps(w.scales.as_ptr().add(at + HALF)),
                ]
            };
            for (k, (acc, sums)) in acc.iter_mut().zip(&sums).enumerate() {
                let input_scale = _mm256_set1_ps(xs[(r + k) * blocks + b]);
                for ((acc, sum), ws) in acc.iter_mut().zip(sums).zip(ws) {
                    // acc + sum · (xs · ws), lane by lane, each step rounded.
                    let scale = _mm256_mul_ps(input_scale, ws);
                    *acc = _mm256_add_ps(*acc, _mm256_mul_ps(_mm256_cvtepi32_ps(*sum), scale));
                }
            }
        }
        let m = w.rows;
        for (k, acc) in acc.iter().enumerate() {
            for (h, acc) in acc.iter().enumerate() {
                let first = g * GROUP + h * HALF;
                // Rows past `m` are the zeros that fill the last group: not stored.
                let lanes = m.saturating_sub(first).min(HALF);
                if lanes == 0 {
                    continue;
                }
                let mut values = [0f32; HALF];
                // SAFETY: `values` holds eight f32.
                unsafe { _mm256_storeu_ps(values.as_mut_ptr(), *acc) };
                out[(r + k) * m + first..][..lanes].copy_from_slice(&values[..lanes]);
            }
        }
    }

    /// [`super::dots_portable`] with VNNI, for input values plus 128 ([`Kernel::biased`])
    /// and weights interleaved by [`GROUP`]; only chosen once the CPU is known to have it.
    /// Tiles of [`TILE_INPUTS`] input rows by [`TILE_GROUPS`] groups, and the rest by
    /// smaller tiles.
    fn dots_vnni(x: &[i8], xs: &[f32], w: Weights<'_>, size: usize, out: &mut [f32]) {
        const K: usize = TILE_INPUTS;
        const G: usize = TILE_GROUPS;
        assert!(has_vnni() && w.group == GROUP && dots_fit(x, xs, w, size, out));
        let n = x.len() / w.cols;
        let groups = w.rows.div_ceil(GROUP);
        let (whole_n, whole_g) = (n / K * K, groups / G * G);
        // SAFETY: the CPU has VNNI and AVX-512F, `dots_fit` checked the lengths, and every
        // call's tile lies within the `n` input rows and the stored groups.
        unsafe {
            for g in (0..whole_g).step_by(G) {
                for r in (0..whole_n).step_by(K) {
                    vnni::<K, G>(x, xs, w, size, out, r, g);
                }
                for r in whole_n..n {
                    vnni::<1, G>(x, xs, w, size, out, r, g);
                }
            }
            for g in whole_g..groups {
                for r in (0..whole_n).step_by(K) {
                    vnni::<K, 1>(x, xs, w, size, out, r, g);
                }
                for r in whole_n..n {
                    vnni::<1, 1>(x, xs, w, size, out, r, g);
                }
            }
        }
    }

    /// The products of input rows `r..r + K` with the weight rows of groups `g..g + G`:
    /// per block, one `dpbusd` per four input values, input row and group, each lane a
    /// weight row's sum; then the block's step ([`super::add_block`]) on 16 rows at once.
    ///
    /// # Safety
    /// The CPU has AVX-512 VNNI and F, the arguments pass [`dots_fit`] with weights
    /// interleaved by [`GROUP`], `x` holds input values plus 128 ([`Kernel::biased`]), and
    /// `r + K` and `g + G` are at most the input rows and the stored groups.
    #[target_feature(enable = "avx512f,avx512vnni")]
    unsafe fn vnni<const K: usize, const G: usize>(
        x: &[i8],
        xs: &[f32],
        w: Weights<'_>,
        size: usize,
        out: &mut [f32],
        r: usize,
        g: usize,
    ) {
        let cols = w.cols;
        let blocks = cols / size;
        let mut acc: [[__m512; G]; K] = [[_mm512_setzero_ps(); G]; K];
        for b in 0..blocks {
            let mut sums = [[_mm512_setzero_si512(); G]; K];
            for q in (b * size / 4)..((b + 1) * size / 4) {
                let mut wv = [_mm512_setzero_si512(); G];
                for (gg, wv) in wv.iter_mut().enumerate() {
                    // SAFETY: group `g + gg` holds `cols / 4` runs of 64 bytes (four values
                    // of its 16 rows) within the weights (`dots_fit`, the caller's bound).
                    *wv = unsafe {
                        _mm512_loadu_si512(
                            w.values
                                .as_ptr()
                                .add(((g + gg) * cols / 4 + q) * 4 * GROUP)
                                .cast::<__m512i>(),
                        )
                    };
                }
                for (k, sums) in sums.iter_mut().enumerate() {
                    // SAFETY: values `4q..4q + 4` of input row `r + k` lie within `x`.
                    let xv = _mm512_set1_epi32(unsafe { four_values(x, (r + k) * cols + 4 * q) });
                    for (sum, wv) in sums.iter_mut().zip(wv) {
                        // Lane l: (x + 128) · w of the four values, for the group's row l.
                        *sum = _mm512_dpbusd_epi32(*sum, xv, wv);
                    }
                }
            }
            for gg in 0..G {
                let at = ((g + gg) * blocks + b) * GROUP;
                // SAFETY: block `b` of group `g + gg` has 16 scales and offsets within
                // `w.scales` and `w.offsets` (`dots_fit`).
                let (offset, ws) = unsafe {
                    (
                        _mm512_loadu_si512(w.offsets.as_ptr().add(at).cast::<__m512i>()),
                        _mm512_loadu_ps(w.scales.as_ptr().add(at)),
                    )
                };
                for k in 0..K {
                    // Σ (x + 128) · w − 128 · Σ w = Σ x · w, exactly; then `add_block`
                    // lane by lane: acc + sum · (xs · ws), each step rounded.
                    let exact = _mm512_sub_epi32(sums[k][gg], offset);
                    let scale = _mm512_mul_ps(_mm512_set1_ps(xs[(r + k) * blocks + b]), ws);
                    acc[k][gg] =
                        _mm512_add_ps(acc[k][gg], _mm512_mul_ps(_mm512_cvtepi32_ps(exact), scale));
                }
            }
        }
        let m = w.rows;
        for (k, acc) in acc.iter().enumerate() {
            for (gg, acc) in acc.iter().enumerate() {
                let first = (g + gg) * GROUP;
                // Rows past `m` are the zeros that fill the last group: not stored.
                let lanes = m.saturating_sub(first).min(GROUP);
                let mask = ((1u32 << lanes) - 1) as u16;
                // SAFETY: the masked lanes are rows `first..first + lanes` of input row
                // `r + k`, within `out` (`n × m` values).
                unsafe {
                    _mm512_mask_storeu_ps(out.as_mut_ptr().add((r + k) * m + first), mask, *acc)
                };
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
        let (rows, cols, n) = (64 * 3 + 7, 384, 16);
        let m = Matrix8::quantize(&values(rows * cols, 3), rows, cols);
        assert!(m.run_rows(n) < rows, "the product is shared out");
        let input = Rows8::quantize(&values(n * cols, 4), &m);
        let bias: Vec<f32> = (0..rows).map(|j| j as f32).collect();
        let whole = m.run(
            &m.kernel.input(&input.values),
            &input.scales,
            weights(&m),
            &bias,
        );
        let shared = m.product(&input, &bias);
        assert_eq!(bits(&whole), bits(&shared));
    }

    #[test]
    fn a_large_product_is_shared_in_whole_tiles_of_enough_work() {
        let m = Matrix8::quantize(&values(1536 * 384, 3), 1536, 384);
        // A lone short query's layer is still shared; each share is whole kernel tiles
        // and at least the work worth handing to a thread.
        for n in [3, 20, 640] {
            let run = m.run_rows(n);
            assert!(run < 1536, "{n} rows");
            assert!(run.is_multiple_of(GROUP), "{n} rows: {run}");
            assert!(run * n * 384 >= PARALLEL_WORK, "{n} rows: {run}");
        }
        // One row is too little work to share.
        let small = Matrix8::quantize(&values(32 * 384, 3), 32, 384);
        assert_eq!(small.run_rows(1), 32);
    }

    fn weights(m: &Matrix8) -> Weights<'_> {
        Weights {
            rows: m.rows,
            cols: m.cols,
            group: m.kernel.group,
            values: &m.values,
            scales: &m.scales,
            offsets: &m.offsets,
        }
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|f| f.to_bits()).collect()
    }

    #[test]
    fn every_kernel_gives_the_same_bits() {
        let mut kernels: Vec<(&str, Kernel)> = vec![("chosen", kernel())];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                kernels.push(("avx2", simd::AVX2));
            }
            if simd::has_vnni() {
                kernels.push(("vnni", simd::VNNI));
            }
        }
        // Blocks of 128 and of 32; input and weight row counts with and without a
        // remainder of a tile (4 inputs by 2 groups of 16 weight rows in VNNI).
        for (cols, n, rows) in [
            (1536, 7, 5),
            (384, 8, 8),
            (96, 5, 3),
            (384, 1, 1),
            (384, 9, 48),
            (128, 6, 71),
        ] {
            for seed in 0..10 {
                let w = values(rows * cols, 2 * seed + 1);
                let mut want = vec![0f32; n * rows];
                let m = Matrix8::quantize_for(PORTABLE, &w, rows, cols);
                let x = Rows8::quantize(&values(n * cols, 2 * seed), &m);
                dots_portable(&x.values, &x.scales, weights(&m), m.block, &mut want);
                for (name, k) in &kernels {
                    let m = Matrix8::quantize_for(*k, &w, rows, cols);
                    let mut got = vec![0f32; n * rows];
                    (k.dots)(
                        &k.input(&x.values),
                        &x.scales,
                        weights(&m),
                        m.block,
                        &mut got,
                    );
                    assert_eq!(
                        bits(&want),
                        bits(&got),
                        "{name}, {cols} columns, {rows} rows, seed {seed}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_row_is_the_scaled_sum_of_its_blocks_in_order() {
        // Output `r · m + j` is input row `r` with weight row `j`: block by block, the
        // integer dot product times both scales, added from zero in block order.
        let (cols, n, rows) = (96, 3, 2);
        let m = Matrix8::quantize_for(PORTABLE, &values(rows * cols, 7), rows, cols);
        let x = Rows8::quantize(&values(n * cols, 8), &m);
        let mut all = vec![0f32; n * rows];
        dots_portable(&x.values, &x.scales, weights(&m), m.block, &mut all);
        let blocks = cols / m.block;
        for r in 0..n {
            for j in 0..rows {
                let mut want = 0f32;
                for b in 0..blocks {
                    let sum: i32 = (0..m.block)
                        .map(|i| {
                            let c = b * m.block + i;
                            i32::from(x.values[r * cols + c]) * i32::from(m.values[j * cols + c])
                        })
                        .sum();
                    want += sum as f32 * (x.scales[r * blocks + b] * m.scales[j * blocks + b]);
                }
                assert_eq!(all[r * rows + j].to_bits(), want.to_bits(), "{r}, {j}");
            }
        }
    }

    #[test]
    fn interleaving_puts_four_values_of_each_row_of_a_group_in_turn() {
        // 3 rows of 8 values (one block of 8 for the layout's sake), groups of 2: the last
        // group is filled with a zero row.
        let values: Vec<i8> = (0..24).collect();
        let (v, s, o) = interleave((values, vec![1.0, 2.0, 3.0], vec![10, 20, 30]), 3, 8, 2);
        let want: Vec<i8> = vec![
            0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15, // rows 0 and 1
            16, 17, 18, 19, 0, 0, 0, 0, 20, 21, 22, 23, 0, 0, 0, 0, // row 2 and zeros
        ];
        assert_eq!(v, want);
        assert_eq!(s, vec![1.0, 2.0, 3.0, 0.0]);
        assert_eq!(o, vec![10, 20, 30, 0]);
    }

    #[test]
    fn exact_dot_products_agree_on_every_path_and_count_every_component() {
        // Lengths below, at and past whole chunks, with tails; codes over the whole range.
        for n in [0usize, 3, 32, 33, 96, 384, 390] {
            let a: Vec<i8> = (0..n)
                .map(|i| (((i * 53 + 7) % 255) as i32 - 127) as i8)
                .collect();
            let b: Vec<i8> = (0..n)
                .map(|i| (127 - (i * 31 % 255) as i32) as i8)
                .collect();
            let want: i32 = a
                .iter()
                .zip(&b)
                .map(|(&x, &y)| i32::from(x) * i32::from(y))
                .sum();
            assert_eq!(exact_dot_portable(&a, &b), want, "portable, {n}");
            assert_eq!(ExactDot::new(&a).dot(&b), want, "chosen, {n}");
            // Several vectors at once: each gets its own product.
            let reversed: Vec<i8> = b.iter().rev().copied().collect();
            let want_reversed: i32 = a
                .iter()
                .zip(&reversed)
                .map(|(&x, &y)| i32::from(x) * i32::from(y))
                .sum();
            let three = [b.clone(), reversed, b.clone()].concat();
            let mut got = [0i32; 3];
            ExactDot::new(&a).dots(&three, &mut got);
            assert_eq!(got, [want, want_reversed, want], "three at once, {n}");
        }
    }

    #[test]
    fn quantizing_gives_the_same_bits_on_every_path() {
        // Random values, with the values that round at a half, zeros of both signs, a
        // block of zeros, infinities and NaN.
        let mut v = values(32 * 128, 11);
        v[..128].fill(0.0);
        for (i, special) in [
            -0.0,
            f32::NAN,
            -f32::NAN,
            0.5,
            -0.5,
            1.5,
            f32::MIN_POSITIVE,
            f32::INFINITY,
        ]
        .into_iter()
        .enumerate()
        {
            v[300 + 97 * i] = special;
        }
        v[1000..1128].iter_mut().enumerate().for_each(|(i, x)| {
            // Exactly k + 0.5 of a scale of 1 (largest 127).
            *x = if i == 0 {
                127.0
            } else {
                (i % 127) as f32 + 0.5
            };
        });
        v[2048] = f32::NEG_INFINITY;
        for size in [128, 32] {
            let (mut a, mut b) = (vec![0i8; v.len()], vec![0i8; v.len()]);
            let (mut sa, mut sb) = (vec![0f32; v.len() / size], vec![0f32; v.len() / size]);
            quantize_portable(&v, size, &mut a, &mut sa);
            quantize_into(&v, size, &mut b, &mut sb);
            assert_eq!(a, b, "values, blocks of {size}");
            assert_eq!(bits(&sa), bits(&sb), "scales, blocks of {size}");
            assert!(a.iter().all(|&q| q != i8::MIN));
        }
        #[cfg(target_arch = "x86_64")]
        assert_eq!(
            simd::quantizes(128),
            std::arch::is_x86_feature_detected!("avx512vl")
                && std::arch::is_x86_feature_detected!("avx512f")
        );
    }

    #[test]
    fn kernel_arguments_agree_only_when_every_length_does() {
        // Weight rows and group, out values, x, `xs` scales, weight values, scales and
        // offsets, row length, block size; the first agrees, each other breaks one
        // agreement only.
        let cases = [
            (1, 1, 2, 128, 4, 64, 2, 2, 64, 32, true),
            (2, 1, 4, 128, 4, 128, 4, 4, 64, 32, true), // two weight rows
            (3, 2, 6, 128, 4, 256, 8, 8, 64, 32, true), // a group filled with a zero row
            (3, 2, 6, 128, 4, 192, 6, 6, 64, 32, false), // no row to fill the group
            (1, 0, 2, 128, 4, 64, 2, 2, 64, 32, false), // no group
            (1, 1, 2, 128, 8, 64, 4, 4, 64, 16, false), // a block of part chunks
            (1, 1, 2, 128, 6, 64, 3, 3, 64, 32, false), // values not the scales' blocks
            (1, 1, 2, 128, 4, 64, 2, 1, 64, 32, false), // an offset missing
            (1, 1, 2, 96, 4, 64, 2, 2, 64, 32, false),  // an input row cut short
            (1, 1, 2, 128, 3, 64, 2, 2, 64, 32, false), // an input scale missing
            (1, 1, 3, 128, 4, 64, 2, 2, 64, 32, false), // an output too many
            (1, 1, 2, 128, 4, 64, 2, 2, 48, 32, false), // a row of part blocks
            (1, 1, 2, 128, 4, 96, 2, 2, 64, 32, false), // a weight row cut short
        ];
        for (rows, group, out, x, xs, values, scales, offsets, cols, size, agree) in cases {
            let w = Weights {
                rows,
                cols,
                group,
                values: &vec![0i8; values],
                scales: &vec![0f32; scales],
                offsets: &vec![0i32; offsets],
            };
            let fit = dots_fit(&vec![0i8; x], &vec![0f32; xs], w, size, &vec![0f32; out]);
            assert_eq!(
                fit, agree,
                "rows {rows}/{group}, x {x}, xs {xs}, w {values}/{scales}/{offsets}, \
                 cols {cols}, size {size}"
            );
        }
    }

    #[test]
    fn a_kernel_refuses_arguments_that_do_not_agree() {
        let w = Matrix8::quantize(&values(64, 1), 1, 64);
        let x = Rows8::quantize(&values(128, 2), &w);
        let mut out = vec![0f32; 3]; // two rows given, three asked for
        let call = std::panic::catch_unwind(move || {
            let k = w.kernel;
            (k.dots)(
                &k.input(&x.values),
                &x.scales,
                weights(&w),
                w.block,
                &mut out,
            )
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
        let m = Matrix8::quantize_for(PORTABLE, &w, 1, cols);
        assert_eq!(m.scales[0], 0.0);
        assert!(m.values[..32].iter().all(|&q| q == 0));
        assert_eq!(m.values[32], 127);
        assert!(m.values.iter().all(|&q| q != -128));
        let x = Rows8::quantize(&[-1f32; 64], &m);
        assert!(x.values.iter().all(|&q| q == -127));
        for m in [m, Matrix8::quantize(&w, 1, cols)] {
            let out = m.product(&x, &[0.0]);
            assert!(out[0].is_finite() && out[0] < 0.0);
        }
    }
}
