//! Where a node's bytes go: opens a stopped node's sled folder and prints, per tree and per
//! logical table (key prefix), how many keys it holds and their key and value bytes, next to
//! what the folder takes on disk, and what the receipt files beside it take. Run on a copy of a data folder, with the node stopped:
//!
//! ```sh
//! cargo run -p rowcall-node --example sled_usage -- ./rowcall-data/sled [invocations]
//! ```
//!
//! With `invocations` (how many were made), it also prints bytes per invocation. With a third
//! argument, a folder that does not exist yet, it copies every tree into a fresh sled database
//! there and prints that one's size: what the live data costs in sled without the garbage its
//! write history left behind.

use std::collections::BTreeMap;
use std::path::Path;

/// Key and value bytes of one logical table.
#[derive(Default)]
struct Usage {
    keys: u64,
    key_bytes: u64,
    value_bytes: u64,
}

/// The logical table a key belongs to: its bytes up to the first `/` (`r/`, `e/`, `m/vote`
/// keeps `m/`), or the outbox's `inv_` ids, or `?` for anything else.
fn table(key: &[u8]) -> String {
    match key.iter().position(|&b| b == b'/') {
        Some(at) if at <= 12 => String::from_utf8_lossy(&key[..=at]).into_owned(),
        _ if key.starts_with(b"inv_") => "inv_".into(),
        _ => "?".into(),
    }
}

/// Bytes under `path`, walked recursively (files only).
fn disk_bytes(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(path)
        .map(|entries| entries.flatten().map(|e| disk_bytes(&e.path())).sum())
        .unwrap_or(0)
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .ok_or_else(|| anyhow::anyhow!("usage: sled_usage <sled folder> [invocations]"))?;
    let invocations: Option<u64> = args.next().map(|n| n.parse()).transpose()?;
    let copy_to = args.next();
    let dir = Path::new(&dir);
    let on_disk = disk_bytes(dir);
    let compression = rowcall_node::store::compression::written_with(dir)?.unwrap_or(false);
    let db = rowcall_node::store::compression::open_as_written(dir)?;

    let mut total = Usage::default();
    println!(
        "{:<10} {:<14} {:>10} {:>14} {:>14}",
        "tree", "table", "keys", "key bytes", "value bytes"
    );
    for name in db.tree_names() {
        let tree = db.open_tree(&name)?;
        let mut tables: BTreeMap<String, Usage> = BTreeMap::new();
        for item in tree.iter() {
            let (key, value) = item?;
            let usage = tables.entry(table(&key)).or_default();
            usage.keys += 1;
            usage.key_bytes += key.len() as u64;
            usage.value_bytes += value.len() as u64;
        }
        let tree_name = String::from_utf8_lossy(&name).into_owned();
        for (table, usage) in &tables {
            println!(
                "{:<10} {:<14} {:>10} {:>14} {:>14}",
                tree_name, table, usage.keys, usage.key_bytes, usage.value_bytes
            );
            total.keys += usage.keys;
            total.key_bytes += usage.key_bytes;
            total.value_bytes += usage.value_bytes;
        }
    }
    let logical = total.key_bytes + total.value_bytes;
    println!(
        "{:<10} {:<14} {:>10} {:>14} {:>14}",
        "all", "", total.keys, total.key_bytes, total.value_bytes
    );
    println!("logical bytes (keys + values): {logical}");
    println!("sled folder on disk:           {on_disk}");
    println!(
        "amplification (disk / logical): {:.2}",
        on_disk as f64 / logical.max(1) as f64
    );
    if let Some(n) = invocations.filter(|&n| n > 0) {
        println!(
            "per invocation: logical {} B, on disk {} B",
            logical / n,
            on_disk / n
        );
    }
    // Receipt bodies are beside the database, in append-only files (`store::segments`).
    let receipts = rowcall_node::store::durable::segments_dir(dir);
    let receipt_bytes = disk_bytes(&receipts);
    println!(
        "receipt files, bodies and tree hashes ({}): {receipt_bytes}",
        receipts.display()
    );
    if let Some(n) = invocations.filter(|&n| n > 0) {
        println!("receipt files per invocation:  {} B", receipt_bytes / n);
    }
    if let Some(copy_to) = copy_to {
        let copy_to = Path::new(&copy_to);
        anyhow::ensure!(!copy_to.exists(), "{} exists already", copy_to.display());
        let fresh = sled::Config::new()
            .path(copy_to)
            .mode(sled::Mode::LowSpace)
            .use_compression(compression)
            .open()?;
        for name in db.tree_names() {
            let (from, to) = (db.open_tree(&name)?, fresh.open_tree(&name)?);
            let mut batch = sled::Batch::default();
            for item in from.iter() {
                let (key, value) = item?;
                batch.insert(key, value);
            }
            to.apply_batch(batch)?;
        }
        fresh.flush()?;
        drop(fresh);
        let copied = disk_bytes(copy_to);
        println!("fresh copy on disk:            {copied}");
        if let Some(n) = invocations.filter(|&n| n > 0) {
            println!("fresh copy per invocation:     {} B", copied / n);
        }
    }
    Ok(())
}
