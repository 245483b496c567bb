//! Row vectors for the dense half of the resolver: each row is seen from one or more sides
//! (its views, see [`crate::catalogue::semantic::embed_views`]), one unit vector per view,
//! and a query is as close to a row as to its closest view.

use crate::catalogue::embed::dot;

#[derive(Debug, Default)]
pub(crate) struct Vectors {
    dim: usize,
    /// The views' vectors of each slot, one after the other (`None`: not embedded).
    slots: Vec<Option<Box<[f32]>>>,
    count: usize,
    floats: usize,
}

impl Vectors {
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// Stores the views' vectors of `slot`. Vectors of another length than the ones stored
    /// are refused (a model change starts from an empty store, see [`Vectors::clear`]), and
    /// so is an empty list.
    pub(crate) fn set(&mut self, slot: u32, views: &[&[f32]]) -> bool {
        let Some(first) = views.first() else {
            return false;
        };
        let dim = if self.dim == 0 { first.len() } else { self.dim };
        if dim == 0 || views.iter().any(|v| v.len() != dim) {
            return false;
        }
        self.dim = dim;
        let slot = slot as usize;
        if self.slots.len() <= slot {
            self.slots.resize(slot + 1, None);
        }
        let joined: Box<[f32]> = views.concat().into();
        self.floats += joined.len();
        match self.slots[slot].replace(joined) {
            Some(old) => self.floats -= old.len(),
            None => self.count += 1,
        }
        true
    }

    pub(crate) fn clear(&mut self, slot: u32) {
        if let Some(old) = self.slots.get_mut(slot as usize).and_then(Option::take) {
            self.floats -= old.len();
            self.count -= 1;
        }
    }

    pub(crate) fn has(&self, slot: u32) -> bool {
        self.slots.get(slot as usize).is_some_and(Option::is_some)
    }

    /// Cosine of `query` with the closest view of every row, by slot (0 where there is
    /// none).
    pub(crate) fn cosines(&self, query: &[f32]) -> Vec<f32> {
        if query.len() != self.dim {
            return vec![0.0; self.slots.len()];
        }
        self.slots
            .iter()
            .map(|views| match views {
                Some(views) => views
                    .chunks_exact(self.dim)
                    .map(|v| dot(query, v))
                    .fold(f32::NEG_INFINITY, f32::max),
                None => 0.0,
            })
            .collect()
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        self.floats * 4 + self.slots.capacity() * std::mem::size_of::<Option<Box<[f32]>>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_is_as_close_as_its_closest_view() {
        let mut vectors = Vectors::default();
        assert!(vectors.set(0, &[&[1.0, 0.0], &[0.0, 1.0]]));
        assert!(vectors.set(2, &[&[0.6, 0.8]]));
        assert_eq!(vectors.cosines(&[0.0, 1.0]), vec![1.0, 0.0, 0.8]);
        assert_eq!(vectors.cosines(&[1.0, 0.0]), vec![1.0, 0.0, 0.6]);
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
            8,
            "one view of two floats went"
        );
        assert_eq!(vectors.cosines(&[0.0, 1.0]), vec![0.0]);
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
}
