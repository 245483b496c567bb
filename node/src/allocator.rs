//! What the node asks of glibc's allocator, so resident memory follows the heap.
//!
//! glibc's `malloc` gives each thread that meets contention an arena of its own, up to
//! eight per core, and memory freed into an arena stays there for that arena's next
//! allocations. A node's threads (the async workers, the blocking pool, sled's flusher, the
//! log's writer, the model's pool) each free what others allocated, so under a steady load
//! resident memory kept growing well past what the heap held: measured on one node under
//! 16 connections of invocations for 90 s, 692 MiB resident after 252,721 invocations with
//! the default arenas, against 386 MiB after 269,338 with two arenas and the trim below
//! (the performance chapter, "Disk and memory over time"). The node therefore keeps
//! [`ARENAS`] arenas (unless
//! `MALLOC_ARENA_MAX` says otherwise: glibc has read it already) and hands free pages back
//! to the kernel every [`TRIM_EVERY`].
//!
//! Both calls only tune the C library's allocator; on other C libraries they are absent and
//! nothing is done.

use std::time::Duration;

/// Arenas the allocator keeps at most: one per core of the small machines a node is sized
/// for, whatever the thread count.
pub const ARENAS: i32 = 2;
/// How often free pages inside the arenas go back to the kernel.
pub const TRIM_EVERY: Duration = Duration::from_secs(10);

/// Caps the allocator's arenas at [`ARENAS`]; call it first thing in `main`, before threads
/// start, unless the operator set `MALLOC_ARENA_MAX`.
#[allow(unsafe_code)]
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: `mallopt` only changes a parameter glibc reads when a thread next needs an
        // arena; it touches no memory of ours and is safe to call at any time.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, ARENAS);
        }
    }
}

/// Hands the arenas' free pages back to the kernel (`malloc_trim`), every [`TRIM_EVERY`],
/// on a thread of its own for the life of the process.
pub fn trim_in_background() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let _ = std::thread::Builder::new()
            .name("malloc-trim".into())
            .spawn(|| loop {
                std::thread::sleep(TRIM_EVERY);
                trim();
            });
    }
}

/// Hands the arenas' free pages back to the kernel once.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn trim() {
    // SAFETY: `malloc_trim` walks glibc's own free lists under their locks and returns
    // whole free pages with `madvise`; it frees nothing that is in use.
    unsafe {
        libc::malloc_trim(0);
    }
}
