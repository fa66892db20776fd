//! The TCP frame reader on arbitrary bytes, as a peer could send them.
//!
//! Input: two bytes of `max_message - 1`, two bytes of messages "sent"
//! (what credits are checked against), then the received stream. The
//! frames are walked as a session's poll walks them; every outcome must be
//! a frame, "not whole yet" or an error sentence, never a panic, and:
//! a frame's bytes lie inside the input; a frame cut short is "not whole
//! yet", never an error or another frame; data is delivered in sequence
//! from 1; a credit never makes more messages in flight than were sent,
//! and a refused one changes nothing.

use mdbus::transport::tcp::{Frame, FrameReader};
use mdbus::wire::HEADER_LEN;

/// Panics when a property breaks.
pub fn tcp_frame(data: &[u8]) {
    let Some((head, stream)) = data.split_first_chunk::<4>() else {
        return;
    };
    let max = u16::from_le_bytes([head[0], head[1]]) as usize + 1;
    let sent = u16::from_le_bytes([head[2], head[3]]) as u64;
    let mut r = FrameReader::new(max);
    let mut at = 0;
    let mut delivered = 0u64;
    loop {
        let rest = &stream[at..];
        let (frame, used) = match r.frame(rest) {
            Ok(Some(x)) => x,
            Ok(None) => {
                // Only a header or a payload not yet whole waits.
                if rest.len() >= HEADER_LEN {
                    let len = u32::from_le_bytes(rest[8..12].try_into().unwrap()) as usize;
                    assert!(len <= max && rest.len() < HEADER_LEN + len);
                }
                return;
            }
            Err(reason) => {
                assert!(!reason.is_empty());
                return;
            }
        };
        assert!((HEADER_LEN..=rest.len()).contains(&used));
        for cut in [used - 1, HEADER_LEN - 1] {
            assert_eq!(r.frame(&rest[..cut]), Ok(None), "a frame cut at {cut}");
        }
        match frame {
            Frame::Data(h, payload) => {
                assert_eq!(payload.len(), h.len as usize);
                assert!(payload.len() <= max);
                if r.accept_data(&h).is_err() {
                    assert_ne!(h.seq, delivered + 1);
                    assert_eq!(r.expected_seq(), delivered + 1);
                    return;
                }
                delivered += 1;
                assert_eq!(h.seq, delivered);
            }
            Frame::Credit(count) => {
                let before = r.in_flight(sent);
                match r.accept_credit(count, sent) {
                    Ok(()) => {
                        assert!(count <= sent);
                        assert_eq!(r.in_flight(sent), sent - count);
                        assert!(r.in_flight(sent) <= before);
                    }
                    Err(reason) => {
                        assert!(!reason.is_empty());
                        assert_eq!(r.in_flight(sent), before);
                        return;
                    }
                }
            }
            Frame::Close => {
                assert_eq!(used, HEADER_LEN);
                return;
            }
        }
        at += used;
    }
}
