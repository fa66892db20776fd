//! The library's operating-system layer: every system call the shared-memory
//! transport, the counters file and the verbs memory pools make about files,
//! mappings and processes lives here, behind a small contract (the shape of
//! mio's `sys`).
//!
//! Contract, for every module below:
//! - Linux only; each function states the calls it makes and their cost.
//! - File descriptors are std's [`OwnedFd`](std::os::fd::OwnedFd) (inside
//!   [`std::fs::File`]), so each is closed exactly once and never leaks into
//!   a child (`O_CLOEXEC`, std's default).
//! - Errors are [`std::io::Error`]s carried with the operation and the path
//!   ([`file::FileError`]) or a typed distrust reason ([`file::Distrust`]);
//!   the callers turn them into their own error sentences.
//! - Nothing here knows about transports, channels or the counters layout:
//!   the layering is `verbs-sys -> sys -> transport -> stream/session -> bus`.
//!
//! Modules:
//! - [`file`]: private files: create one exclusively (0600, no symlinks),
//!   size, map and publish it with an atomic no-replace rename; open one only
//!   when it is a regular file of this user with no group/other access.
//! - [`map`]: shared and anonymous memory mappings, unmapped on drop;
//!   prefaulting, locking and huge-page advice.
//! - [`net`]: batched datagram receive (`recvmmsg`), non-blocking.
//! - [`process`]: process liveness by pid and start time, allocation-free.
//! - [`hugepages`]: the huge-page size and whether a hugetlbfs mount can
//!   hold a segment.
//! - [`affinity`]: NUMA nodes of devices and thread pinning (re-exported as
//!   [`crate::affinity`]).
//! - [`leftovers`]: listing and removing files whose creator died.

pub mod affinity;
pub mod file;
pub mod hugepages;
pub mod leftovers;
pub mod map;
pub mod net;
pub mod numa;
pub mod process;
