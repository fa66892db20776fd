//! The reorder store: packets that arrived ahead of a gap, copied into one
//! preallocated byte ring and indexed by their first sequence number.
//!
//! Bytes are placed in arrival order; a packet's bytes are reclaimed once
//! every packet that arrived before it has been released too. Packets
//! arrive close to sequence order and are released in sequence order, so
//! the ring rarely holds dead space for long.

use std::collections::VecDeque;

use super::Line;

/// One stored packet: its message range, the line it came from, and where
/// its bytes are.
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    /// Sequence number of its first message.
    pub first: u64,
    /// Sequence number after its last message.
    pub end: u64,
    /// The line whose copy this is.
    pub line: Line,
    id: u64,
    start: usize,
    len: usize,
}

/// One placement in the ring, in arrival order.
#[derive(Debug, Clone, Copy)]
struct Alloc {
    start: usize,
    live: bool,
}

#[derive(Debug)]
pub(super) struct Store {
    ring: Box<[u8]>,
    /// End of the newest placement.
    head: usize,
    /// Placements in arrival order; the front is the oldest still holding
    /// ring space.
    allocs: VecDeque<Alloc>,
    /// Id of `allocs[0]`; ids grow by one per placement.
    front_id: u64,
    /// Live entries, sorted by `first`.
    index: VecDeque<Entry>,
    max_packets: usize,
}

impl Store {
    /// Allocates the ring and both indexes once.
    pub fn new(bytes: usize, max_packets: usize) -> Self {
        Self {
            ring: vec![0; bytes].into_boxed_slice(),
            head: 0,
            allocs: VecDeque::with_capacity(max_packets),
            front_id: 0,
            index: VecDeque::with_capacity(max_packets),
            max_packets,
        }
    }

    /// Where `len` bytes would go, if they fit.
    fn place(&self, len: usize) -> Option<usize> {
        let cap = self.ring.len();
        if len == 0 || len > cap {
            return None;
        }
        let Some(front) = self.allocs.front() else {
            return Some(0);
        };
        let tail = front.start;
        if self.head > tail {
            // Live bytes are [tail, head): room after head, else before tail.
            if cap - self.head >= len {
                Some(self.head)
            } else if tail >= len {
                Some(0)
            } else {
                None
            }
        } else if tail - self.head >= len {
            // Wrapped: live bytes are [tail, cap) and [0, head).
            Some(self.head)
        } else {
            None
        }
    }

    /// True if a packet of `len` bytes can be stored now.
    pub fn fits(&self, len: usize) -> bool {
        self.index.len() < self.max_packets
            && self.allocs.len() < self.max_packets
            && self.place(len).is_some()
    }

    /// Copies a packet in; false (and nothing stored) if it does not fit.
    pub fn insert(&mut self, first: u64, end: u64, line: Line, bytes: &[u8]) -> bool {
        if !self.fits(bytes.len()) {
            return false;
        }
        let Some(start) = self.place(bytes.len()) else {
            return false;
        };
        let len = bytes.len();
        self.ring[start..start + len].copy_from_slice(bytes);
        self.head = start + len;
        let id = self.front_id + self.allocs.len() as u64;
        self.allocs.push_back(Alloc { start, live: true });
        // After any entries with the same first sequence: first copy first.
        let pos = self.index.partition_point(|e| e.first <= first);
        self.index.insert(
            pos,
            Entry {
                first,
                end,
                line,
                id,
                start,
                len,
            },
        );
        true
    }

    /// The stored entry with the lowest first sequence.
    pub fn front(&self) -> Option<Entry> {
        self.index.front().copied()
    }

    /// The bytes of a stored entry.
    pub fn bytes(&self, e: &Entry) -> &[u8] {
        &self.ring[e.start..e.start + e.len]
    }

    /// Releases the front entry and reclaims what ring space it can.
    pub fn pop_front(&mut self) {
        let Some(e) = self.index.pop_front() else {
            return;
        };
        let i = (e.id - self.front_id) as usize;
        if let Some(a) = self.allocs.get_mut(i) {
            a.live = false;
        }
        while self.allocs.front().is_some_and(|a| !a.live) {
            self.allocs.pop_front();
            self.front_id += 1;
        }
        if self.allocs.is_empty() {
            self.head = 0;
        }
    }

    /// Drops everything.
    pub fn clear(&mut self) {
        self.index.clear();
        self.front_id += self.allocs.len() as u64;
        self.allocs.clear();
        self.head = 0;
    }

    /// Packets held.
    pub fn len(&self) -> usize {
        self.index.len()
    }
}
