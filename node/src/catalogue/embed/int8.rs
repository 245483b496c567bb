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
//!   `128 · Σw` off, and on 512-bit registers adds the sums of a register's two halves, as
//!   integers, into the eight lanes below);
//! - each block adds `(partial as f32) * scale` into one of eight lanes, lane `k` taking
//!   values `4k..4k+4` of every 32-value chunk, with a multiply and an add that are rounded
//!   each (never fused);
//! - the eight lanes are summed in one fixed order at the end.
//!
//! A test compares their bits on random data. Inputs are quantized by portable code or with
//! AVX-512 where the CPU has it, to the same bits (a test compares those too).
//!
//! # Work and threads
//!
//! A kernel takes tiles of input rows by weight rows (4 × 4 in VNNI), so each chunk loaded
//! serves several products. A large product is shared out over rayon's threads by runs of
//! weight rows, a few per thread. Ask runners run on rayon's threads themselves (see
//! `semantic`), so when the other threads are busy a runner computes its own shares instead
//! of handing them over and waiting. (The rest of the encoder runs on candle,
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
/// Weight rows a kernel call takes at once (the VNNI kernel's tile); shares of a product
/// are whole tiles.
const TILE_WEIGHTS: usize = 4;
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
        let kernel = kernel();
        assert_eq!((input.cols, input.block), (self.cols, self.block));
        assert_eq!(bias.len(), self.rows);
        let n = input.values.len() / self.cols;
        let run = self.run_rows(n);
        let blocks = self.cols / self.block;
        let x = kernel.input(&input.values);
        if run >= self.rows {
            // One share: computed here, without a hand-over to the pool and back.
            return self.run(kernel, &x, &input.scales, self.weights(), bias);
        }
        // Each run's outputs, input row by input row: `n × run` values.
        let runs: Vec<Vec<f32>> = self
            .values
            .par_chunks(run * self.cols)
            .zip(self.scales.par_chunks(run * blocks))
            .zip(self.offsets.par_chunks(run * blocks * LANES))
            .zip(bias.par_chunks(run))
            .map(|(((values, scales), offsets), bias)| {
                let weights = Weights {
                    cols: self.cols,
                    values,
                    scales,
                    offsets,
                };
                self.run(kernel, &x, &input.scales, weights, bias)
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
            cols: self.cols,
            values: &self.values,
            scales: &self.scales,
            offsets: &self.offsets,
        }
    }

    /// Weight rows per share of a product with `n` input rows: all of them when the product
    /// is small, else a few shares per thread (whole kernel tiles), each large enough that
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
            .next_multiple_of(TILE_WEIGHTS)
            .min(self.rows.max(1))
    }

    /// The products of every input row (`x`, as `kernel` takes it) with one run of weight
    /// rows: `n × width` values.
    fn run(
        &self,
        kernel: Kernel,
        x: &[i8],
        xs: &[f32],
        weights: Weights<'_>,
        bias: &[f32],
    ) -> Vec<f32> {
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
            (kernel.dots)(x, xs, weights, self.block, out);
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
    /// `|code|`, the unsigned side of the SIMD kernels' byte products.
    magnitudes: Vec<i8>,
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
            magnitudes: codes.iter().map(|c| c.unsigned_abs() as i8).collect(),
            simd,
        }
    }

    /// `Σ self[i] · other[i]`; `other` has this vector's length and its codes lie within
    /// −127..=127.
    pub(crate) fn dot(&self, other: &[i8]) -> i32 {
        assert_eq!(other.len(), self.codes.len());
        #[cfg(target_arch = "x86_64")]
        if self.simd {
            return simd::exact_dot(&self.codes, &self.magnitudes, other);
        }
        exact_dot_portable(&self.codes, other)
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

/// Weight rows as a kernel reads them: values, block scales and lane offsets, row-major.
#[derive(Clone, Copy)]
struct Weights<'a> {
    /// Values per row.
    cols: usize,
    values: &'a [i8],
    scales: &'a [f32],
    /// 128 × the sum of each lane's weights per block: the VNNI kernel multiplies `x + 128`
    /// (unsigned) by `w` and takes this off to get `x · w`.
    offsets: &'a [i32],
}

/// Dot products of input rows with weight rows: `x` holds rows of `w.cols` values with
/// their block scales in `xs`, `size` values sharing a scale; `out[r · m + j]` is the
/// product of input row `r` with weight row `j` of `m`.
type Dots = fn(x: &[i8], xs: &[f32], w: Weights<'_>, size: usize, out: &mut [f32]);

/// A kernel and the form it takes its input in.
#[derive(Clone, Copy)]
struct Kernel {
    dots: Dots,
    /// Whether input values come plus 128, as unsigned bytes (each stored in an `i8`).
    biased: bool,
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
    if !size.is_multiple_of(CHUNK) || w.cols != blocks * size || blocks == 0 {
        return false;
    }
    let (n, m) = (x.len() / w.cols, w.values.len() / w.cols);
    x.len() == n * w.cols
        && w.values.len() == m * w.cols
        && w.scales.len() == m * blocks
        && w.offsets.len() == w.scales.len() * LANES
        && xs.len() == n * blocks
        && out.len() == n * m
}

/// The fastest kernel this CPU runs (they all agree to the bit).
fn kernel() -> Kernel {
    static CHOSEN: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();
    *CHOSEN.get_or_init(choose)
}

const PORTABLE: Kernel = Kernel {
    dots: dots_portable,
    biased: false,
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

/// Sums the lanes in the one order every kernel uses.
fn sum_lanes(l: &[f32; LANES]) -> f32 {
    ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
}

fn dots_portable(x: &[i8], xs: &[f32], w: Weights<'_>, size: usize, out: &mut [f32]) {
    assert!(dots_fit(x, xs, w, size, out));
    let blocks = w.cols / size;
    let m = w.values.len() / w.cols;
    for ((x, xs), out) in x
        .chunks_exact(w.cols)
        .zip(xs.chunks_exact(blocks))
        .zip(out.chunks_exact_mut(m.max(1)))
    {
        for ((w, ws), out) in w
            .values
            .chunks_exact(w.cols)
            .zip(w.scales.chunks_exact(blocks))
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
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod simd {
    use std::arch::x86_64::{
        __m256, __m256i, __m512i, _mm256_add_epi32, _mm256_add_ps, _mm256_cvtepi32_ps,
        _mm256_dpbusd_epi32, _mm256_loadu_si256, _mm256_madd_epi16, _mm256_maddubs_epi16,
        _mm256_mul_ps, _mm256_set1_epi16, _mm256_set1_ps, _mm256_setzero_ps, _mm256_setzero_si256,
        _mm256_sign_epi8, _mm256_storeu_ps, _mm256_storeu_si256, _mm256_sub_epi32,
        _mm512_castsi512_si256, _mm512_dpbusd_epi32, _mm512_extracti64x4_epi64, _mm512_loadu_si512,
        _mm512_setzero_si512,
    };

    use std::arch::x86_64::{
        __m128i, _mm512_add_ps, _mm512_and_si512, _mm512_castps_si512, _mm512_castsi512_ps,
        _mm512_cvtepi32_epi8, _mm512_cvttps_epi32, _mm512_loadu_ps, _mm512_max_ps, _mm512_min_ps,
        _mm512_mul_ps, _mm512_or_si512, _mm512_reduce_max_ps, _mm512_set1_epi32, _mm512_set1_ps,
        _mm512_setzero_ps, _mm_storeu_si128,
    };

    use super::{dots_fit, sum_lanes, Kernel, Weights, CHUNK, LANES, MAX, TILE_WEIGHTS};

    pub(super) const AVX2: Kernel = Kernel {
        dots: dots_avx2,
        biased: false,
    };

    pub(super) const VNNI: Kernel = Kernel {
        dots: dots_vnni,
        biased: true,
    };

    /// Input rows of the VNNI kernel's tile: with [`TILE_WEIGHTS`] weight rows, 16 integer
    /// and 16 f32 sums, and 8 loaded chunks, in AVX-512's 32 registers.
    const TILE_INPUTS: usize = 4;

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

    /// [`super::ExactDot::dot`] with VNNI: `|a|` times `b` with `a`'s sign, as unsigned by
    /// signed bytes into 32-bit sums (exact: no value is −128), then the rest one by one.
    pub(super) fn exact_dot(a: &[i8], magnitudes: &[i8], b: &[i8]) -> i32 {
        assert!(has_vnni() && a.len() == b.len() && magnitudes.len() == a.len());
        // SAFETY: the CPU has VNNI, VL and AVX2, and the three slices have one length.
        unsafe { exact_dot_vnni(a, magnitudes, b) }
    }

    /// # Safety
    /// The CPU has AVX-512 VNNI and VL and AVX2; the slices have one length.
    #[target_feature(enable = "avx2,avx512f,avx512vl,avx512vnni")]
    unsafe fn exact_dot_vnni(a: &[i8], magnitudes: &[i8], b: &[i8]) -> i32 {
        let whole = a.len() / CHUNK * CHUNK;
        let mut sums = [_mm256_setzero_si256(); 2];
        for (i, c) in (0..whole).step_by(CHUNK).enumerate() {
            // SAFETY: `c + CHUNK <= whole <= len` for each slice.
            let (av, mv, bv) = unsafe {
                (
                    _mm256_loadu_si256(a.as_ptr().add(c).cast::<__m256i>()),
                    _mm256_loadu_si256(magnitudes.as_ptr().add(c).cast::<__m256i>()),
                    _mm256_loadu_si256(b.as_ptr().add(c).cast::<__m256i>()),
                )
            };
            let s = &mut sums[i % 2];
            *s = _mm256_dpbusd_epi32(*s, mv, _mm256_sign_epi8(bv, av));
        }
        let mut lanes = [0i32; LANES];
        // SAFETY: `lanes` holds eight i32.
        unsafe {
            _mm256_storeu_si256(
                lanes.as_mut_ptr().cast::<__m256i>(),
                _mm256_add_epi32(sums[0], sums[1]),
            )
        };
        let tail: i32 = a[whole..]
            .iter()
            .zip(&b[whole..])
            .map(|(&x, &y)| i32::from(x) * i32::from(y))
            .sum();
        lanes.iter().sum::<i32>() + tail
    }

    /// Whether the CPU multiplies bytes into 32-bit sums in one instruction (AVX-512 VNNI,
    /// on 256- and 512-bit registers).
    pub(super) fn has_vnni() -> bool {
        std::arch::is_x86_feature_detected!("avx512vnni")
            && std::arch::is_x86_feature_detected!("avx512f")
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
    fn dots_avx2(x: &[i8], xs: &[f32], w: Weights<'_>, size: usize, out: &mut [f32]) {
        assert!(std::arch::is_x86_feature_detected!("avx2") && dots_fit(x, xs, w, size, out));
        // SAFETY: the CPU has AVX2, and `dots_fit` checked the lengths read within.
        unsafe { avx2(x, xs, w, size, out) }
    }

    /// [`super::dots_portable`] with VNNI, for input values plus 128 ([`Kernel::biased`]);
    /// only chosen once the CPU is known to have it. Tiles of [`TILE_INPUTS`] input rows by
    /// [`TILE_WEIGHTS`] weight rows, and the rest by smaller tiles.
    fn dots_vnni(x: &[i8], xs: &[f32], w: Weights<'_>, size: usize, out: &mut [f32]) {
        const K: usize = TILE_INPUTS;
        const J: usize = TILE_WEIGHTS;
        assert!(has_vnni() && dots_fit(x, xs, w, size, out));
        let (n, m) = (x.len() / w.cols, w.values.len() / w.cols);
        let (whole_n, whole_m) = (n / K * K, m / J * J);
        // Whole tiles, then the rows of the input and of the weights left over.
        macro_rules! tiles {
            ($tile:ident) => {
                for j in (0..whole_m).step_by(J) {
                    for r in (0..whole_n).step_by(K) {
                        $tile::<K, J>(x, xs, w, size, out, r, j);
                    }
                    for r in whole_n..n {
                        $tile::<1, J>(x, xs, w, size, out, r, j);
                    }
                }
                for j in whole_m..m {
                    for r in (0..whole_n).step_by(K) {
                        $tile::<K, 1>(x, xs, w, size, out, r, j);
                    }
                    for r in whole_n..n {
                        $tile::<1, 1>(x, xs, w, size, out, r, j);
                    }
                }
            };
        }
        // SAFETY: the CPU has VNNI and AVX2 (so AVX-512F), `dots_fit` checked the lengths,
        // and every call's tile lies within the `n` input and `m` weight rows; `vnni512`
        // takes only blocks of whole pairs of chunks.
        unsafe {
            if size.is_multiple_of(2 * CHUNK) {
                tiles!(vnni512);
            } else {
                tiles!(vnni);
            }
        }
    }

    /// # Safety
    /// The CPU has AVX2, and the arguments pass [`dots_fit`].
    #[target_feature(enable = "avx2")]
    unsafe fn avx2(x: &[i8], xs: &[f32], w: Weights<'_>, size: usize, out: &mut [f32]) {
        let ones = _mm256_set1_epi16(1);
        let cols = w.cols;
        let blocks = cols / size;
        let m = w.values.len() / cols;
        for (i, out) in out.iter_mut().enumerate() {
            let (r, j) = (i / m, i % m);
            let mut lanes = _mm256_setzero_ps();
            for b in 0..blocks {
                let mut sums = _mm256_setzero_si256();
                for c in (b * size..(b + 1) * size).step_by(CHUNK) {
                    // SAFETY: input row `r`, weight row `j` and column `c + CHUNK` lie
                    // within `x` and the weights (`dots_fit`); unaligned loads are allowed.
                    let (xv, wv) = unsafe {
                        (
                            _mm256_loadu_si256(x.as_ptr().add(r * cols + c).cast::<__m256i>()),
                            _mm256_loadu_si256(
                                w.values.as_ptr().add(j * cols + c).cast::<__m256i>(),
                            ),
                        )
                    };
                    // |x| · (w with x's sign) = x · w, as unsigned × signed bytes summed
                    // in pairs (within an i16: no value is -128), then in fours: lane k
                    // takes values 4k..4k+4 of each chunk.
                    let pairs =
                        _mm256_maddubs_epi16(_mm256_sign_epi8(xv, xv), _mm256_sign_epi8(wv, xv));
                    sums = _mm256_add_epi32(sums, _mm256_madd_epi16(pairs, ones));
                }
                let scale = _mm256_set1_ps(xs[r * blocks + b] * w.scales[j * blocks + b]);
                lanes = _mm256_add_ps(lanes, _mm256_mul_ps(_mm256_cvtepi32_ps(sums), scale));
            }
            // SAFETY: the CPU has AVX2, so AVX.
            *out = unsafe { total(lanes) };
        }
    }

    /// [`vnni`] on 512-bit registers, for blocks of whole pairs of chunks: lane `l` of a
    /// 512-bit sum holds lane `l mod 8` of the chunk `l / 8` of each pair, so adding its two
    /// halves gives the 256-bit kernel's integers exactly.
    ///
    /// # Safety
    /// As [`vnni`], and the CPU has AVX-512F; `size` is a multiple of `2 · CHUNK`.
    #[target_feature(enable = "avx2,avx512f,avx512vl,avx512vnni")]
    unsafe fn vnni512<const K: usize, const J: usize>(
        x: &[i8],
        xs: &[f32],
        w: Weights<'_>,
        size: usize,
        out: &mut [f32],
        r: usize,
        j: usize,
    ) {
        let cols = w.cols;
        let blocks = cols / size;
        let m = w.values.len() / cols;
        let mut lanes = [[_mm256_setzero_ps(); J]; K];
        for b in 0..blocks {
            let mut sums = [[_mm512_setzero_si512(); J]; K];
            for c in (b * size..(b + 1) * size).step_by(2 * CHUNK) {
                let mut wv = [_mm512_setzero_si512(); J];
                for (jj, wv) in wv.iter_mut().enumerate() {
                    // SAFETY: weight row `j + jj` and column `c + 2 · CHUNK` lie within the
                    // weights (the caller's bound on `j + J`, `dots_fit`, and `size`).
                    *wv = unsafe {
                        _mm512_loadu_si512(
                            w.values.as_ptr().add((j + jj) * cols + c).cast::<__m512i>(),
                        )
                    };
                }
                for (k, sums) in sums.iter_mut().enumerate() {
                    // SAFETY: input row `r + k` and column `c + 2 · CHUNK` lie within `x`.
                    let xv = unsafe {
                        _mm512_loadu_si512(x.as_ptr().add((r + k) * cols + c).cast::<__m512i>())
                    };
                    for (sum, wv) in sums.iter_mut().zip(wv) {
                        *sum = _mm512_dpbusd_epi32(*sum, xv, wv);
                    }
                }
            }
            for jj in 0..J {
                let at = (j + jj) * blocks + b;
                // SAFETY: block `b` of weight row `j + jj` has eight offsets within
                // `w.offsets` (`dots_fit`).
                let offset = unsafe {
                    _mm256_loadu_si256(w.offsets.as_ptr().add(at * LANES).cast::<__m256i>())
                };
                let ws = w.scales[at];
                for k in 0..K {
                    let sum = sums[k][jj];
                    let halves = _mm256_add_epi32(
                        _mm512_castsi512_si256(sum),
                        _mm512_extracti64x4_epi64::<1>(sum),
                    );
                    let exact = _mm256_sub_epi32(halves, offset);
                    let scale = _mm256_set1_ps(xs[(r + k) * blocks + b] * ws);
                    lanes[k][jj] = _mm256_add_ps(
                        lanes[k][jj],
                        _mm256_mul_ps(_mm256_cvtepi32_ps(exact), scale),
                    );
                }
            }
        }
        for (k, lanes) in lanes.iter().enumerate() {
            for (jj, lanes) in lanes.iter().enumerate() {
                // SAFETY: the CPU has AVX2, so AVX.
                out[(r + k) * m + j + jj] = unsafe { total(*lanes) };
            }
        }
    }

    /// The products of input rows `r..r + K` with weight rows `j..j + J`: `K × J` sums kept
    /// in registers while each chunk of the `K + J` rows is loaded once.
    ///
    /// # Safety
    /// The CPU has AVX-512 VNNI and VL and AVX2, the arguments pass [`dots_fit`], `x`
    /// holds input values plus 128 ([`Kernel::biased`]), and rows `r + K` and `j + J` are
    /// at most the input's and the weights' row counts.
    #[target_feature(enable = "avx2,avx512f,avx512vl,avx512vnni")]
    unsafe fn vnni<const K: usize, const J: usize>(
        x: &[i8],
        xs: &[f32],
        w: Weights<'_>,
        size: usize,
        out: &mut [f32],
        r: usize,
        j: usize,
    ) {
        let cols = w.cols;
        let blocks = cols / size;
        let m = w.values.len() / cols;
        let mut lanes = [[_mm256_setzero_ps(); J]; K];
        for b in 0..blocks {
            let mut sums = [[_mm256_setzero_si256(); J]; K];
            for c in (b * size..(b + 1) * size).step_by(CHUNK) {
                let mut wv = [_mm256_setzero_si256(); J];
                for (jj, wv) in wv.iter_mut().enumerate() {
                    // SAFETY: weight row `j + jj` and column `c + CHUNK` lie within the
                    // weights (the caller's bound on `j + J`, and `dots_fit`).
                    *wv = unsafe {
                        _mm256_loadu_si256(
                            w.values.as_ptr().add((j + jj) * cols + c).cast::<__m256i>(),
                        )
                    };
                }
                for (k, sums) in sums.iter_mut().enumerate() {
                    // SAFETY: input row `r + k` and column `c + CHUNK` lie within `x` (the
                    // caller's bound on `r + K`, and `dots_fit`).
                    let xv = unsafe {
                        _mm256_loadu_si256(x.as_ptr().add((r + k) * cols + c).cast::<__m256i>())
                    };
                    for (sum, wv) in sums.iter_mut().zip(wv) {
                        // (x + 128) · w in fours: lane k takes values 4k..4k+4 of a chunk.
                        *sum = _mm256_dpbusd_epi32(*sum, xv, wv);
                    }
                }
            }
            for jj in 0..J {
                let at = (j + jj) * blocks + b;
                // SAFETY: block `b` of weight row `j + jj` has eight offsets within
                // `w.offsets` (`dots_fit`).
                let offset = unsafe {
                    _mm256_loadu_si256(w.offsets.as_ptr().add(at * LANES).cast::<__m256i>())
                };
                let ws = w.scales[at];
                for k in 0..K {
                    // Σ (x + 128) · w − 128 · Σ w = Σ x · w: the integers the AVX2 kernel
                    // sums, so the same bits from here on.
                    let exact = _mm256_sub_epi32(sums[k][jj], offset);
                    let scale = _mm256_set1_ps(xs[(r + k) * blocks + b] * ws);
                    lanes[k][jj] = _mm256_add_ps(
                        lanes[k][jj],
                        _mm256_mul_ps(_mm256_cvtepi32_ps(exact), scale),
                    );
                }
            }
        }
        for (k, lanes) in lanes.iter().enumerate() {
            for (jj, lanes) in lanes.iter().enumerate() {
                // SAFETY: the CPU has AVX2, so AVX.
                out[(r + k) * m + j + jj] = unsafe { total(*lanes) };
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
        let k = kernel();
        let whole = m.run(
            k,
            &k.input(&input.values),
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
            assert!(run.is_multiple_of(TILE_WEIGHTS), "{n} rows: {run}");
            assert!(run * n * 384 >= PARALLEL_WORK, "{n} rows: {run}");
        }
        // One row is too little work to share.
        let small = Matrix8::quantize(&values(32 * 384, 3), 32, 384);
        assert_eq!(small.run_rows(1), 32);
    }

    fn weights(m: &Matrix8) -> Weights<'_> {
        Weights {
            cols: m.cols,
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
        // remainder of a tile.
        for (cols, n, rows) in [(1536, 7, 5), (384, 8, 8), (96, 5, 3), (384, 1, 1)] {
            for seed in 0..10 {
                let w = Matrix8::quantize(&values(rows * cols, 2 * seed + 1), rows, cols);
                let x = Rows8::quantize(&values(n * cols, 2 * seed), &w);
                let mut portable = vec![0f32; n * rows];
                dots_portable(&x.values, &x.scales, weights(&w), w.block, &mut portable);
                for (name, k) in &kernels {
                    let mut got = vec![0f32; n * rows];
                    (k.dots)(
                        &k.input(&x.values),
                        &x.scales,
                        weights(&w),
                        w.block,
                        &mut got,
                    );
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
    fn the_portable_kernel_gives_each_row_pair_its_own_product() {
        // Output `r · m + j` is input row `r` with weight row `j`, as one row alone gives.
        let (cols, n, rows) = (96, 3, 2);
        let w = Matrix8::quantize(&values(rows * cols, 7), rows, cols);
        let x = Rows8::quantize(&values(n * cols, 8), &w);
        let mut all = vec![0f32; n * rows];
        dots_portable(&x.values, &x.scales, weights(&w), w.block, &mut all);
        let blocks = cols / w.block;
        for r in 0..n {
            for j in 0..rows {
                let one = Weights {
                    cols,
                    values: &w.values[j * cols..][..cols],
                    scales: &w.scales[j * blocks..][..blocks],
                    offsets: &w.offsets[j * blocks * LANES..][..blocks * LANES],
                };
                let mut alone = [0f32];
                let xr = &x.values[r * cols..][..cols];
                let xsr = &x.scales[r * blocks..][..blocks];
                dots_portable(xr, xsr, one, w.block, &mut alone);
                assert_eq!(all[r * rows + j].to_bits(), alone[0].to_bits(), "{r}, {j}");
            }
        }
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
        // `out` values, x, `xs` scales, weight values, scales and offsets, row length,
        // block size; the first agrees, each other breaks one agreement only.
        let cases = [
            (2, 128, 4, 64, 2, 16, 64, 32, true),
            (4, 128, 4, 128, 4, 32, 64, 32, true), // two weight rows
            (2, 128, 8, 64, 4, 32, 64, 16, false), // a block of part chunks
            (2, 128, 6, 64, 3, 24, 64, 32, false), // values not the scales' blocks
            (2, 128, 4, 64, 2, 8, 64, 32, false),  // offsets missing
            (2, 96, 4, 64, 2, 16, 64, 32, false),  // an input row cut short
            (2, 128, 3, 64, 2, 16, 64, 32, false), // an input scale missing
            (3, 128, 4, 64, 2, 16, 64, 32, false), // an output too many
            (2, 128, 4, 64, 2, 16, 48, 32, false), // a row of part blocks
            (2, 128, 4, 96, 2, 16, 64, 32, false), // a weight row cut short
        ];
        for (rows, x, xs, values, scales, offsets, cols, size, agree) in cases {
            let w = Weights {
                cols,
                values: &vec![0i8; values],
                scales: &vec![0f32; scales],
                offsets: &vec![0i32; offsets],
            };
            let fit = dots_fit(&vec![0i8; x], &vec![0f32; xs], w, size, &vec![0f32; rows]);
            assert_eq!(
                fit, agree,
                "x {x}, xs {xs}, w {values}/{scales}/{offsets}, cols {cols}, size {size}"
            );
        }
    }

    #[test]
    fn a_kernel_refuses_arguments_that_do_not_agree() {
        let w = Matrix8::quantize(&values(64, 1), 1, 64);
        let x = Rows8::quantize(&values(128, 2), &w);
        let mut out = vec![0f32; 3]; // two rows given, three asked for
        let call = std::panic::catch_unwind(move || {
            let k = kernel();
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
