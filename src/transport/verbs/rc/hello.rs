//! The hello: what each end tells the other in the rdma_cm private data
//! (pid, session name hash, receive depth, largest payload, and where the
//! peer may write credits, its close and, in `write` mode, its sleep
//! generation, and, in the ring modes, messages), encoded by hand into
//! the 56 bytes IB CM carries. Version 3: the control block the peer may
//! write is 24 bytes (credit, close and sleep words); a version 2 peer
//! registered 16, so a wake armed across versions would fail with a
//! remote access error: the versions refuse each other instead.

use crate::config::SessionMode;

/// Largest ring slot count or payload a peer may announce: what the
/// configuration allows itself (a power of two up to 2^24 slots).
const MAX_DEPTH: u32 = 1 << 24;

/// What each end tells the other in the rdma_cm private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Hello {
    pub(super) pid: u32,
    /// FNV-1a of the session name: both ends must mean the same session.
    pub(super) name_hash: u32,
    /// Receive buffers posted before connecting: the initial credits.
    pub(super) recv_depth: u32,
    /// Largest payload a receive buffer holds.
    pub(super) max_payload: u32,
    /// The control block the peer writes credits, close and (write mode)
    /// its sleep generation into: `CTRL_REMOTE_LEN` bytes.
    pub(super) ctrl_rkey: u32,
    pub(super) ctrl_addr: u64,
    /// How messages travel; both ends must agree.
    pub(super) mode: SessionMode,
    /// The ring the peer writes messages into (ring modes; 0 otherwise):
    /// `recv_depth` slots of `ring_slot(max_payload)` bytes.
    pub(super) ring_rkey: u32,
    pub(super) ring_addr: u64,
}

const HELLO_MAGIC: &[u8; 4] = b"MDBr";
const HELLO_VERSION: u16 = 3;
const HELLO_LEN: usize = 48;

fn mode_code(m: SessionMode) -> u8 {
    match m {
        SessionMode::Send => 0,
        SessionMode::Write => 1,
        SessionMode::WriteImm => 2,
    }
}

impl Hello {
    pub(super) fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..4].copy_from_slice(HELLO_MAGIC);
        b[4..6].copy_from_slice(&HELLO_VERSION.to_le_bytes());
        b[6] = mode_code(self.mode);
        b[8..12].copy_from_slice(&self.pid.to_le_bytes());
        b[12..16].copy_from_slice(&self.name_hash.to_le_bytes());
        b[16..20].copy_from_slice(&self.recv_depth.to_le_bytes());
        b[20..24].copy_from_slice(&self.max_payload.to_le_bytes());
        b[24..28].copy_from_slice(&self.ctrl_rkey.to_le_bytes());
        b[28..32].copy_from_slice(&self.ring_rkey.to_le_bytes());
        b[32..40].copy_from_slice(&self.ctrl_addr.to_le_bytes());
        b[40..48].copy_from_slice(&self.ring_addr.to_le_bytes());
        b
    }

    pub(super) fn decode(b: &[u8]) -> std::result::Result<Hello, String> {
        // IB CM pads private data, so more bytes than ours are normal.
        if b.len() < HELLO_LEN || &b[0..4] != HELLO_MAGIC {
            return Err(
                "the peer is not an mdbus verbs session (no hello in its connect data)".into(),
            );
        }
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let version = u16_at(4);
        if version != HELLO_VERSION {
            return Err(format!(
                "the peer speaks session protocol version {version}, this build version {HELLO_VERSION}; run the same mdbus version on both ends"
            ));
        }
        let mode = match b[6] {
            0 => SessionMode::Send,
            1 => SessionMode::Write,
            2 => SessionMode::WriteImm,
            m => return Err(format!("the peer announced an unknown session mode {m}")),
        };
        let h = Hello {
            pid: u32_at(8),
            name_hash: u32_at(12),
            recv_depth: u32_at(16),
            max_payload: u32_at(20),
            ctrl_rkey: u32_at(24),
            ctrl_addr: u64::from_le_bytes(b[32..40].try_into().expect("8 bytes")),
            mode,
            ring_rkey: u32_at(28),
            ring_addr: u64::from_le_bytes(b[40..48].try_into().expect("8 bytes")),
        };
        if h.recv_depth == 0 || h.max_payload == 0 {
            return Err("the peer announced no receive buffers".into());
        }
        if h.recv_depth > MAX_DEPTH || h.max_payload > MAX_DEPTH {
            return Err(format!(
                "the peer announced {} receive slots of {} bytes, beyond the {MAX_DEPTH} allowed",
                h.recv_depth, h.max_payload
            ));
        }
        if h.mode != SessionMode::Send {
            let len =
                u64::from(h.recv_depth) * super::ring::ring_slot(h.max_payload as usize) as u64;
            if h.ring_addr == 0 || h.ring_addr % 64 != 0 {
                return Err(format!(
                    "the peer announced its message ring at {:#x}, not a cache-line-aligned address",
                    h.ring_addr
                ));
            }
            if h.ring_addr.checked_add(len).is_none() {
                return Err(format!(
                    "the peer's message ring of {len} bytes at {:#x} runs past the end of memory",
                    h.ring_addr
                ));
            }
        }
        Ok(h)
    }
}

/// FNV-1a of the session name.
pub(super) fn name_hash(name: &str) -> u32 {
    name.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trips_and_rejects_strangers() {
        let h = Hello {
            pid: 42,
            name_hash: name_hash("orders"),
            recv_depth: 64,
            max_payload: 232,
            ctrl_rkey: 0x1234,
            ctrl_addr: 0x7f00_0000_1000,
            mode: SessionMode::WriteImm,
            ring_rkey: 0x99,
            ring_addr: 0x7f00_0000_2000,
        };
        let mut padded = h.encode().to_vec();
        padded.resize(56, 0); // IB CM pads connect data
        assert_eq!(Hello::decode(&padded), Ok(h));
        assert!(Hello::decode(&[0u8; 56])
            .unwrap_err()
            .contains("not an mdbus"));
        let mut v2 = h.encode();
        v2[4] = 2;
        assert!(Hello::decode(&v2).unwrap_err().contains("version 2"));
        // Hostile rings: unaligned, wrapping, oversized.
        let bad = |f: &dyn Fn(&mut Hello)| {
            let mut x = h;
            f(&mut x);
            Hello::decode(&x.encode()).unwrap_err()
        };
        assert!(bad(&|x| x.ring_addr = 0x1001).contains("cache-line-aligned"));
        assert!(bad(&|x| x.ring_addr = 0).contains("cache-line-aligned"));
        assert!(bad(&|x| x.ring_addr = u64::MAX - 63).contains("past the end"));
        assert!(bad(&|x| x.recv_depth = u32::MAX).contains("beyond"));
        assert!(bad(&|x| x.max_payload = u32::MAX).contains("beyond"));
        let mut m = h.encode();
        m[6] = 7;
        assert!(Hello::decode(&m)
            .unwrap_err()
            .contains("unknown session mode"));
        assert_ne!(name_hash("orders"), name_hash("order"));
    }
}
