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

/// One row's views: their codes one after the other, and a scale each.
#[derive(Debug, Clone)]
struct Views {
    codes: Box<[i8]>,
    scales: Box<[f32]>,
}

#[derive(Debug, Default)]
pub(crate) struct Vectors {
    dim: usize,
    /// The views of each slot (`None`: not embedded).
    slots: Vec<Option<Views>>,
    count: usize,
    /// Views held, for the memory gauge.
    views: usize,
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
        let rounded: Vec<Rounded> = views.iter().map(|v| Rounded::of(v)).collect();
        let held = Views {
            codes: rounded
                .iter()
                .flat_map(|r| r.codes.iter().copied())
                .collect(),
            scales: rounded.iter().map(|r| r.scale).collect(),
        };
        let slot = slot as usize;
        if self.slots.len() <= slot {
            self.slots.resize(slot + 1, None);
        }
        self.views += held.scales.len();
        match self.slots[slot].replace(held) {
            Some(old) => self.views -= old.scales.len(),
            None => self.count += 1,
        }
        true
    }

    pub(crate) fn clear(&mut self, slot: u32) {
        if let Some(old) = self.slots.get_mut(slot as usize).and_then(Option::take) {
            self.views -= old.scales.len();
            self.count -= 1;
        }
    }

    pub(crate) fn has(&self, slot: u32) -> bool {
        self.slots.get(slot as usize).is_some_and(Option::is_some)
    }

    /// Cosine of `query` with the closest view of every row, by slot (0 where there is
    /// none), both rounded to 8 bits.
    pub(crate) fn cosines(&self, query: &[f32]) -> Vec<f32> {
        if query.len() != self.dim {
            return vec![0.0; self.slots.len()];
        }
        let query = Rounded::of(query);
        let dot = ExactDot::new(&query.codes);
        self.slots
            .iter()
            .map(|views| match views {
                Some(views) => views
                    .codes
                    .chunks_exact(self.dim)
                    .zip(views.scales.iter())
                    .map(|(codes, scale)| dot.dot(codes) as f32 * (query.scale * scale))
                    .fold(f32::NEG_INFINITY, f32::max),
                None => 0.0,
            })
            .collect()
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        self.views * (self.dim + std::mem::size_of::<f32>())
            + self.slots.capacity() * std::mem::size_of::<Option<Views>>()
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
        let two = vectors.memory_bytes();
        vectors.set(0, &[&[1.0, 0.0]]);
        assert_eq!(vectors.len(), 1);
        assert_eq!(
            two - vectors.memory_bytes(),
            6,
            "one view: two codes and a scale"
        );
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
    fn the_memory_gauge_follows_the_views_held() {
        let mut vectors = Vectors::default();
        vectors.set(0, &[&[1.0, 0.0]]);
        let one = vectors.memory_bytes();
        vectors.set(0, &[&[1.0, 0.0], &[0.0, 1.0]]);
        assert_eq!(
            vectors.memory_bytes() - one,
            6,
            "a second view: two codes and a scale"
        );
        vectors.clear(0);
        assert_eq!(one - vectors.memory_bytes(), 6, "nothing held but the slot");
        vectors.set(0, &[&[1.0, 0.0]]);
        assert_eq!(vectors.memory_bytes(), one);
    }
}
