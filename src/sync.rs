//! Atomics used by the lock-free rings, switched to loom's model-checked
//! versions under `--cfg loom` so the same ring code is explored exhaustively.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU64, Ordering};
