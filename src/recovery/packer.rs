//! Builds datagrams: packs consecutive messages into one datagram up to
//! the maximum size, and splits a message too large for one datagram into
//! fragments, each sent alone.

use super::frame::{DatagramHeader, Fragment, Kind, DATAGRAM_HEADER_LEN};
use crate::wire::{Header, HEADER_LEN};

/// One datagram under construction, in a buffer allocated once.
#[derive(Debug)]
pub(crate) struct Packer {
    buf: Box<[u8]>,
    /// Bytes used, header included (the header is written at flush).
    len: usize,
    /// Messages packed so far.
    count: u16,
    first_seq: u64,
    kind: Kind,
    stream_id: u32,
    epoch: u64,
}

impl Packer {
    pub(crate) fn new(kind: Kind, stream_id: u32, epoch: u64, max_datagram: usize) -> Packer {
        Packer {
            buf: super::prefaulted(max_datagram),
            len: DATAGRAM_HEADER_LEN,
            count: 0,
            first_seq: 0,
            kind,
            stream_id,
            epoch,
        }
    }

    /// Largest payload sent unfragmented.
    pub(crate) fn max_unfragmented(max_datagram: usize) -> usize {
        max_datagram - DATAGRAM_HEADER_LEN - HEADER_LEN
    }

    /// Whether messages wait to be flushed.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Adds a message; emits the pending datagram first when the message
    /// does not fit or does not follow on. Returns datagrams emitted.
    pub(crate) fn push<E: FnMut(&[u8])>(
        &mut self,
        h: &Header,
        payload: &[u8],
        emit: &mut E,
    ) -> u64 {
        let need = HEADER_LEN + payload.len();
        if DATAGRAM_HEADER_LEN + need > self.buf.len() {
            return self.flush(emit) + self.fragments(h, payload, emit);
        }
        let mut sent = 0;
        if self.count > 0
            && (self.len + need > self.buf.len()
                || h.seq != self.first_seq + self.count as u64
                || self.count == u16::MAX)
        {
            sent = self.flush(emit);
        }
        if self.count == 0 {
            self.first_seq = h.seq;
        }
        let at = self.len;
        Header {
            len: payload.len() as u32,
            ..*h
        }
        .encode(&mut self.buf[at..at + HEADER_LEN]);
        self.buf[at + HEADER_LEN..at + need].copy_from_slice(payload);
        self.len += need;
        self.count += 1;
        sent
    }

    /// Emits the pending datagram, if any. Returns datagrams emitted.
    pub(crate) fn flush<E: FnMut(&[u8])>(&mut self, emit: &mut E) -> u64 {
        if self.count == 0 {
            return 0;
        }
        DatagramHeader {
            kind: self.kind,
            count: self.count,
            stream_id: self.stream_id,
            length: self.len as u32,
            epoch: self.epoch,
            seq: self.first_seq,
            arg: 0,
        }
        .encode(&mut self.buf);
        emit(&self.buf[..self.len]);
        self.count = 0;
        self.len = DATAGRAM_HEADER_LEN;
        1
    }

    /// Sends a large message as fragments of equal size (the last one
    /// shorter). The pending datagram is empty when this runs.
    fn fragments<E: FnMut(&[u8])>(&mut self, h: &Header, payload: &[u8], emit: &mut E) -> u64 {
        let chunk = Self::max_unfragmented(self.buf.len());
        let count = payload.len().div_ceil(chunk);
        for (i, part) in payload.chunks(chunk).enumerate() {
            let len = DATAGRAM_HEADER_LEN + HEADER_LEN + part.len();
            DatagramHeader {
                kind: self.kind,
                count: 1,
                stream_id: self.stream_id,
                length: len as u32,
                epoch: self.epoch,
                seq: h.seq,
                arg: Fragment {
                    index: i as u16,
                    count: count as u16,
                    chunk: chunk as u32,
                }
                .to_arg(),
            }
            .encode(&mut self.buf);
            Header {
                len: payload.len() as u32,
                ..*h
            }
            .encode(&mut self.buf[DATAGRAM_HEADER_LEN..]);
            self.buf[DATAGRAM_HEADER_LEN + HEADER_LEN..len].copy_from_slice(part);
            emit(&self.buf[..len]);
        }
        count as u64
    }

    /// Start and capacity of the buffer, to show it never moves.
    #[cfg(test)]
    pub(crate) fn buffer(&self) -> (usize, usize) {
        (self.buf.as_ptr() as usize, self.buf.len())
    }
}

#[cfg(test)]
mod tests {
    use super::super::frame::{decode, Frame, Limits};
    use super::*;

    fn header(seq: u64) -> Header {
        Header {
            seq,
            len: 0,
            flags: 0,
            timestamp: 0,
        }
    }

    #[test]
    fn packs_until_full_and_never_exceeds_the_maximum() {
        let max = 200;
        let mut p = Packer::new(Kind::Data, 3, 1, max);
        let mut out: Vec<Vec<u8>> = Vec::new();
        let mut emit = |d: &[u8]| out.push(d.to_vec());
        for seq in 1..=10 {
            p.push(&header(seq), &[seq as u8; 30], &mut emit);
        }
        p.flush(&mut emit);
        assert!(p.is_empty());
        // (200 - 40) / 54 = 2 messages per datagram
        assert_eq!(out.len(), 5);
        let limits = Limits {
            stream_id: 3,
            max_datagram: max,
            max_message: 1000,
        };
        let mut next = 1;
        for d in &out {
            assert!(d.len() <= max);
            let Frame::Messages { messages, .. } = decode(d, &limits).unwrap().frame else {
                panic!()
            };
            for (h, payload) in messages {
                assert_eq!((h.seq, payload), (next, &[next as u8; 30][..]));
                next += 1;
            }
        }
        assert_eq!(next, 11);
    }

    #[test]
    fn a_sequence_jump_starts_a_new_datagram() {
        let mut p = Packer::new(Kind::Retransmit, 3, 1, 1000);
        let mut n = 0;
        let mut emit = |_: &[u8]| n += 1;
        p.push(&header(1), b"a", &mut emit);
        p.push(&header(2), b"b", &mut emit);
        assert_eq!(p.push(&header(5), b"c", &mut emit), 1);
        assert_eq!(p.flush(&mut emit), 1);
        assert_eq!(n, 2);
    }

    #[test]
    fn large_messages_go_out_in_fragments() {
        let max = 200;
        let chunk = Packer::max_unfragmented(max);
        let mut p = Packer::new(Kind::Data, 3, 1, max);
        let mut out: Vec<Vec<u8>> = Vec::new();
        let mut emit = |d: &[u8]| out.push(d.to_vec());
        let big: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        p.push(&header(1), b"small", &mut emit);
        let sent = p.push(&header(2), &big, &mut emit);
        assert_eq!(sent as usize, 1 + big.len().div_ceil(chunk));
        let limits = Limits {
            stream_id: 3,
            max_datagram: max,
            max_message: 1000,
        };
        let mut whole = vec![0u8; big.len()];
        for d in &out[1..] {
            let Frame::Fragment {
                header,
                fragment,
                bytes,
                ..
            } = decode(d, &limits).unwrap().frame
            else {
                panic!()
            };
            assert_eq!((header.seq, header.len), (2, 1000));
            whole[fragment.offset()..fragment.offset() + bytes.len()].copy_from_slice(bytes);
        }
        assert_eq!(whole, big);
    }
}
