//! The recorder's hand-off from its receiving thread to its writing
//! thread: one preallocated single-producer single-consumer byte ring
//! (`rtrb`), so handing a message over is a copy into the ring and two
//! atomic index updates, with no allocation and no lock.
//!
//! An item is a 32-byte header (kind, payload length, two words, flags)
//! and its payload, padded to 8 bytes. An item may wrap around the end of
//! the ring: the consumer then copies it into a scratch buffer allocated
//! once, at the size of the largest item.

/// Bytes of an item's header.
const HEADER: usize = 32;

const MESSAGE: u32 = 1;
const SOURCE_GAP: u32 = 2;
const OVERRUN: u32 = 3;
const GAP: u32 = 4;
const RESTARTED: u32 = 5;
const SYNC: u32 = 6;
const EPOCH: u32 = 7;

/// What the receiving thread hands to the writing thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Item<'a> {
    /// A message of the stream.
    Message {
        seq: u64,
        flags: u32,
        timestamp: u64,
        payload: &'a [u8],
    },
    /// The publisher's notice that its source lost `from..to`.
    SourceGap { from: u64, to: u64 },
    /// The receiver was overrun: `from..to` are lost.
    Overrun { from: u64, to: u64 },
    /// The transport could not recover `from..to`.
    Gap { from: u64, to: u64 },
    /// The publisher restarted with `epoch`.
    Restarted { epoch: u64 },
    /// The publisher ended the stream or went silent: make it durable.
    Sync,
    /// The live stream's publisher epoch, as the subscriber learnt it,
    /// before the first message of that epoch.
    Epoch { epoch: u64 },
}

impl Item<'_> {
    /// Ring bytes the item takes.
    pub(super) fn size(&self) -> usize {
        let len = match self {
            Item::Message { payload, .. } => payload.len(),
            _ => 0,
        };
        size_of_payload(len)
    }
}

/// Ring bytes of an item carrying `len` payload bytes.
pub(super) fn size_of_payload(len: usize) -> usize {
    HEADER + len.next_multiple_of(8)
}

/// The receiving side.
#[derive(Debug)]
pub(super) struct Tx {
    ring: rtrb::Producer<u8>,
    capacity: usize,
}

/// The writing side.
#[derive(Debug)]
pub(super) struct Rx {
    ring: rtrb::Consumer<u8>,
    /// An item that wrapped around the ring's end, made whole.
    scratch: Vec<u8>,
}

/// A hand-off of `bytes` (rounded up to 8, and at least two of the
/// largest item, one carrying `max_payload` bytes).
pub(super) fn channel(bytes: usize, max_payload: usize) -> (Tx, Rx) {
    let largest = size_of_payload(max_payload);
    let capacity = bytes.max(2 * largest).next_multiple_of(8);
    let (p, c) = rtrb::RingBuffer::new(capacity);
    (
        Tx { ring: p, capacity },
        Rx {
            ring: c,
            scratch: vec![0; largest],
        },
    )
}

impl Tx {
    /// Bytes the ring holds.
    pub(super) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes waiting for the writer.
    pub(super) fn depth(&self) -> usize {
        self.capacity - self.ring.slots()
    }

    /// Whether the writing side is gone.
    pub(super) fn abandoned(&self) -> bool {
        self.ring.is_abandoned()
    }

    /// Hands `item` over; false (and nothing written) when the ring lacks
    /// room for it now.
    pub(super) fn try_push(&mut self, item: &Item<'_>) -> bool {
        let size = item.size();
        let (kind, len, a, b, flags, payload): (u32, usize, u64, u64, u32, &[u8]) = match *item {
            Item::Message {
                seq,
                flags,
                timestamp,
                payload,
            } => (MESSAGE, payload.len(), seq, timestamp, flags, payload),
            Item::SourceGap { from, to } => (SOURCE_GAP, 0, from, to, 0, &[]),
            Item::Overrun { from, to } => (OVERRUN, 0, from, to, 0, &[]),
            Item::Gap { from, to } => (GAP, 0, from, to, 0, &[]),
            Item::Restarted { epoch } => (RESTARTED, 0, epoch, 0, 0, &[]),
            Item::Sync => (SYNC, 0, 0, 0, 0, &[]),
            Item::Epoch { epoch } => (EPOCH, 0, epoch, 0, 0, &[]),
        };
        let mut head = [0u8; HEADER];
        head[0..4].copy_from_slice(&kind.to_ne_bytes());
        // Payloads are at most a stream's max_message, far below 4 GiB.
        head[4..8].copy_from_slice(&(len as u32).to_ne_bytes());
        head[8..16].copy_from_slice(&a.to_ne_bytes());
        head[16..24].copy_from_slice(&b.to_ne_bytes());
        head[24..28].copy_from_slice(&flags.to_ne_bytes());
        let Ok(mut chunk) = self.ring.write_chunk(size) else {
            return false;
        };
        let (one, two) = chunk.as_mut_slices();
        let mut at = 0;
        for part in [&head[..], payload] {
            at = copy_in(one, two, at, part);
        }
        chunk.commit_all();
        true
    }
}

/// Copies `src` into the chunk made of `one` then `two`, from byte `at`;
/// returns the byte after it.
fn copy_in(one: &mut [u8], two: &mut [u8], at: usize, src: &[u8]) -> usize {
    let end = at + src.len();
    if end <= one.len() {
        one[at..end].copy_from_slice(src);
    } else if at >= one.len() {
        two[at - one.len()..end - one.len()].copy_from_slice(src);
    } else {
        let k = one.len() - at;
        one[at..].copy_from_slice(&src[..k]);
        two[..end - one.len()].copy_from_slice(&src[k..]);
    }
    end
}

impl Rx {
    /// Bytes waiting.
    pub(super) fn depth(&self) -> usize {
        self.ring.slots()
    }

    /// Takes the oldest item, if any, and hands it to `f`.
    pub(super) fn pop<R>(&mut self, f: impl FnOnce(Item<'_>) -> R) -> Option<R> {
        let mut head = [0u8; HEADER];
        {
            let chunk = self.ring.read_chunk(HEADER).ok()?;
            let (one, two) = chunk.as_slices();
            head[..one.len()].copy_from_slice(one);
            head[one.len()..].copy_from_slice(two);
            // Not committed: the whole item is taken below.
        }
        let word = |r: std::ops::Range<usize>| {
            let mut b = [0u8; 8];
            b[..r.len()].copy_from_slice(&head[r]);
            u64::from_ne_bytes(b)
        };
        let kind = word(0..4) as u32;
        let len = word(4..8) as usize;
        let (a, b, flags) = (word(8..16), word(16..24), word(24..28) as u32);
        let size = size_of_payload(len);
        // Only this process's receiving thread writes the ring, and it
        // commits an item whole.
        let chunk = self
            .ring
            .read_chunk(size)
            .expect("an item is committed whole");
        let (one, two) = chunk.as_slices();
        let payload: &[u8] = if one.len() >= HEADER + len {
            &one[HEADER..HEADER + len]
        } else {
            if self.scratch.len() < size {
                // Larger than the largest item foreseen: only when the
                // stream's message size was not known.
                self.scratch.resize(size, 0);
            }
            let s = &mut self.scratch[..size];
            s[..one.len()].copy_from_slice(one);
            s[one.len()..].copy_from_slice(two);
            &self.scratch[HEADER..HEADER + len]
        };
        let item = match kind {
            MESSAGE => Item::Message {
                seq: a,
                flags,
                timestamp: b,
                payload,
            },
            SOURCE_GAP => Item::SourceGap { from: a, to: b },
            OVERRUN => Item::Overrun { from: a, to: b },
            GAP => Item::Gap { from: a, to: b },
            RESTARTED => Item::Restarted { epoch: a },
            EPOCH => Item::Epoch { epoch: a },
            _ => Item::Sync,
        };
        let r = f(item);
        chunk.commit_all();
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(i: Item<'_>) -> (Item<'static>, Vec<u8>) {
        match i {
            Item::Message {
                seq,
                flags,
                timestamp,
                payload,
            } => (
                Item::Message {
                    seq,
                    flags,
                    timestamp,
                    payload: &[],
                },
                payload.to_vec(),
            ),
            Item::SourceGap { from, to } => (Item::SourceGap { from, to }, vec![]),
            Item::Overrun { from, to } => (Item::Overrun { from, to }, vec![]),
            Item::Gap { from, to } => (Item::Gap { from, to }, vec![]),
            Item::Restarted { epoch } => (Item::Restarted { epoch }, vec![]),
            Item::Sync => (Item::Sync, vec![]),
            Item::Epoch { epoch } => (Item::Epoch { epoch }, vec![]),
        }
    }

    #[test]
    fn items_of_every_kind_come_out_whole_and_in_order_across_the_wrap() {
        let (mut tx, mut rx) = channel(200, 40);
        assert_eq!(tx.capacity(), 200);
        let mut want = Vec::new();
        let mut got = Vec::new();
        // Payload lengths 0..=40 walk the items across the ring's end at
        // every offset.
        for i in 0..300u64 {
            let payload: Vec<u8> = (0..(i % 41) as u8).map(|b| b ^ i as u8).collect();
            let item = match i % 8 {
                0 => Item::SourceGap { from: i, to: i + 3 },
                1 => Item::Overrun { from: i, to: i + 2 },
                2 => Item::Gap { from: i, to: i + 9 },
                3 => Item::Restarted { epoch: i },
                4 => Item::Sync,
                5 => Item::Epoch { epoch: i },
                _ => Item::Message {
                    seq: i,
                    flags: i as u32 * 3,
                    timestamp: i * 1000,
                    payload: &payload,
                },
            };
            while !tx.try_push(&item) {
                got.push(rx.pop(owned).expect("a full ring has an item"));
            }
            want.push(owned(item));
            assert!(tx.depth() <= tx.capacity());
        }
        while let Some(i) = rx.pop(owned) {
            got.push(i);
        }
        assert_eq!(got, want);
        assert_eq!(rx.depth(), 0);
    }

    #[test]
    fn a_full_ring_refuses_without_writing() {
        let (mut tx, mut rx) = channel(0, 8);
        // At least two of the largest item: 2 x 40 bytes.
        assert_eq!(tx.capacity(), 80);
        let m = |seq| Item::Message {
            seq,
            flags: 0,
            timestamp: 0,
            payload: &[7; 8],
        };
        assert!(tx.try_push(&m(1)));
        assert!(tx.try_push(&m(2)));
        assert!(!tx.try_push(&m(3)));
        assert_eq!(tx.depth(), 80);
        assert_eq!(
            rx.pop(owned),
            Some((
                Item::Message {
                    seq: 1,
                    flags: 0,
                    timestamp: 0,
                    payload: &[]
                },
                vec![7; 8]
            ))
        );
        assert!(tx.try_push(&m(3)));
        drop(rx);
        assert!(tx.abandoned());
    }
}
