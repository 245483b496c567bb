//! Row vectors for the dense half of the resolver: each row is seen from one or more sides
//! (its views, see [`crate::catalogue::semantic::embed_views`]), one vector per view, and a
//! query is as close to a row as to its closest view.
//!
//! Vectors are held in 8 bits: each view's components are rounded to −127..127 against
//! its largest one, with that scale kept beside them, and a query is rounded alike. A cosine
//! is then an integer dot product (exact, so every node gets the same bits on any CPU) times
//! the two scales: a quarter of the memory of f32 and a scan several times faster, for a
//! cosine within about 0.01 of the f32 one (the ranking chapter has what it does to quality).

use crate::catalogue::embed::ExactDot;

/// Largest magnitude of a rounded component.
const LEVELS: f32 = 127.0;

/// A vector rounded to 8 bits: `value ≈ code × scale`.
#[derive(Debug, Clone, PartialEq)]
struct Rounded {
    codes: Box<[i8]>,
    scale: f32,
}

impl Rounded {
    fn of(vector: &[f32]) -> Self {
        let largest = vector.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        if largest == 0.0 || !largest.is_finite() {
            return Self {
                codes: vec![0; vector.len()].into(),
                scale: 0.0,
            };
        }
        let scale = largest / LEVELS;
        let codes = vector
            .iter()
            .map(|x| (x / scale).round().clamp(-LEVELS, LEVELS) as i8)
            .collect();
        Self { codes, scale }
    }
}

/// One row's views where [`Vectors`] holds them: views `first..first + views`.
#[derive(Debug, Clone, Copy)]
struct Run {
    /// The row's slot; [`Run::DEAD`] once the row's views were replaced or cleared.
    slot: u32,
    first: usize,
    views: usize,
}

impl Run {
    const DEAD: u32 = u32::MAX;
}

/// Views held below this many are never compacted away (compacting a few costs more than
/// it frees).
const COMPACT_FLOOR: usize = 1024;

/// Every row's view vectors, held one after the other in two arrays (codes and scales), so
/// a scan reads memory in order, with no allocation per row to look up: the scan is bound
/// by how fast bytes arrive, and scattered rows made it wait for each.
///
/// A row's views are a run; replacing them appends a new run and leaves the old one dead,
/// and once dead views outnumber a quarter of the live ones the arrays are compacted in
/// order (amortised O(1) per view stored).
#[derive(Debug, Default)]
pub(crate) struct Vectors {
    dim: usize,
    /// `dim` codes per view, run after run.
    codes: Vec<i8>,
    /// One scale per view, as `codes`.
    scales: Vec<f32>,
    /// The runs in the order they are held.
    runs: Vec<Run>,
    /// By slot, the index of its run in `runs` (`None`: not embedded).
    slots: Vec<Option<usize>>,
    count: usize,
    /// Views of live runs.
    live: usize,
    /// Compactions so far.
    compactions: u64,
}

impl Vectors {
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// Stores the views' vectors of `slot`. Vectors of another length than the ones stored
    /// are refused (a model change starts from an empty store), and so is an empty list.
    pub(crate) fn set(&mut self, slot: u32, views: &[&[f32]]) -> bool {
        let Some(first) = views.first() else {
            return false;
        };
        let dim = if self.dim == 0 { first.len() } else { self.dim };
        if dim == 0 || views.iter().any(|v| v.len() != dim) {
            return false;
        }
        self.dim = dim;
        self.clear(slot);
        let run = Run {
            slot,
            first: self.scales.len(),
            views: views.len(),
        };
        for view in views {
            let rounded = Rounded::of(view);
            self.codes.extend_from_slice(&rounded.codes);
            self.scales.push(rounded.scale);
        }
        let at = slot as usize;
        if self.slots.len() <= at {
            self.slots.resize(at + 1, None);
        }
        self.slots[at] = Some(self.runs.len());
        self.runs.push(run);
        self.live += run.views;
        self.count += 1;
        true
    }

    pub(crate) fn clear(&mut self, slot: u32) {
        let Some(at) = self.slots.get_mut(slot as usize).and_then(Option::take) else {
            return;
        };
        if let Some(run) = self.runs.get_mut(at) {
            run.slot = Run::DEAD;
            self.live -= run.views;
        }
        self.count -= 1;
        let dead = self.scales.len() - self.live;
        if dead > COMPACT_FLOOR.max(self.live / 4) {
            self.compact();
        }
    }

    /// Drops the dead runs' views, keeping the live ones in their order.
    fn compact(&mut self) {
        let dim = self.dim;
        let (mut views, mut runs) = (0, 0);
        for i in 0..self.runs.len() {
            let run = self.runs[i];
            if run.slot == Run::DEAD {
                continue;
            }
            self.codes
                .copy_within(run.first * dim..(run.first + run.views) * dim, views * dim);
            self.scales
                .copy_within(run.first..run.first + run.views, views);
            self.runs[runs] = Run {
                first: views,
                ..run
            };
            self.slots[run.slot as usize] = Some(runs);
            views += run.views;
            runs += 1;
        }
        self.codes.truncate(views * dim);
        self.scales.truncate(views);
        self.runs.truncate(runs);
        self.codes.shrink_to_fit();
        self.scales.shrink_to_fit();
        self.runs.shrink_to_fit();
        self.compactions += 1;
    }

    pub(crate) fn has(&self, slot: u32) -> bool {
        self.slots.get(slot as usize).is_some_and(Option::is_some)
    }

    /// Cosine of `query` with the closest view of every row, by slot (0 where there is
    /// none), both rounded to 8 bits.
    pub(crate) fn cosines(&self, query: &[f32]) -> Vec<f32> {
        let mut out = vec![0.0; self.slots.len()];
        if query.len() != self.dim {
            return out;
        }
        let query = Rounded::of(query);
        let dot = ExactDot::new(&query.codes);
        let mut dots = Vec::new();
        for run in &self.runs {
            if run.slot == Run::DEAD {
                continue;
            }
            let scales = &self.scales[run.first..run.first + run.views];
            dots.resize(run.views, 0);
            dot.dots(
                &self.codes[run.first * self.dim..][..run.views * self.dim],
                &mut dots,
            );
            out[run.slot as usize] = dots
                .iter()
                .zip(scales)
                .map(|(&dot, scale)| dot as f32 * (query.scale * scale))
                .fold(f32::NEG_INFINITY, f32::max);
        }
        out
    }

    /// Bytes held: every view's codes and scale, the dead ones not yet compacted away
    /// included, and the tables of runs and slots.
    pub(crate) fn memory_bytes(&self) -> usize {
        use std::mem::size_of;
        self.codes.len()
            + self.scales.len() * size_of::<f32>()
            + self.runs.len() * size_of::<Run>()
            + self.slots.len() * size_of::<Option<usize>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(got: &[f32], want: &[f32]) -> bool {
        got.len() == want.len() && got.iter().zip(want).all(|(g, w)| (g - w).abs() < 0.01)
    }

    #[test]
    fn a_row_is_as_close_as_its_closest_view() {
        let mut vectors = Vectors::default();
        assert!(vectors.set(0, &[&[1.0, 0.0], &[0.0, 1.0]]));
        assert!(vectors.set(2, &[&[0.6, 0.8]]));
        let got = vectors.cosines(&[0.0, 1.0]);
        assert!(close(&got, &[1.0, 0.0, 0.8]), "{got:?}");
        let got = vectors.cosines(&[1.0, 0.0]);
        assert!(close(&got, &[1.0, 0.0, 0.6]), "{got:?}");
        assert_eq!(vectors.len(), 2);
        assert!(!vectors.has(1));
    }

    #[test]
    fn replacing_and_clearing_a_rows_views_keeps_the_counts() {
        let mut vectors = Vectors::default();
        vectors.set(0, &[&[1.0, 0.0], &[0.0, 1.0]]);
        vectors.set(0, &[&[1.0, 0.0]]);
        assert_eq!(vectors.len(), 1);
        assert!(close(&vectors.cosines(&[0.0, 1.0]), &[0.0]));
        vectors.clear(0);
        vectors.clear(0);
        assert_eq!(vectors.len(), 0);
        assert!(!vectors.has(0));
    }

    #[test]
    fn views_of_another_length_or_none_are_refused() {
        let mut vectors = Vectors::default();
        assert!(!vectors.set(0, &[]));
        assert!(!vectors.set(0, &[&[]]));
        assert!(vectors.set(0, &[&[1.0, 0.0]]));
        assert!(!vectors.set(1, &[&[1.0, 0.0, 0.0]]));
        assert!(!vectors.set(1, &[&[1.0, 0.0], &[1.0]]));
        assert_eq!(vectors.len(), 1);
        assert_eq!(
            vectors.cosines(&[1.0]),
            vec![0.0],
            "a query of another length"
        );
    }

    /// Deterministic unit vectors of `dim` components.
    fn unit_vectors(n: usize, dim: usize, seed: u64) -> Vec<Vec<f32>> {
        let mut state = seed;
        (0..n)
            .map(|_| {
                let v: Vec<f32> = (0..dim)
                    .map(|_| {
                        state = state
                            .wrapping_mul(6_364_136_223_846_793_005)
                            .wrapping_add(1_442_695_040_888_963_407);
                        ((state >> 33) as f32 / (1u64 << 31) as f32) - 0.5
                    })
                    .collect();
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                v.into_iter().map(|x| x / norm).collect()
            })
            .collect()
    }

    #[test]
    fn rounded_cosines_are_within_a_hundredth_of_the_f32_ones() {
        let rows = unit_vectors(200, 384, 7);
        let queries = unit_vectors(20, 384, 11);
        let mut vectors = Vectors::default();
        for (slot, row) in rows.iter().enumerate() {
            assert!(vectors.set(slot as u32, &[row]));
        }
        for query in &queries {
            let got = vectors.cosines(query);
            let want: Vec<f32> = rows
                .iter()
                .map(|row| crate::catalogue::embed::dot(query, row))
                .collect();
            let worst = got
                .iter()
                .zip(&want)
                .map(|(g, w)| (g - w).abs())
                .fold(0.0f32, f32::max);
            assert!(worst < 0.01, "off by {worst}");
        }
    }

    #[test]
    fn the_integer_dot_product_counts_every_component() {
        // Lengths below, at and past whole chunks of the SIMD kernels, with a tail.
        for n in [5i32, 37, 64, 100, 384] {
            let a: Vec<i8> = (0..n).map(|i| (i % 11 - 5) as i8).collect();
            let b: Vec<i8> = (0..n).map(|i| (i * 37 % 255 - 127) as i8).collect();
            let want: i32 = a
                .iter()
                .zip(&b)
                .map(|(&x, &y)| i32::from(x) * i32::from(y))
                .sum();
            assert_eq!(ExactDot::new(&a).dot(&b), want, "{n} components");
        }
        let full = [-127i8; 384];
        assert_eq!(ExactDot::new(&full).dot(&full), 384 * 127 * 127);
        assert_eq!(ExactDot::new(&full).dot(&[127i8; 384]), -384 * 127 * 127);
        assert_eq!(
            Rounded::of(&[0.0, 0.0]).scale,
            0.0,
            "a zero vector stays zero"
        );
        let broken = Rounded::of(&[f32::INFINITY, 1.0]);
        assert_eq!(
            (broken.scale, &*broken.codes),
            (0.0, &[0i8, 0][..]),
            "a vector that is not finite points nowhere"
        );
    }

    #[test]
    fn the_memory_gauge_counts_every_view_held_and_replaced_views_are_given_back() {
        use std::mem::size_of;
        let mut vectors = Vectors::default();
        vectors.set(0, &[&[1.0, 0.0]]);
        let table = size_of::<Run>() + size_of::<Option<usize>>();
        assert_eq!(vectors.memory_bytes(), 2 + 4 + table, "two codes, a scale");
        // A row replaced again and again: its old views wait to be compacted away, never
        // more than the floor of them.
        for _ in 0..5_000 {
            assert!(vectors.set(0, &[&[1.0, 0.0], &[0.0, 1.0]]));
            let held = vectors.scales.len();
            assert!(held <= COMPACT_FLOOR + 4, "{held} views held");
            assert_eq!(
                vectors.memory_bytes(),
                held * 6 + vectors.runs.len() * size_of::<Run>() + size_of::<Option<usize>>()
            );
        }
        vectors.clear(0);
        assert_eq!(vectors.len(), 0);
    }

    #[test]
    fn compaction_waits_for_a_quarter_of_the_live_views_to_be_dead() {
        // 3,000 rows of two views (6,000 live, a quarter is 1,500: above the floor), each
        // replaced in turn 20,000 times: 40,000 views die, so compacting only once more
        // than 1,500 are dead does it at most 40,000 / 1,501 times, and never lets more
        // than 1,500 (and the row being replaced) wait.
        let pool = unit_vectors(2, 8, 5);
        let views: [&[f32]; 2] = [&pool[0], &pool[1]];
        let mut vectors = Vectors::default();
        for slot in 0..3_000 {
            vectors.set(slot, &views);
        }
        for i in 0..20_000u32 {
            vectors.set(i % 3_000, &views);
            let dead = vectors.scales.len() - vectors.live;
            assert!(dead <= 1_500, "{dead} dead views after {i} replacements");
        }
        assert_eq!(vectors.live, 6_000);
        let most = 40_000 / 1_501;
        assert!(
            (1..=most).contains(&vectors.compactions),
            "{} compactions",
            vectors.compactions
        );
    }

    #[test]
    fn rows_replaced_and_cleared_in_any_order_keep_their_own_cosines() {
        // Rows of one to three views, replaced and cleared at random until the arrays have
        // been compacted several times: every row left scores as it does in a store that
        // only ever held it.
        let pool = unit_vectors(64, 16, 3);
        let mut state = 11u64;
        let mut next = |n: u64| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) % n
        };
        let mut vectors = Vectors::default();
        let mut held: Vec<Option<Vec<usize>>> = vec![None; 300];
        let mut compactions = 0;
        for _ in 0..20_000 {
            let slot = next(300) as usize;
            let before = vectors.scales.len();
            if next(5) == 0 {
                vectors.clear(slot as u32);
                held[slot] = None;
            } else {
                let views: Vec<usize> = (0..=next(3)).map(|_| next(64) as usize).collect();
                let refs: Vec<&[f32]> = views.iter().map(|&v| &pool[v][..]).collect();
                assert!(vectors.set(slot as u32, &refs));
                held[slot] = Some(views);
            }
            compactions += usize::from(vectors.scales.len() < before);
        }
        assert!(compactions >= 3, "{compactions} compactions");
        let mut fresh = Vectors::default();
        for (slot, views) in held.iter().enumerate() {
            if let Some(views) = views {
                let refs: Vec<&[f32]> = views.iter().map(|&v| &pool[v][..]).collect();
                fresh.set(slot as u32, &refs);
            }
        }
        assert_eq!(vectors.len(), fresh.len());
        for (slot, views) in held.iter().enumerate() {
            assert_eq!(vectors.has(slot as u32), views.is_some(), "slot {slot}");
        }
        for query in unit_vectors(5, 16, 9) {
            let (got, want) = (vectors.cosines(&query), fresh.cosines(&query));
            let bits = |v: &[f32]| v.iter().map(|c| c.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got[..want.len()]), bits(&want));
            assert!(got[want.len()..].iter().all(|&c| c == 0.0));
        }
    }
}
