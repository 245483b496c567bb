//! Values every layer shares — receipts, share tokens, the clock format — kept below the
//! store, Raft, dispatch and the front ends so that none of them imports upward. Nothing
//! here depends on another rowcall module.

pub mod alarm;
pub mod receipt;
pub mod retention;
pub mod share;
pub mod time;
pub mod transparency;
