//! Lossless subscribers of a shared-memory stream: the publisher waits for
//! the slowest subscriber that asked for it, up to `lossless_timeout`.
//!
//! A subscriber that sets `lossless = true` claims one of the segment's
//! [`LOSSLESS_RECORDS`] records (one cache line each) and stores there, after
//! every poll, the sequence it will read next. Before it overwrites the slot
//! of sequence `next - capacity`, the publisher makes sure no member still
//! needs it. The records are written by other processes, so the publisher
//! treats them as hostile: a position beyond anything published is ignored
//! and counted (`forged`), and a member that stays behind for the timeout
//! (slow or stopped), or whose process is gone, is released for good
//! (`evicted`, logged): it then loses messages like any lossy subscriber
//! and sees them as an overrun.
//!
//! Record words: `[0]` owner (`pid << 32 | nonce`, 0 when free; claimed by
//! compare-and-swap), `[1]` position (0 until the member has stored one),
//! `[2]` the owner's process start time (so a dead owner's record can be
//! taken over).
//!
//! The publisher's fast path is one compare: it rescans the records only
//! when `next` reaches the limit its last scan computed (the slowest
//! position plus the capacity), or every half capacity when nobody asked,
//! so that a member that joins is seen before the ring comes round to it
//! (counted in `scans`). A member stores its position once per poll (at
//! most `poll_batch` messages, or fewer when it found the ring empty), on
//! its own line, which the publisher writes never and reads only in a
//! scan: while members keep up, their cursors cost the publisher one line
//! read per ring and a member one store to a line it holds per poll.
//!
//! When a scan finds the ring full, the publisher spins on the slowest
//! member's record alone (one line) and rescans when it moves; only after
//! a spin phase without movement does it look at the clock, and once per
//! wait at the member's process (system calls). The wait ends at the
//! timeout in any case: a position going backwards, or one far behind the
//! ring, holds the publisher at most `lossless_timeout`, once per member.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::segment::{process_alive, process_start_time, Segment, LOSSLESS_RECORDS};

const OWNER: usize = 0;
const POSITION: usize = 1;
const START: usize = 2;

/// Spins on the slowest member's record between two looks at the clock
/// (and, once per wait, at its process): the clock read and the system
/// calls would slow the member it waits for (the two may share a core).
const SPINS: u32 = 256;

/// What the publisher's gate counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LosslessCounters {
    /// Messages that had to wait for a lossless subscriber.
    pub waits: u64,
    /// Nanoseconds spent waiting, in all.
    pub wait_ns: u64,
    /// Subscribers released after `lossless_timeout` (they lose messages
    /// from then on, reported to them as overruns).
    pub evicted: u64,
    /// Records ignored because their position was beyond anything
    /// published.
    pub forged: u64,
    /// Scans of the records (the only reads of lines the members write):
    /// one per half ring while every member keeps up.
    pub scans: u64,
}

/// The publisher's side: decides whether the next slot may be written.
#[derive(Debug)]
pub struct Gate {
    capacity: u64,
    timeout: Duration,
    /// `next` below this needs no scan.
    limit: u64,
    /// Owner words this publisher no longer waits for.
    released: [u64; LOSSLESS_RECORDS],
    counters: LosslessCounters,
}

/// The slowest member a scan found.
#[derive(Debug, Clone, Copy)]
struct Slowest {
    record: usize,
    owner: u64,
    position: u64,
}

impl Gate {
    /// A gate for a ring of `capacity` slots whose publisher is about to
    /// write sequence `next`.
    pub fn new(capacity: u64, timeout: Duration) -> Gate {
        Gate {
            capacity,
            timeout,
            limit: 0,
            released: [0; LOSSLESS_RECORDS],
            counters: LosslessCounters::default(),
        }
    }

    /// What the gate counted so far.
    pub fn counters(&self) -> LosslessCounters {
        self.counters
    }

    /// Returns once sequence `next` may be written: no member needs the
    /// message it overwrites, or the one that does was released.
    #[inline]
    pub fn admit(&mut self, seg: &Segment, next: u64) {
        if next >= self.limit {
            self.wait(seg, next);
        }
    }

    #[cold]
    fn wait(&mut self, seg: &Segment, next: u64) {
        let mut began: Option<Instant> = None;
        // Whether the slowest member's process was checked in this wait
        // (system calls: once per wait, after the first spin phase).
        let mut checked_alive = false;
        loop {
            let slowest = self.scan(seg, next);
            let limit = match slowest {
                Some(s) => s.position.saturating_add(self.capacity),
                None => next.saturating_add(self.capacity / 2).max(next + 1),
            };
            if next < limit {
                self.limit = limit;
                if let Some(t) = began {
                    self.counters.wait_ns += t.elapsed().as_nanos() as u64;
                }
                return;
            }
            let Some(s) = slowest else {
                unreachable_limit()
            };
            let t = *began.get_or_insert_with(|| {
                self.counters.waits += 1;
                Instant::now()
            });
            // Spin on the one word that can let this message through (the
            // slowest member's record line, which only it writes), not on
            // all the records, the clock or the process table: a member
            // that is merely a poll behind moves within a few microseconds.
            if spin_until_moved(seg, s) {
                continue;
            }
            // A member whose process is gone will never move: it is
            // released now rather than after the timeout.
            if !checked_alive {
                checked_alive = true;
                if !owner_alive(seg, s) {
                    self.release(seg, s, next);
                    continue;
                }
            }
            if t.elapsed() >= self.timeout {
                self.release(seg, s, next);
            }
        }
    }

    /// The member that is furthest behind, ignoring records with a
    /// position no reader can hold.
    fn scan(&mut self, seg: &Segment, next: u64) -> Option<Slowest> {
        self.counters.scans += 1;
        let mut slowest: Option<Slowest> = None;
        for record in 0..LOSSLESS_RECORDS {
            // Acquire: pairs with the member's release stores, so its
            // position is at least the one it stored with this owner.
            let owner = seg.lossless_word(record, OWNER).load(Ordering::Acquire);
            if owner == 0 || owner == self.released[record] {
                continue;
            }
            // Acquire: the member has finished reading the slots below it.
            let position = seg.lossless_word(record, POSITION).load(Ordering::Acquire);
            if position == 0 {
                // Claimed, position not stored yet: it starts at the tail,
                // which the next scan (at most half a ring on) will see.
                continue;
            }
            if position > next {
                // No reader can expect a message not yet written: forged or
                // corrupt. Never waited for.
                self.released[record] = owner;
                self.counters.forged += 1;
                log::warn!(
                    "stream segment {}: lossless record {record} claims position {position}, beyond the next sequence {next}; ignored from now on",
                    seg.path().display()
                );
                continue;
            }
            if slowest.map_or(true, |s| position < s.position) {
                slowest = Some(Slowest {
                    record,
                    owner,
                    position,
                });
            }
        }
        slowest
    }

    #[cold]
    fn release(&mut self, seg: &Segment, s: Slowest, next: u64) {
        self.released[s.record] = s.owner;
        self.counters.evicted += 1;
        let pid = (s.owner >> 32) as u32;
        let state = if owner_alive(seg, s) {
            "is alive but did not read"
        } else {
            "is gone"
        };
        log::warn!(
            "stream segment {}: lossless subscriber (pid {pid}, record {}) {state}: it stayed at sequence {} for {:?} while the publisher waited to write {next}; it now loses messages like a lossy subscriber",
            seg.path().display(),
            s.record,
            s.position,
            self.timeout
        );
    }
}

/// Spins a bounded while (a few microseconds) on the slowest member's
/// record; true as soon as its owner or position changed.
fn spin_until_moved(seg: &Segment, s: Slowest) -> bool {
    for _ in 0..SPINS {
        std::hint::spin_loop();
        // Relaxed: only a hint to rescan; the scan's acquire loads are
        // what order the member's reads before the overwrite.
        if seg
            .lossless_word(s.record, POSITION)
            .load(Ordering::Relaxed)
            != s.position
            || seg.lossless_word(s.record, OWNER).load(Ordering::Relaxed) != s.owner
        {
            return true;
        }
    }
    false
}

/// Whether the process that owns the slowest member's record still runs.
fn owner_alive(seg: &Segment, s: Slowest) -> bool {
    let start = seg.lossless_word(s.record, START).load(Ordering::Relaxed);
    process_alive((s.owner >> 32) as u32, start)
}

/// A scan that found nobody leaves a limit above `next`.
#[cold]
fn unreachable_limit() -> ! {
    unreachable!("a scan without members sets a limit above next")
}

/// A subscriber's membership: its record in the segment.
#[derive(Debug)]
pub struct Member {
    record: usize,
    owner: u64,
}

/// The records a joining member tries, in order: the even ones first, so
/// that up to half of [`LOSSLESS_RECORDS`] members each have a 128-byte
/// pair of lines to themselves (an adjacent-line prefetcher moves lines in
/// pairs, and every member stores its position once per poll).
const JOIN_ORDER: [usize; LOSSLESS_RECORDS] = {
    let mut order = [0; LOSSLESS_RECORDS];
    let mut i = 0;
    while i < LOSSLESS_RECORDS {
        order[i] = if i < LOSSLESS_RECORDS / 2 {
            2 * i
        } else {
            2 * (i - LOSSLESS_RECORDS / 2) + 1
        };
        i += 1;
    }
    order
};

/// Distinguishes the memberships of one process.
static NONCE: AtomicU32 = AtomicU32::new(1);

impl Member {
    /// Claims a free record (or one whose owner is dead) and stores
    /// `position` in it; `None` when all are held by live processes.
    pub fn join(seg: &Segment, position: u64) -> Option<Member> {
        let pid = std::process::id();
        let nonce = NONCE.fetch_add(1, Ordering::Relaxed).max(1);
        let owner = (pid as u64) << 32 | nonce as u64;
        let start = process_start_time(pid).unwrap_or(0);
        for record in JOIN_ORDER {
            let word = seg.lossless_word(record, OWNER);
            let held = word.load(Ordering::Acquire);
            if held != 0 {
                let holder = (held >> 32) as u32;
                let held_start = seg.lossless_word(record, START).load(Ordering::Relaxed);
                if holder == pid || process_alive(holder, held_start) {
                    continue;
                }
            }
            if word
                .compare_exchange(held, owner, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            seg.lossless_word(record, START)
                .store(start, Ordering::Relaxed);
            let member = Member { record, owner };
            member.report(seg, position);
            return Some(member);
        }
        None
    }

    /// Tells the publisher this member will read `position` next: it has
    /// finished with every slot below.
    #[inline]
    pub fn report(&self, seg: &Segment, position: u64) {
        // Release: the reads of the slots below `position` happen before
        // the publisher's acquire load that lets it overwrite them.
        seg.lossless_word(self.record, POSITION)
            .store(position.max(1), Ordering::Release);
    }

    /// Gives the record back.
    pub fn leave(&self, seg: &Segment) {
        seg.lossless_word(self.record, POSITION)
            .store(0, Ordering::Relaxed);
        // Release: the cleared position is visible before the record is
        // free for another subscriber.
        let _ = seg.lossless_word(self.record, OWNER).compare_exchange(
            self.owner,
            0,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }

    /// The record this member holds.
    pub fn record(&self) -> usize {
        self.record
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{HugePages, ShmConfig};
    use crate::transport::shm::segment::{Geometry, Kind};
    use std::sync::atomic::AtomicU64;

    /// Word `w` of record `i`, as a forger writes it.
    fn word(seg: &Segment, i: usize, w: usize) -> &AtomicU64 {
        seg.lossless_word(i, w)
    }

    fn segment(tag: &str) -> (Segment, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("mdbus-lossless-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = ShmConfig {
            dir: dir.clone(),
            huge_pages: HugePages::Off,
            ..Default::default()
        };
        let geo = Geometry {
            kind: Kind::Stream,
            slot_size: 64,
            capacity: 8,
        };
        (Segment::create(&cfg, "s", geo).unwrap(), dir)
    }

    #[test]
    fn without_members_the_gate_rescans_every_half_ring() {
        let (seg, dir) = segment("empty");
        let mut gate = Gate::new(8, Duration::from_secs(3600));
        gate.admit(&seg, 1);
        assert_eq!(gate.limit, 5);
        for next in 1..=100 {
            gate.admit(&seg, next);
        }
        // Scans at 1, 5, 9, ..., 97: the records are read once per half
        // ring, never per message.
        assert_eq!(
            gate.counters(),
            LosslessCounters {
                scans: 25,
                ..LosslessCounters::default()
            }
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_member_that_keeps_up_is_read_once_per_ring() {
        let (seg, dir) = segment("keeps-up");
        let member = Member::join(&seg, 1).unwrap();
        let mut gate = Gate::new(8, Duration::from_secs(3600));
        for next in 1..=100 {
            // The member has read everything before `next`.
            member.report(&seg, next);
            gate.admit(&seg, next);
        }
        // Scans at 1, 9, 17, ..., 97: the member's line is read when the
        // cached limit (its position plus the capacity) is reached, not
        // per message, however often it reports.
        let c = gate.counters();
        assert_eq!((c.scans, c.waits, c.evicted, c.forged), (13, 0, 0, 0));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_position_that_goes_backwards_holds_the_publisher_at_most_the_timeout() {
        let (seg, dir) = segment("backwards");
        let member = Member::join(&seg, 1).unwrap();
        let mut gate = Gate::new(8, Duration::from_millis(1));
        for next in 1..=50 {
            member.report(&seg, next);
            gate.admit(&seg, next);
        }
        // The record now claims the member still needs sequence 3, long
        // overwritten: the publisher waits for it up to the timeout, then
        // releases it, and goes on with no wrap and no further wait.
        word(&seg, member.record(), POSITION).store(3, Ordering::Relaxed);
        for next in 51..=200 {
            gate.admit(&seg, next);
        }
        let c = gate.counters();
        assert_eq!((c.waits, c.evicted, c.forged), (1, 1, 0));
        // Released at 57 (the cached limit of its last honest position,
        // 49), rescans every half ring from then on: 61, 65, ..., 197.
        assert_eq!(gate.limit, 201);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_member_holds_the_publisher_one_ring_ahead_of_it() {
        let (seg, dir) = segment("hold");
        let member = Member::join(&seg, 3).unwrap();
        let mut gate = Gate::new(8, Duration::from_secs(3600));
        gate.admit(&seg, 10);
        assert_eq!(gate.limit, 11, "sequence 11 would overwrite 3");
        member.report(&seg, 7);
        gate.admit(&seg, 11);
        assert_eq!(gate.limit, 15);
        assert_eq!(gate.counters().waits, 0);
        member.leave(&seg);
        assert_eq!(
            word(&seg, member.record(), OWNER).load(Ordering::Relaxed),
            0
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_member_that_does_not_move_is_released_after_the_timeout() {
        let (seg, dir) = segment("timeout");
        let _member = Member::join(&seg, 1).unwrap();
        let mut gate = Gate::new(8, Duration::from_millis(1));
        for next in 1..=20 {
            gate.admit(&seg, next);
        }
        let c = gate.counters();
        assert_eq!((c.waits, c.evicted, c.forged), (1, 1, 0));
        assert!(c.wait_ns > 0);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_member_whose_process_is_gone_is_released_without_waiting() {
        let (seg, dir) = segment("gone");
        let member = Member::join(&seg, 1).unwrap();
        // The owner word names a process that cannot exist.
        word(&seg, member.record(), OWNER)
            .store((i32::MAX as u64 + 1) << 32 | 1, Ordering::Relaxed);
        // An hour's timeout: only the liveness check lets this finish.
        let mut gate = Gate::new(8, Duration::from_secs(3600));
        for next in 1..=20 {
            gate.admit(&seg, next);
        }
        let c = gate.counters();
        assert_eq!((c.waits, c.evicted, c.forged), (1, 1, 0));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_position_beyond_anything_published_is_ignored_and_counted() {
        let (seg, dir) = segment("forged");
        let member = Member::join(&seg, 1).unwrap();
        for absurd in [u64::MAX, 1 << 63, 1_000] {
            word(&seg, member.record(), POSITION).store(absurd, Ordering::Relaxed);
            let mut gate = Gate::new(8, Duration::from_secs(3600));
            for next in 1..=100 {
                gate.admit(&seg, next);
            }
            let c = gate.counters();
            assert_eq!((c.waits, c.evicted, c.forged), (0, 0, 1), "{absurd}");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_first_half_of_the_members_have_a_line_pair_each() {
        let (seg, dir) = segment("pairs");
        let members: Vec<Member> = (0..LOSSLESS_RECORDS)
            .map(|_| Member::join(&seg, 1).unwrap())
            .collect();
        let records: Vec<usize> = members.iter().map(Member::record).collect();
        let half = LOSSLESS_RECORDS / 2;
        // Records are 64 bytes apart from a 128-aligned offset: record i
        // is in pair i / 2.
        let mut pairs: Vec<usize> = records[..half].iter().map(|r| r / 2).collect();
        pairs.dedup();
        assert_eq!(pairs.len(), half, "{records:?}");
        let mut all = records.clone();
        all.sort_unstable();
        assert_eq!(all, (0..LOSSLESS_RECORDS).collect::<Vec<_>>());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_dead_owners_record_is_taken_over_and_live_ones_are_not() {
        let (seg, dir) = segment("takeover");
        let mut members: Vec<Member> = (0..LOSSLESS_RECORDS)
            .map(|_| Member::join(&seg, 1).unwrap())
            .collect();
        // Every record held by this (live) process: none left.
        assert!(Member::join(&seg, 1).is_none());
        // Record 5 claims an owner whose process cannot exist.
        word(&seg, 5, OWNER).store((i32::MAX as u64 + 1) << 32 | 1, Ordering::Relaxed);
        let taken = Member::join(&seg, 1).unwrap();
        assert_eq!(taken.record(), 5);
        members.retain(|m| m.record() != 5);
        members.push(taken);
        assert_eq!(members.len(), LOSSLESS_RECORDS);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
