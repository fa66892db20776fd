//! The publisher's retained window: the last messages it published, kept
//! for retransmission.
//!
//! Payloads sit back to back in one byte ring (`arena`), addressed by a
//! monotonic byte position; a message never wraps the end of the ring (the
//! tail is skipped instead), so it is always one contiguous slice. A table
//! of `retain_messages` entries maps a sequence number to its position.
//! A message is retained while its entry has not been reused and its bytes
//! have not been overwritten; both limits evict from the oldest end, so the
//! retained messages are always the range `oldest..next`.

use crate::wire::Header;

#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    /// Monotonic byte position of the payload.
    pos: u64,
    /// Where the payload starts in the arena (`pos` modulo its size), kept
    /// so that reading a message needs no division.
    at: usize,
    len: u32,
    flags: u32,
    timestamp: u64,
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
    /// Position, arena offset and length of the space handed out by
    /// `claim`, if any.
    claimed: Option<(u64, usize, usize)>,
    /// Oldest retained sequence (== `next` when none is).
    oldest: u64,
    /// Sequence the next commit gets.
    next: u64,
}

impl Retained {
    /// `messages` is a power of two; `bytes` at least the largest message.
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

    /// Space for a `len`-byte payload (`len` at most the arena size),
    /// evicting the oldest messages whose bytes it will overwrite.
    pub(crate) fn claim(&mut self, len: usize) -> &mut [u8] {
        let size = self.arena.len();
        let (pos, start) = if self.head_at + len > size {
            // Skip the tail so the payload stays contiguous.
            (self.head + (size - self.head_at) as u64, 0)
        } else {
            (self.head, self.head_at)
        };
        let end = pos + len as u64;
        let size = size as u64;
        // Bytes at positions below `end - size` share arena bytes with the
        // new payload.
        let overwritten_below = end.saturating_sub(size);
        while self.oldest < self.next
            && self.entries[(self.oldest & self.mask) as usize].pos < overwritten_below
        {
            self.oldest += 1;
        }
        self.claimed = Some((pos, start, len));
        &mut self.arena[start..start + len]
    }

    /// Publishes the first `len` bytes of the claimed space; returns the
    /// new message's sequence, or `None` without a claim of at least `len`.
    pub(crate) fn commit(&mut self, len: usize, flags: u32, timestamp: u64) -> Option<u64> {
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
        self.entries[(seq & self.mask) as usize] = Entry {
            pos,
            at,
            len: len as u32,
            flags,
            timestamp,
        };
        self.head = pos + len as u64;
        self.head_at = if at + len == self.arena.len() {
            0
        } else {
            at + len
        };
        self.next += 1;
        Some(seq)
    }

    /// Message `seq` and its payload, if retained.
    #[inline]
    pub(crate) fn get(&self, seq: u64) -> Option<(Header, &[u8])> {
        if seq < self.oldest || seq >= self.next {
            return None;
        }
        let e = &self.entries[(seq & self.mask) as usize];
        let start = e.at;
        let h = Header {
            seq,
            len: e.len,
            flags: e.flags,
            timestamp: e.timestamp,
        };
        Some((h, &self.arena[start..start + e.len as usize]))
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
        let mut r = Retained::new(64, 100);
        for i in 1..=3u8 {
            put(&mut r, &[i; 40]);
        }
        // 3 x 40 bytes do not fit in 100: the third skipped the 20-byte
        // tail and overwrote the first.
        assert_eq!(r.oldest(), 2);
        assert_eq!(r.get(2).unwrap().1, &[2u8; 40][..]);
        assert_eq!(r.get(3).unwrap().1, &[3u8; 40][..]);
        put(&mut r, &[4; 100]);
        assert_eq!((r.oldest(), r.latest()), (4, 4));
        assert_eq!(r.get(4).unwrap().1, &[4u8; 100][..]);
        // zero-length messages take no bytes
        put(&mut r, &[]);
        assert_eq!(r.get(5).unwrap().1, &[] as &[u8]);
        assert_eq!(r.oldest(), 4);
    }

    #[test]
    fn a_message_that_ends_at_the_arena_end_is_followed_from_the_start() {
        let mut r = Retained::new(8, 100);
        put(&mut r, &[1; 50]);
        put(&mut r, &[2; 50]);
        assert_eq!((r.oldest(), r.latest()), (1, 2));
        // The arena is exactly full: the next payload starts at offset 0
        // and overwrites the first message only.
        put(&mut r, &[3; 10]);
        assert_eq!((r.oldest(), r.latest()), (2, 3));
        assert_eq!(r.get(2).unwrap().1, &[2u8; 50][..]);
        assert_eq!(r.get(3).unwrap().1, &[3u8; 10][..]);
        // A shorter commit than claimed moves the head by what was kept.
        r.claim(30)[..5].copy_from_slice(&[4; 5]);
        assert_eq!(r.commit(5, 0, 0), Some(4));
        put(&mut r, &[5; 30]);
        assert_eq!(r.get(4).unwrap().1, &[4u8; 5][..]);
        assert_eq!(r.get(5).unwrap().1, &[5u8; 30][..]);
        assert_eq!(r.arena[10..15], [4; 5]);
        assert_eq!(r.arena[15..45], [5; 30]);
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
