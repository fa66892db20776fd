//! The publisher's retained window: the last messages it published, kept
//! for retransmission.
//!
//! Messages sit back to back in one byte ring (`arena`) as they go on the
//! wire, each message header followed by its payload, addressed by a
//! monotonic byte position; a message never wraps the end of the ring (the
//! tail is skipped instead), so it is always one contiguous slice, and
//! consecutive messages that did not wrap are one contiguous run that a
//! datagram carries as it is (no copy into a datagram buffer). A table
//! of `retain_messages` entries maps a sequence number to its position.
//! A message is retained while its entry has not been reused and its bytes
//! have not been overwritten; both limits evict from the oldest end, so the
//! retained messages are always the range `oldest..next`.

use crate::wire::{Header, HEADER_LEN};

#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    /// Monotonic byte position of the message header.
    pos: u64,
    /// Where the message header starts in the arena (`pos` modulo its
    /// size), kept so that reading a message needs no division; the
    /// payload follows it.
    at: usize,
    len: u32,
}

/// Messages `oldest..next`, with their payloads.
#[derive(Debug)]
pub(crate) struct Retained {
    entries: Box<[Entry]>,
    /// `entries.len() - 1`; the length is a power of two.
    mask: u64,
    arena: Box<[u8]>,
    /// Monotonic position where the next payload may start.
    head: u64,
    /// `head` modulo the arena's size, kept so that a claim needs no
    /// division.
    head_at: usize,
    /// Position, arena offset (of the header) and payload length of the
    /// space handed out by `claim`, if any.
    claimed: Option<(u64, usize, usize)>,
    /// Oldest retained sequence (== `next` when none is).
    oldest: u64,
    /// Sequence the next commit gets.
    next: u64,
}

impl Retained {
    /// `messages` is a power of two; `bytes` (the arena, message headers
    /// included) at least the largest message and its header.
    pub(crate) fn new(messages: usize, bytes: usize) -> Retained {
        Retained {
            entries: vec![Entry::default(); messages].into_boxed_slice(),
            mask: messages as u64 - 1,
            arena: super::prefaulted(bytes),
            head: 0,
            head_at: 0,
            claimed: None,
            oldest: 1,
            next: 1,
        }
    }

    /// Oldest retained sequence, or 0 when nothing is retained.
    #[inline]
    pub(crate) fn oldest(&self) -> u64 {
        if self.oldest == self.next {
            0
        } else {
            self.oldest
        }
    }

    /// Latest published sequence, 0 before the first.
    #[inline]
    pub(crate) fn latest(&self) -> u64 {
        self.next - 1
    }

    /// Sequence the next commit gets.
    #[inline]
    pub(crate) fn next_seq(&self) -> u64 {
        self.next
    }

    /// Space for a `len`-byte payload (`len` plus [`HEADER_LEN`] at most
    /// the arena size), evicting the oldest messages whose bytes it will
    /// overwrite.
    #[inline]
    pub(crate) fn claim(&mut self, len: usize) -> &mut [u8] {
        let (pos, start) = self.place(len);
        let end = pos + (HEADER_LEN + len) as u64;
        let size = self.arena.len() as u64;
        // Bytes at positions below `end - size` share arena bytes with the
        // new message.
        let overwritten_below = end.saturating_sub(size);
        while self.oldest < self.next
            && self.entries[(self.oldest & self.mask) as usize].pos < overwritten_below
        {
            self.oldest += 1;
        }
        self.claimed = Some((pos, start, len));
        &mut self.arena[start + HEADER_LEN..start + HEADER_LEN + len]
    }

    /// Where a `len`-byte message claimed now would start: its monotonic
    /// position and arena offset.
    #[inline]
    fn place(&self, len: usize) -> (u64, usize) {
        let size = self.arena.len();
        if self.head_at + HEADER_LEN + len > size {
            // Skip the tail so the message stays contiguous.
            (self.head + (size - self.head_at) as u64, 0)
        } else {
            (self.head, self.head_at)
        }
    }

    /// Bytes in the arena.
    #[inline]
    pub(crate) fn size(&self) -> usize {
        self.arena.len()
    }

    /// Monotonic position where the next message would start if it did not
    /// skip the tail. A claim of `len` bytes overwrites nothing at or above
    /// `head + 2 * (HEADER_LEN + len) - size` (a skipped tail is shorter
    /// than the message).
    #[inline]
    pub(crate) fn head(&self) -> u64 {
        self.head
    }

    /// Publishes the first `len` bytes of the claimed space, writing its
    /// message header in front of it; returns the new message's sequence,
    /// or `None` without a claim of at least `len`.
    #[cfg(test)]
    pub(crate) fn commit(&mut self, len: usize, flags: u32, timestamp: u64) -> Option<u64> {
        Some(self.commit_span(len, flags, timestamp)?.0)
    }

    /// Publishes the first `len` bytes of the claimed space, writing its
    /// message header in front of it; returns the new message's sequence
    /// and where it lies as it goes on the wire (header and payload): its
    /// monotonic position and its arena range. `None` without a claim of
    /// at least `len`.
    #[inline]
    pub(crate) fn commit_span(
        &mut self,
        len: usize,
        flags: u32,
        timestamp: u64,
    ) -> Option<(u64, u64, std::ops::Range<usize>)> {
        let (pos, at, claimed) = self.claimed?;
        if len > claimed {
            return None;
        }
        self.claimed = None;
        // The entry about to be reused belongs to `next - entries`.
        if self.next - self.oldest > self.mask {
            self.oldest += 1;
        }
        let seq = self.next;
        Header {
            seq,
            len: len as u32,
            flags,
            timestamp,
        }
        .encode(&mut self.arena[at..at + HEADER_LEN]);
        self.entries[(seq & self.mask) as usize] = Entry {
            pos,
            at,
            len: len as u32,
        };
        let end = at + HEADER_LEN + len;
        self.head = pos + (HEADER_LEN + len) as u64;
        self.head_at = if end == self.arena.len() { 0 } else { end };
        self.next += 1;
        Some((seq, pos, at..end))
    }

    /// Message `seq` and its payload, if retained.
    #[inline]
    pub(crate) fn get(&self, seq: u64) -> Option<(Header, &[u8])> {
        if seq < self.oldest || seq >= self.next {
            return None;
        }
        let e = &self.entries[(seq & self.mask) as usize];
        let start = e.at + HEADER_LEN;
        // The flags and timestamp are the header's, as commit wrote it.
        let head = &self.arena[e.at..start];
        let h = Header {
            seq,
            len: e.len,
            flags: u32::from_le_bytes(head[12..16].try_into().expect("4 bytes")),
            timestamp: u64::from_le_bytes(head[16..24].try_into().expect("8 bytes")),
        };
        Some((h, &self.arena[start..start + e.len as usize]))
    }

    /// Where message `seq` lies as it goes on the wire (header and
    /// payload): its monotonic position and its arena range, if retained.
    #[cfg(test)]
    pub(crate) fn wire_span(&self, seq: u64) -> Option<(u64, std::ops::Range<usize>)> {
        if seq < self.oldest || seq >= self.next {
            return None;
        }
        let e = &self.entries[(seq & self.mask) as usize];
        Some((e.pos, e.at..e.at + HEADER_LEN + e.len as usize))
    }

    /// Arena bytes `range`, as [`commit_span`](Self::commit_span) gave them.
    #[inline]
    pub(crate) fn bytes(&self, range: std::ops::Range<usize>) -> &[u8] {
        &self.arena[range]
    }

    /// Start and capacity of every buffer, to show they never move.
    #[cfg(test)]
    pub(crate) fn buffers(&self) -> [(usize, usize); 2] {
        [
            (self.entries.as_ptr() as usize, self.entries.len()),
            (self.arena.as_ptr() as usize, self.arena.len()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(r: &mut Retained, bytes: &[u8]) -> u64 {
        r.claim(bytes.len()).copy_from_slice(bytes);
        r.commit(bytes.len(), 0, 0).unwrap()
    }

    #[test]
    fn keeps_the_last_n_messages() {
        let mut r = Retained::new(4, 1024);
        assert_eq!((r.oldest(), r.latest()), (0, 0));
        for i in 1..=10u8 {
            assert_eq!(put(&mut r, &[i; 3]), i as u64);
        }
        assert_eq!((r.oldest(), r.latest()), (7, 10));
        assert!(r.get(6).is_none());
        assert!(r.get(11).is_none());
        for s in 7..=10 {
            let (h, p) = r.get(s).unwrap();
            assert_eq!((h.seq, p), (s, &[s as u8; 3][..]));
        }
    }

    #[test]
    fn evicts_messages_whose_bytes_are_overwritten() {
        // Each 40-byte payload takes 64 bytes with its header.
        let mut r = Retained::new(64, 148);
        for i in 1..=3u8 {
            put(&mut r, &[i; 40]);
        }
        // 3 x 64 bytes do not fit in 148: the third skipped the 20-byte
        // tail and overwrote the first.
        assert_eq!(r.oldest(), 2);
        assert_eq!(r.get(2).unwrap().1, &[2u8; 40][..]);
        assert_eq!(r.get(3).unwrap().1, &[3u8; 40][..]);
        put(&mut r, &[4; 100]);
        assert_eq!((r.oldest(), r.latest()), (4, 4));
        assert_eq!(r.get(4).unwrap().1, &[4u8; 100][..]);
        // zero-length messages take their header only
        put(&mut r, &[]);
        assert_eq!(r.get(5).unwrap().1, &[] as &[u8]);
        assert_eq!(r.oldest(), 4);
    }

    #[test]
    fn a_message_that_ends_at_the_arena_end_is_followed_from_the_start() {
        let mut r = Retained::new(8, 148);
        put(&mut r, &[1; 50]);
        put(&mut r, &[2; 50]);
        assert_eq!((r.oldest(), r.latest()), (1, 2));
        // The arena is exactly full: the next message starts at offset 0
        // and overwrites the first message only.
        put(&mut r, &[3; 10]);
        assert_eq!((r.oldest(), r.latest()), (2, 3));
        assert_eq!(r.get(2).unwrap().1, &[2u8; 50][..]);
        assert_eq!(r.get(3).unwrap().1, &[3u8; 10][..]);
        // A shorter commit than claimed moves the head by what was kept.
        r.claim(10)[..5].copy_from_slice(&[4; 5]);
        assert_eq!(r.commit(5, 0, 0), Some(4));
        assert_eq!(r.oldest(), 2);
        put(&mut r, &[5; 10]);
        assert_eq!(r.get(4).unwrap().1, &[4u8; 5][..]);
        assert_eq!(r.get(5).unwrap().1, &[5u8; 10][..]);
        assert_eq!(r.arena[34 + HEADER_LEN..34 + HEADER_LEN + 5], [4; 5]);
        assert_eq!(r.arena[63 + HEADER_LEN..63 + HEADER_LEN + 10], [5; 10]);
    }

    #[test]
    fn each_message_is_kept_as_it_goes_on_the_wire() {
        let mut r = Retained::new(8, 256);
        r.claim(6).copy_from_slice(b"abcdef");
        assert_eq!(r.commit(6, 1, 77), Some(1));
        put(&mut r, b"xyz");
        let (pos1, span1) = r.wire_span(1).unwrap();
        let (pos2, span2) = r.wire_span(2).unwrap();
        // Consecutive messages are one contiguous run.
        assert_eq!((pos1, span1.start, span1.end), (0, 0, HEADER_LEN + 6));
        assert_eq!((pos2, span2.start), (span1.end as u64, span1.end));
        let (h, payload) = Header::decode(r.bytes(span1)).unwrap();
        assert_eq!((h, payload), r.get(1).unwrap());
        assert_eq!((h.seq, h.len, h.flags, h.timestamp), (1, 6, 1, 77));
        let (h, payload) = Header::decode(r.bytes(span2)).unwrap();
        assert_eq!((h.seq, payload), (2, &b"xyz"[..]));
        assert!(r.wire_span(3).is_none());
        // 57 bytes used; 224 do not fit behind them: the claim starts at
        // the next lap (position 256) and overwrites below 480 - 256, within
        // the bound `head` gives (57 + 2 * 224 - 256).
        assert_eq!((r.head(), r.size()), (57, 256));
        r.claim(200);
        assert_eq!(r.oldest(), 0);
        assert!(r.get(1).is_none() && r.get(2).is_none());
    }

    #[test]
    fn commit_needs_a_claim_that_is_long_enough() {
        let mut r = Retained::new(4, 64);
        assert_eq!(r.commit(1, 0, 0), None);
        r.claim(4);
        assert_eq!(r.commit(5, 0, 0), None);
        assert_eq!(r.commit(2, 0, 0), Some(1));
        assert_eq!(r.commit(0, 0, 0), None);
    }
}
