//! mdbus-stat, as a library: reads the counters files of every bus on a
//! host ([`snapshot`]), the RDMA port counters in sysfs ([`sysfs`]), and
//! renders them as OpenMetrics text with stable names ([`metrics`]).
//!
//! | module | what |
//! | --- | --- |
//! | [`snapshot`] | the buses of a directory: owner, alive or stale, counters, error log; rates between samples |
//! | [`sysfs`] | `/sys/class/infiniband/DEV/ports/N/{counters,hw_counters}` of the ports buses use |
//! | [`procfs`] | the UDP sockets of a bus's process: receive queue, kernel drops (`/proc/PID/net/udp`) |
//! | [`metrics`] | label → metric family and labels; the OpenMetrics exposition |
//! | [`render`] | the text, JSON and error-log views |

pub mod metrics;
pub mod procfs;
pub mod render;
pub mod snapshot;
pub mod sysfs;

/// The default directory of the buses' counters files.
pub const DEFAULT_DIR: &str = mdbus::config::DEFAULT_COUNTERS_DIR;
