//! ITCH 5.0 field types: the common header, 6-byte timestamps and
//! fixed-point prices, and the big-endian reads and writes behind every
//! message layout.

use std::fmt;

use crate::alpha::Alpha;

/// Nanoseconds since midnight, carried in 6 bytes (48 bits) on the wire.
///
/// Constructors refuse values that do not fit in 48 bits, so encoding a
/// `Timestamp` never loses bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Timestamp(u64);

impl Timestamp {
    /// Midnight.
    pub const MIDNIGHT: Self = Self(0);
    /// The largest value 48 bits hold (about 78 hours).
    pub const MAX: Self = Self((1 << 48) - 1);
    /// Nanoseconds in one second.
    pub const NANOS_PER_SEC: u64 = 1_000_000_000;

    /// `nanos` since midnight, or `None` if it does not fit in 48 bits.
    pub const fn new(nanos: u64) -> Option<Self> {
        if nanos <= Self::MAX.0 {
            Some(Self(nanos))
        } else {
            None
        }
    }

    /// A time of day, or `None` past 23:59:59 or with a field out of range.
    pub const fn from_hms(hours: u64, minutes: u64, seconds: u64) -> Option<Self> {
        if hours > 23 || minutes > 59 || seconds > 59 {
            return None;
        }
        Some(Self(
            ((hours * 60 + minutes) * 60 + seconds) * Self::NANOS_PER_SEC,
        ))
    }

    /// Nanoseconds since midnight.
    pub const fn nanos(self) -> u64 {
        self.0
    }

    /// `self + nanos`, or `None` past [`Timestamp::MAX`].
    pub const fn checked_add_nanos(self, nanos: u64) -> Option<Self> {
        match self.0.checked_add(nanos) {
            Some(n) => Self::new(n),
            None => None,
        }
    }
}

impl fmt::Display for Timestamp {
    /// `HH:MM:SS.nnnnnnnnn` (hours may exceed 23: the field allows it).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0 / Self::NANOS_PER_SEC;
        let nanos = self.0 % Self::NANOS_PER_SEC;
        write!(
            f,
            "{:02}:{:02}:{:02}.{:09}",
            secs / 3600,
            secs / 60 % 60,
            secs % 60,
            nanos
        )
    }
}

macro_rules! fixed_point_price {
    ($(#[$doc:meta])* $name:ident($raw:ty), $decimals:literal, $scale:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        pub struct $name(pub $raw);

        impl $name {
            /// Implied decimal places.
            pub const DECIMALS: u32 = $decimals;
            /// Raw units per whole dollar.
            pub const SCALE: $raw = $scale;

            /// The raw integer as sent on the wire.
            pub const fn raw(self) -> $raw {
                self.0
            }

            /// From whole dollars and a fraction in raw units
            /// (`fraction < SCALE`), or `None` if out of range.
            pub const fn from_parts(dollars: $raw, fraction: $raw) -> Option<Self> {
                if fraction >= $scale {
                    return None;
                }
                match dollars.checked_mul($scale) {
                    Some(d) => match d.checked_add(fraction) {
                        Some(v) => Some(Self(v)),
                        None => None,
                    },
                    None => None,
                }
            }

            /// The price as a float, for display and arithmetic that can
            /// afford rounding. Decoding never goes through this.
            pub fn to_f64(self) -> f64 {
                self.0 as f64 / $scale as f64
            }
        }

        impl fmt::Display for $name {
            /// Exact decimal text with every implied place, e.g. `123.4500`.
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(
                    f,
                    "{}.{:0width$}",
                    self.0 / $scale,
                    self.0 % $scale,
                    width = $decimals
                )
            }
        }
    };
}

fixed_point_price!(
    /// A `Price(4)` field: unsigned 4-byte integer with 4 implied decimal
    /// places (`1234500` is `$123.4500`).
    Price4(u32),
    4,
    10_000
);

fixed_point_price!(
    /// A `Price(8)` field: unsigned 8-byte integer with 8 implied decimal
    /// places (used by the MWCB decline levels).
    Price8(u64),
    8,
    100_000_000
);

/// The fields every ITCH 5.0 message carries at offsets 1 to 10, right after
/// its type byte: stock locate, tracking number and timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Header {
    /// Locate code identifying the security (0 for messages about no
    /// security, such as system events).
    pub stock_locate: u16,
    /// Nasdaq internal tracking number.
    pub tracking_number: u16,
    /// Nanoseconds since midnight.
    pub timestamp: Timestamp,
}

/// Offset of the stock locate field.
pub(crate) const LOCATE_OFFSET: usize = 1;
/// Offset of the tracking number field.
pub(crate) const TRACKING_OFFSET: usize = 3;
/// Offset of the timestamp field.
pub(crate) const TIMESTAMP_OFFSET: usize = 5;

impl Header {
    /// Reads the header of a message whose length is already checked to be
    /// at least [`super::HEADER_LEN`].
    pub(crate) fn read(msg: &[u8]) -> Self {
        Self {
            stock_locate: u16::read(&msg[LOCATE_OFFSET..LOCATE_OFFSET + 2]),
            tracking_number: u16::read(&msg[TRACKING_OFFSET..TRACKING_OFFSET + 2]),
            timestamp: Timestamp::read(&msg[TIMESTAMP_OFFSET..TIMESTAMP_OFFSET + 6]),
        }
    }

    /// Writes the header into a message buffer already checked to be at
    /// least [`super::HEADER_LEN`] long.
    pub(crate) fn write(&self, msg: &mut [u8]) {
        self.stock_locate
            .write(&mut msg[LOCATE_OFFSET..LOCATE_OFFSET + 2]);
        self.tracking_number
            .write(&mut msg[TRACKING_OFFSET..TRACKING_OFFSET + 2]);
        self.timestamp
            .write(&mut msg[TIMESTAMP_OFFSET..TIMESTAMP_OFFSET + 6]);
    }
}

/// A fixed-width big-endian field. `read` and `write` are handed slices of
/// exactly `SIZE` bytes: the message macro checks every layout at compile
/// time, so the slicing inside them cannot fail.
pub(crate) trait Field: Copy {
    /// Width on the wire.
    const SIZE: usize;
    /// Decodes from exactly `SIZE` bytes.
    fn read(b: &[u8]) -> Self;
    /// Encodes into exactly `SIZE` bytes.
    fn write(self, b: &mut [u8]);
}

fn array<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0; N];
    a.copy_from_slice(b);
    a
}

macro_rules! int_field {
    ($($t:ty),*) => {$(
        impl Field for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            #[inline]
            fn read(b: &[u8]) -> Self {
                <$t>::from_be_bytes(array(b))
            }
            #[inline]
            fn write(self, b: &mut [u8]) {
                b.copy_from_slice(&self.to_be_bytes());
            }
        }
    )*};
}
int_field!(u8, u16, u32, u64);

impl Field for Timestamp {
    const SIZE: usize = 6;
    #[inline]
    fn read(b: &[u8]) -> Self {
        let mut a = [0; 8];
        a[2..].copy_from_slice(b);
        Self(u64::from_be_bytes(a))
    }
    #[inline]
    fn write(self, b: &mut [u8]) {
        b.copy_from_slice(&self.0.to_be_bytes()[2..]);
    }
}

impl Field for Price4 {
    const SIZE: usize = 4;
    #[inline]
    fn read(b: &[u8]) -> Self {
        Self(u32::read(b))
    }
    #[inline]
    fn write(self, b: &mut [u8]) {
        self.0.write(b);
    }
}

impl Field for Price8 {
    const SIZE: usize = 8;
    #[inline]
    fn read(b: &[u8]) -> Self {
        Self(u64::read(b))
    }
    #[inline]
    fn write(self, b: &mut [u8]) {
        self.0.write(b);
    }
}

impl<const N: usize> Field for Alpha<N> {
    const SIZE: usize = N;
    #[inline]
    fn read(b: &[u8]) -> Self {
        Self(array(b))
    }
    #[inline]
    fn write(self, b: &mut [u8]) {
        b.copy_from_slice(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamp_bounds_and_display() {
        assert_eq!(Timestamp::new(1 << 48), None);
        assert_eq!(Timestamp::new((1 << 48) - 1), Some(Timestamp::MAX));
        let t = Timestamp::from_hms(9, 30, 0)
            .unwrap()
            .checked_add_nanos(1)
            .unwrap();
        assert_eq!(t.to_string(), "09:30:00.000000001");
        assert_eq!(Timestamp::from_hms(24, 0, 0), None);
    }

    #[test]
    fn timestamp_is_six_big_endian_bytes() {
        let mut b = [0; 6];
        Timestamp::new(0x0102_0304_0506).unwrap().write(&mut b);
        assert_eq!(b, [1, 2, 3, 4, 5, 6]);
        assert_eq!(Timestamp::read(&b).nanos(), 0x0102_0304_0506);
    }

    #[test]
    fn prices_display_exactly() {
        assert_eq!(Price4(1_234_500).to_string(), "123.4500");
        assert_eq!(Price4(1).to_string(), "0.0001");
        assert_eq!(Price4(u32::MAX).to_string(), "429496.7295");
        assert_eq!(Price8(123_400_010_002).to_string(), "1234.00010002");
        assert_eq!(Price4::from_parts(10, 5000), Some(Price4(105_000)));
        assert_eq!(Price4::from_parts(10, 10_000), None);
        assert!((Price4(1_234_500).to_f64() - 123.45).abs() < 1e-9);
    }
}
