//! Reassembly of fragmented messages in a fixed set of buffers.
//!
//! Each buffer holds one message: its bytes (up to `max_message`) and a
//! bitmap of the fragments received, so a fragment that arrives twice
//! (the other line, a retransmission) is recognised and not counted twice.
//! A completed message stays in its buffer until it is delivered.
//!
//! When every buffer is busy, a fragment of an earlier message takes the
//! buffer of the latest one, which is given up and requested again: the
//! message at the delivery point can always be reassembled, so delivery
//! never stalls on buffers held by later messages.

use super::frame::{Fragment, MAX_FRAGMENTS};
use crate::wire::Header;

#[derive(Debug)]
struct Buffer {
    /// Holds (part of) message `seq`.
    active: bool,
    seq: u64,
    header: Header,
    fragment_count: u16,
    chunk: u32,
    received: u32,
    /// A fragment came by retransmission.
    retransmitted: bool,
    bits: Box<[u64]>,
    bytes: Box<[u8]>,
}

/// What a fragment did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Added {
    /// More fragments needed.
    Partial,
    /// The message is whole.
    Complete,
    /// This fragment was already here.
    Duplicate,
}

/// Which buffer a new message got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// A free one.
    Free(usize),
    /// One taken from the later message `seq`.
    Evicted(usize, u64),
    /// None: every buffer holds an earlier (or this) message.
    Full,
}

#[derive(Debug)]
pub(crate) struct Reassembler {
    buffers: Box<[Buffer]>,
}

impl Reassembler {
    pub(crate) fn new(buffers: usize, max_message: usize) -> Reassembler {
        // A fragment holds at least one byte, so a message has at most
        // `max_message` fragments.
        let words = max_message.min(MAX_FRAGMENTS).div_ceil(64);
        let buffers = (0..buffers)
            .map(|_| Buffer {
                active: false,
                seq: 0,
                header: Header::default(),
                fragment_count: 0,
                chunk: 0,
                received: 0,
                retransmitted: false,
                bits: vec![0u64; words].into_boxed_slice(),
                bytes: super::prefaulted(max_message),
            })
            .collect();
        Reassembler { buffers }
    }

    /// The buffer holding message `seq`, if one does. Buffers of messages
    /// before `next` (delivered or given up) count as free.
    pub(crate) fn find(&self, seq: u64, next: u64) -> Option<usize> {
        self.buffers
            .iter()
            .position(|b| b.active && b.seq == seq && b.seq >= next)
    }

    /// A buffer for message `seq`, starting empty.
    pub(crate) fn acquire(
        &mut self,
        seq: u64,
        next: u64,
        header: &Header,
        f: Fragment,
    ) -> Acquired {
        let got = match self.buffers.iter().position(|b| !b.active || b.seq < next) {
            Some(k) => Acquired::Free(k),
            None => {
                let (k, latest) = self
                    .buffers
                    .iter()
                    .enumerate()
                    .map(|(k, b)| (k, b.seq))
                    .max_by_key(|&(_, s)| s)
                    .unwrap_or((0, 0));
                if self.buffers.is_empty() || latest <= seq {
                    return Acquired::Full;
                }
                Acquired::Evicted(k, latest)
            }
        };
        let k = match got {
            Acquired::Free(k) | Acquired::Evicted(k, _) => k,
            Acquired::Full => return got,
        };
        let b = &mut self.buffers[k];
        b.active = true;
        b.seq = seq;
        b.header = *header;
        b.fragment_count = f.count;
        b.chunk = f.chunk;
        b.received = 0;
        b.retransmitted = false;
        let words = (f.count as usize).div_ceil(64).min(b.bits.len());
        b.bits[..words].fill(0);
        got
    }

    /// Adds a fragment (already checked against its own header by
    /// decoding). `Err` when it disagrees with the fragments before it.
    pub(crate) fn add(
        &mut self,
        k: usize,
        header: &Header,
        f: Fragment,
        bytes: &[u8],
        retransmit: bool,
    ) -> Result<Added, ()> {
        let b = &mut self.buffers[k];
        if *header != b.header
            || f.count != b.fragment_count
            || f.chunk != b.chunk
            || f.index as usize >= b.bits.len() * 64
        {
            return Err(());
        }
        let (word, bit) = (f.index as usize / 64, 1u64 << (f.index % 64));
        if b.bits[word] & bit != 0 {
            return Ok(Added::Duplicate);
        }
        let at = f.offset();
        let Some(dst) = b.bytes.get_mut(at..at + bytes.len()) else {
            return Err(());
        };
        dst.copy_from_slice(bytes);
        b.bits[word] |= bit;
        b.received += 1;
        b.retransmitted |= retransmit;
        Ok(if b.received == b.fragment_count as u32 {
            Added::Complete
        } else {
            Added::Partial
        })
    }

    /// Whether any fragment of buffer `k`'s message came by retransmission.
    pub(crate) fn retransmitted(&self, k: usize) -> bool {
        self.buffers[k].retransmitted
    }

    /// The whole message in buffer `k`.
    pub(crate) fn message(&self, k: usize) -> (Header, &[u8]) {
        let b = &self.buffers[k];
        (b.header, &b.bytes[..b.header.len as usize])
    }

    pub(crate) fn release(&mut self, k: usize) {
        self.buffers[k].active = false;
    }

    pub(crate) fn clear(&mut self) {
        for b in self.buffers.iter_mut() {
            b.active = false;
        }
    }

    /// Start and capacity of every buffer, to show they never move.
    #[cfg(test)]
    pub(crate) fn buffers(&self) -> Vec<(usize, usize)> {
        let mut v = vec![(self.buffers.as_ptr() as usize, self.buffers.len())];
        for b in self.buffers.iter() {
            v.push((b.bits.as_ptr() as usize, b.bits.len()));
            v.push((b.bytes.as_ptr() as usize, b.bytes.len()));
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(seq: u64, len: u32) -> Header {
        Header {
            seq,
            len,
            flags: 0,
            timestamp: 0,
        }
    }

    fn frag(index: u16) -> Fragment {
        Fragment {
            index,
            count: 3,
            chunk: 4,
        }
    }

    #[test]
    fn fragments_in_any_order_make_the_message_once() {
        let mut r = Reassembler::new(2, 10);
        let h = header(7, 10);
        let Acquired::Free(k) = r.acquire(7, 1, &h, frag(2)) else {
            panic!()
        };
        assert_eq!(r.add(k, &h, frag(2), b"89", false), Ok(Added::Partial));
        assert_eq!(r.add(k, &h, frag(0), b"0123", true), Ok(Added::Partial));
        assert_eq!(r.add(k, &h, frag(0), b"0123", false), Ok(Added::Duplicate));
        assert_eq!(r.add(k, &h, frag(1), b"4567", false), Ok(Added::Complete));
        assert_eq!(r.message(k), (h, &b"0123456789"[..]));
        assert!(r.retransmitted(k));
        assert_eq!(r.find(7, 1), Some(k));
        assert_eq!(r.find(7, 8), None, "delivered messages free their buffer");
    }

    #[test]
    fn disagreeing_fragments_are_refused() {
        let mut r = Reassembler::new(1, 10);
        let h = header(7, 10);
        let Acquired::Free(k) = r.acquire(7, 1, &h, frag(0)) else {
            panic!()
        };
        assert_eq!(r.add(k, &header(7, 9), frag(0), b"0123", false), Err(()));
        let other_chunk = Fragment {
            index: 0,
            count: 3,
            chunk: 5,
        };
        assert_eq!(r.add(k, &h, other_chunk, b"01234", false), Err(()));
    }

    #[test]
    fn an_earlier_message_takes_the_buffer_of_the_latest() {
        let mut r = Reassembler::new(2, 10);
        let (h5, h6, h9) = (header(5, 10), header(6, 10), header(9, 10));
        assert_eq!(r.acquire(6, 1, &h6, frag(0)), Acquired::Free(0));
        assert_eq!(r.acquire(9, 1, &h9, frag(0)), Acquired::Free(1));
        assert_eq!(r.acquire(9, 1, &h9, frag(0)), Acquired::Full);
        assert_eq!(r.acquire(5, 1, &h5, frag(0)), Acquired::Evicted(1, 9));
        assert_eq!(r.find(9, 1), None);
        // Once the delivery point passes a message its buffer is free.
        assert_eq!(r.acquire(8, 7, &h9, frag(0)), Acquired::Free(0));
        r.clear();
        assert_eq!(r.find(5, 1), None);
    }
}
