//! The receipt log's Merkle tree at 10^3, 10^5 and 10^6 receipts: time to load the leaves
//! (into sled and the hash file), proof sizes, and the time to make a proof from the stored hashes and to verify
//! it (inclusion and consistency), medians and p99 over random leaves and sizes.
//!
//! `cargo bench -p rowcall-node --bench receipt_log`. Prints a table; asserts nothing (a
//! proof that fails to verify stops the run).

use std::time::{Duration, Instant};

use rowcall_node::store::checkpoint::LogHeader;
use rowcall_node::store::state_machine::transparency::{LogLoader, LogReader};
use rowcall_node::store::tree_file::TreeFile;
use rowcall_proto::tlog;

/// Proofs timed per size.
const SAMPLES: usize = 2_000;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// A small deterministic generator (xorshift64*), so runs pick the same leaves.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

fn main() {
    println!(
        "| receipts | load | inclusion proof | make p50 / p99 | verify p50 / p99 | consistency proof (max) | make p50 / p99 | verify p50 / p99 |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for n in [1_000u64, 100_000, 1_000_000] {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::open(dir.path().join("sled")).unwrap();
        let tree = db.open_tree("sm").unwrap();
        let file = TreeFile::open(&dir.path().join("tree.hashes"), db.clone(), false).unwrap();

        let started = Instant::now();
        let mut loader = LogLoader::clear(&tree, &file).unwrap();
        let mut batch = sled::Batch::default();
        let mut leaves = Vec::with_capacity(n as usize);
        for i in 0..n {
            let id = format!("inv_{i:010}");
            let hash = tlog::leaf_hash(id.as_bytes());
            leaves.push(hash);
            loader.leaf(&mut batch, i, &id, hash).unwrap();
            if i % 100 == 99 {
                tree.apply_batch(std::mem::take(&mut batch)).unwrap();
            }
        }
        let header = LogHeader {
            size: n,
            root: tlog::encode_hash(&loader.root()),
            ..LogHeader::default()
        };
        loader.finish(&mut batch, &header).unwrap();
        tree.apply_batch(batch).unwrap();
        db.flush().unwrap();
        let load = started.elapsed();

        let log = LogReader::open(tree, file).unwrap();
        let root = log.root(n).unwrap();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ n);
        let (mut make, mut verify) = (Vec::new(), Vec::new());
        let mut inclusion_len = 0;
        for _ in 0..SAMPLES {
            let index = rng.below(n);
            let t = Instant::now();
            let path = log.inclusion(index, n).unwrap();
            make.push(t.elapsed());
            let t = Instant::now();
            tlog::verify_inclusion(index, n, &leaves[index as usize], &path, &root).unwrap();
            verify.push(t.elapsed());
            inclusion_len = inclusion_len.max(path.len());
        }
        let (mut c_make, mut c_verify) = (Vec::new(), Vec::new());
        let mut consistency_len = 0;
        for _ in 0..SAMPLES {
            let from = 1 + rng.below(n - 1);
            let old_root = log.root(from).unwrap();
            let t = Instant::now();
            let path = log.consistency(from, n).unwrap();
            c_make.push(t.elapsed());
            let t = Instant::now();
            tlog::verify_consistency(from, n, &old_root, &root, &path).unwrap();
            c_verify.push(t.elapsed());
            consistency_len = consistency_len.max(path.len());
        }
        for v in [&mut make, &mut verify, &mut c_make, &mut c_verify] {
            v.sort();
        }
        let pair = |v: &[Duration]| {
            format!(
                "{:.1} / {:.1} µs",
                micros(percentile(v, 0.5)),
                micros(percentile(v, 0.99))
            )
        };
        println!(
            "| {n} | {:.2} s | {} hashes, {} B | {} | {} | {} hashes, {} B | {} | {} |",
            load.as_secs_f64(),
            inclusion_len,
            inclusion_len * 32,
            pair(&make),
            pair(&verify),
            consistency_len,
            consistency_len * 32,
            pair(&c_make),
            pair(&c_verify),
        );
    }
}
