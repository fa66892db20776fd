//! Optional authentication of datagrams: a keyed BLAKE3 hash of the whole
//! datagram, truncated to [`MAC_LEN`] bytes, appended at its end, with
//! [`KIND_MAC`] set in the kind byte and the `length` field covering it.
//!
//! A receiver configured with a key checks the MAC before it looks at any
//! other field ([`Mac::verify`]): a datagram without one is
//! [`DropReason::Unauthenticated`], one whose MAC does not match is
//! [`DropReason::BadMac`]. Senders with a key seal every datagram
//! ([`Mac::seal`]) into a buffer allocated once.
//!
//! The key is 32 bytes read from a file that only its owner may read
//! ([`load_key`]).

use std::path::Path;

use super::frame::{DropReason, DATAGRAM_HEADER_LEN, KIND_MAC, MAC_LEN};
use crate::error::ConfigError;

/// Bytes of a key.
pub const KEY_LEN: usize = 32;

/// A stream key. Its `Debug` never shows it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Key(pub [u8; KEY_LEN]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

/// A stream key and a buffer to seal datagrams into.
#[derive(Clone)]
pub struct Mac {
    key: [u8; KEY_LEN],
    buf: Box<[u8]>,
}

impl std::fmt::Debug for Mac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.write_str("Mac { .. }")
    }
}

impl Mac {
    /// A sealer and checker for `key`, sealing datagrams of up to
    /// `max_datagram` bytes (the MAC included).
    pub fn new(key: Key, max_datagram: usize) -> Mac {
        Mac {
            key: key.0,
            buf: super::prefaulted(max_datagram.max(DATAGRAM_HEADER_LEN + MAC_LEN)),
        }
    }

    fn tag(&self, bytes: &[u8]) -> [u8; MAC_LEN] {
        let h = blake3::keyed_hash(&self.key, bytes);
        let mut t = [0u8; MAC_LEN];
        t.copy_from_slice(&h.as_bytes()[..MAC_LEN]);
        t
    }

    /// `datagram` with the MAC flag set, its length field grown by
    /// [`MAC_LEN`] and the MAC appended, in this sealer's buffer. A
    /// datagram too long to grow (the caller sized its datagrams
    /// [`MAC_LEN`] short of `max_datagram`) is returned as it is, and a
    /// receiver with the key drops it.
    pub fn seal<'a>(&'a mut self, datagram: &'a [u8]) -> &'a [u8] {
        let n = datagram.len();
        if n < DATAGRAM_HEADER_LEN || n + MAC_LEN > self.buf.len() {
            return datagram;
        }
        self.buf[..n].copy_from_slice(datagram);
        self.buf[5] |= KIND_MAC;
        self.buf[12..16].copy_from_slice(&((n + MAC_LEN) as u32).to_le_bytes());
        let t = self.tag(&self.buf[..n]);
        self.buf[n..n + MAC_LEN].copy_from_slice(&t);
        &self.buf[..n + MAC_LEN]
    }

    /// Checks a received datagram's MAC, before anything else in it is
    /// believed.
    pub fn verify(&self, datagram: &[u8]) -> Result<(), DropReason> {
        if datagram.len() < DATAGRAM_HEADER_LEN + MAC_LEN {
            return Err(DropReason::Unauthenticated);
        }
        if datagram[5] & KIND_MAC == 0 {
            return Err(DropReason::Unauthenticated);
        }
        let (body, tag) = datagram.split_at(datagram.len() - MAC_LEN);
        let want = self.tag(body);
        let tag: &[u8; MAC_LEN] = tag.try_into().map_err(|_| DropReason::BadMac)?;
        if constant_time_eq::constant_time_eq_16(&want, tag) {
            Ok(())
        } else {
            Err(DropReason::BadMac)
        }
    }
}

/// Reads a stream key from `path`: 32 bytes, as 64 hexadecimal digits
/// (surrounding whitespace ignored) or raw. The file must belong to the
/// user running the process and be readable by nobody else (mode 0600 or
/// stricter); `key` names the setting in errors.
pub fn load_key(path: &Path, key: &str) -> Result<Key, ConfigError> {
    use std::os::unix::fs::MetadataExt;
    let shown = path.display().to_string();
    let err = |msg: String| ConfigError::new(&shown, key, format!("key file {shown}: {msg}"));
    let meta =
        std::fs::metadata(path).map_err(|e| err(format!("cannot read the key file: {e}")))?;
    if !meta.is_file() {
        return Err(err("the key file is not a regular file".into()));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(err(format!(
            "the key file belongs to uid {}, not to this user (uid {me})",
            meta.uid()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(err(format!(
            "the key file is readable or writable by others (mode {:o}): make it 0600",
            meta.mode() & 0o777
        )));
    }
    let bytes = std::fs::read(path).map_err(|e| err(format!("cannot read the key file: {e}")))?;
    let text = std::str::from_utf8(&bytes).map(str::trim).unwrap_or("");
    let mut k = [0u8; KEY_LEN];
    if text.len() == 2 * KEY_LEN && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        for (i, out) in k.iter_mut().enumerate() {
            *out = u8::from_str_radix(&text[2 * i..2 * i + 2], 16)
                .map_err(|_| err("the key is not hexadecimal".into()))?;
        }
    } else if bytes.len() == KEY_LEN {
        k.copy_from_slice(&bytes);
    } else {
        return Err(err(format!(
            "the key file holds {} bytes: expected 32 raw bytes or 64 hexadecimal digits",
            bytes.len()
        )));
    }
    Ok(Key(k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recovery::frame::{self, encode_control, Frame, Kind, Limits};
    use std::os::unix::fs::PermissionsExt;

    const LIMITS: Limits = Limits {
        stream_id: 3,
        max_datagram: 256,
        max_message: 100,
    };

    #[test]
    fn sealed_datagrams_verify_and_decode_and_any_change_is_caught() {
        let mut m = Mac::new(Key([7; KEY_LEN]), 256);
        let mut hb = [0u8; DATAGRAM_HEADER_LEN];
        encode_control(&mut hb, Kind::Heartbeat, 3, 9, 5, 1);
        let sealed = m.seal(&hb).to_vec();
        assert_eq!(sealed.len(), DATAGRAM_HEADER_LEN + MAC_LEN);
        m.verify(&sealed).unwrap();
        let d = frame::decode(&sealed, &LIMITS).unwrap();
        assert!(matches!(
            d.frame,
            Frame::Heartbeat {
                latest: 5,
                oldest: 1
            }
        ));
        assert_eq!(m.verify(&hb), Err(DropReason::Unauthenticated));
        for i in 0..sealed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 1;
            let r = m.verify(&bad);
            assert!(
                r == Err(DropReason::BadMac) || (i == 5 && r == Err(DropReason::Unauthenticated)),
                "byte {i}: {r:?}"
            );
        }
        // Another key does not verify.
        let other = Mac::new(Key([8; KEY_LEN]), 256);
        assert_eq!(other.verify(&sealed), Err(DropReason::BadMac));
        // Stripping the MAC and the flag gives back the plain datagram.
        let mut plain = sealed[..DATAGRAM_HEADER_LEN].to_vec();
        plain[5] &= !KIND_MAC;
        plain[12..16].copy_from_slice(&(DATAGRAM_HEADER_LEN as u32).to_le_bytes());
        assert_eq!(plain, hb);
    }

    fn key_file(name: &str, contents: &[u8], mode: u32) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("mdbus-mac-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, contents).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn keys_load_from_private_files_only() {
        let hex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n";
        let k = load_key(
            &key_file("hex", hex.as_bytes(), 0o600),
            "streams.s.key_file",
        )
        .unwrap();
        assert_eq!(k.0[1], 0x11);
        assert_eq!(k.0[31], 0xff);
        let raw = load_key(&key_file("raw", &[5u8; 32], 0o400), "k").unwrap();
        assert_eq!(raw, Key([5u8; 32]));
        let p = key_file("open", hex.as_bytes(), 0o644);
        let e = load_key(&p, "streams.s.key_file").unwrap_err();
        assert_eq!(e.key, "streams.s.key_file");
        assert!(e.to_string().contains("0600"), "{e}");
        assert!(e.to_string().contains(&p.display().to_string()), "{e}");
        let e = load_key(&key_file("short", b"abcd", 0o600), "k").unwrap_err();
        assert!(e.to_string().contains("4 bytes"), "{e}");
        let e = load_key(Path::new("/nonexistent/key"), "k").unwrap_err();
        assert!(e.to_string().contains("/nonexistent/key"), "{e}");
    }
}
