//! Fixed-width, space-padded ASCII fields ("Alpha" in the NASDAQ
//! specifications): stock symbols, MPIDs, MoldUDP64 session names.

use std::fmt;

/// A fixed-width alphanumeric field of `N` bytes, left-justified and padded
/// on the right with spaces, as the ITCH and MoldUDP64 specifications define
/// "Alpha" fields.
///
/// The bytes are kept exactly as received, so decoding is lossless even when
/// a feed sends bytes outside printable ASCII; [`Alpha::as_str`] reports
/// those as `None` rather than guessing.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Alpha<const N: usize>(pub [u8; N]);

/// An 8-byte stock symbol, e.g. `"AAPL    "`.
pub type Stock = Alpha<8>;

/// A 4-byte market participant identifier (MPID), e.g. `"NSDQ"`.
pub type Mpid = Alpha<4>;

/// Why a string cannot become an [`Alpha`] field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AlphaError {
    /// The text is longer than the field.
    #[error("{text:?} is {len} bytes; the field holds at most {max}")]
    TooLong {
        /// The text given.
        text: String,
        /// Its length in bytes.
        len: usize,
        /// The field width.
        max: usize,
    },
    /// The text has a byte outside printable ASCII (0x20..=0x7e).
    #[error("{text:?} has a byte outside printable ASCII at position {position}")]
    NotPrintableAscii {
        /// The text given.
        text: String,
        /// Byte position of the first offending byte.
        position: usize,
    },
}

impl<const N: usize> Alpha<N> {
    /// The all-spaces value (what the specifications send for "blank").
    pub const BLANK: Self = Self([b' '; N]);

    /// Pads `text` with spaces to `N` bytes.
    ///
    /// # Errors
    /// The text is longer than `N` bytes or is not printable ASCII.
    pub fn new(text: &str) -> Result<Self, AlphaError> {
        let bytes = text.as_bytes();
        if bytes.len() > N {
            return Err(AlphaError::TooLong {
                text: text.to_owned(),
                len: bytes.len(),
                max: N,
            });
        }
        if let Some(position) = bytes.iter().position(|b| !(0x20..=0x7e).contains(b)) {
            return Err(AlphaError::NotPrintableAscii {
                text: text.to_owned(),
                position,
            });
        }
        let mut out = [b' '; N];
        out[..bytes.len()].copy_from_slice(bytes);
        Ok(Self(out))
    }

    /// The raw bytes, padding included.
    pub const fn as_bytes(&self) -> &[u8; N] {
        &self.0
    }

    /// The text without its right padding, or `None` if a byte is not
    /// printable ASCII. Borrows; never allocates.
    pub fn as_str(&self) -> Option<&str> {
        let end = self.0.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
        let trimmed = &self.0[..end];
        if trimmed.iter().all(|b| (0x20..=0x7e).contains(b)) {
            std::str::from_utf8(trimmed).ok()
        } else {
            None
        }
    }

    /// True when every byte is a space.
    pub fn is_blank(&self) -> bool {
        self.0.iter().all(|&b| b == b' ')
    }
}

impl<const N: usize> Default for Alpha<N> {
    fn default() -> Self {
        Self::BLANK
    }
}

impl<const N: usize> fmt::Display for Alpha<N> {
    /// The trimmed text; bytes outside printable ASCII are shown as `\xNN`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.as_str() {
            Some(s) => f.write_str(s),
            None => {
                for &b in &self.0 {
                    if (0x20..=0x7e).contains(&b) {
                        write!(f, "{}", char::from(b))?;
                    } else {
                        write!(f, "\\x{b:02x}")?;
                    }
                }
                Ok(())
            }
        }
    }
}

impl<const N: usize> fmt::Debug for Alpha<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"")?;
        for &b in &self.0 {
            if (0x20..=0x7e).contains(&b) && b != b'"' && b != b'\\' {
                write!(f, "{}", char::from(b))?;
            } else {
                write!(f, "\\x{b:02x}")?;
            }
        }
        write!(f, "\"")
    }
}

impl<const N: usize> std::str::FromStr for Alpha<N> {
    type Err = AlphaError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_and_trims() {
        let s = Stock::new("AAPL").unwrap();
        assert_eq!(s.as_bytes(), b"AAPL    ");
        assert_eq!(s.as_str(), Some("AAPL"));
        assert_eq!(s.to_string(), "AAPL");
        assert!(Stock::BLANK.is_blank());
        assert_eq!(Stock::BLANK.as_str(), Some(""));
    }

    #[test]
    fn rejects_what_does_not_fit() {
        assert!(matches!(
            Stock::new("TOOLONGSYM"),
            Err(AlphaError::TooLong {
                len: 10,
                max: 8,
                ..
            })
        ));
        assert!(matches!(
            Mpid::new("A\u{e9}"),
            Err(AlphaError::NotPrintableAscii { position: 1, .. })
        ));
    }

    #[test]
    fn keeps_raw_bytes_it_cannot_show() {
        let s = Alpha::<4>([b'A', 0, b'B', b' ']);
        assert_eq!(s.as_str(), None);
        assert_eq!(s.to_string(), "A\\x00B ");
        assert_eq!(format!("{s:?}"), "\"A\\x00B \"");
    }
}
