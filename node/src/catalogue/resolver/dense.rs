//! Row vectors for the dense half of the resolver: one unit vector per slot of the lexical
//! index, in one flat array so a query scans it front to back.

use crate::catalogue::embed::dot;

#[derive(Debug, Default)]
pub(crate) struct Vectors {
    dim: usize,
    /// `slot * dim ..` holds the slot's vector when `present[slot]`.
    data: Vec<f32>,
    present: Vec<bool>,
    count: usize,
}

impl Vectors {
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// Stores the vector of `slot`. A vector of another length than the ones stored is
    /// refused (a model change starts from an empty store, see [`Vectors::clear_all`]).
    pub(crate) fn set(&mut self, slot: u32, vector: &[f32]) -> bool {
        if vector.is_empty() || (self.dim != 0 && vector.len() != self.dim) {
            return false;
        }
        self.dim = vector.len();
        let slot = slot as usize;
        if self.present.len() <= slot {
            self.present.resize(slot + 1, false);
            self.data.resize((slot + 1) * self.dim, 0.0);
        }
        self.data[slot * self.dim..(slot + 1) * self.dim].copy_from_slice(vector);
        if !self.present[slot] {
            self.present[slot] = true;
            self.count += 1;
        }
        true
    }

    pub(crate) fn clear(&mut self, slot: u32) {
        if let Some(p) = self.present.get_mut(slot as usize) {
            if *p {
                *p = false;
                self.count -= 1;
            }
        }
    }

    pub(crate) fn has(&self, slot: u32) -> bool {
        self.present.get(slot as usize).copied().unwrap_or(false)
    }

    /// Cosine of `query` with every stored vector, by slot (0 where there is none).
    pub(crate) fn cosines(&self, query: &[f32]) -> Vec<f32> {
        if query.len() != self.dim {
            return vec![0.0; self.present.len()];
        }
        self.present
            .iter()
            .zip(self.data.chunks_exact(self.dim))
            .map(|(&p, v)| if p { dot(query, v) } else { 0.0 })
            .collect()
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        self.data.capacity() * 4 + self.present.capacity()
    }
}
