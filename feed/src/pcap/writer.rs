//! Writing UDP/IPv4 datagrams as Ethernet frames in a classic pcap file.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::time::Duration;

use etherparse::PacketBuilder;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, Endianness, PcapError, TsResolution};

use super::CaptureError;

/// Largest UDP payload one IPv4 datagram carries: 65,535 minus the 20-byte
/// IPv4 and 8-byte UDP headers.
const MAX_UDP_PAYLOAD: usize = 65_507;
/// Ethernet + IPv4 + UDP header bytes in front of each payload.
const HEADERS_LEN: usize = 14 + 20 + 8;
/// Snapshot length written in the file header: tcpdump's default, larger
/// than any frame written here.
const SNAPLEN: u32 = 262_144;
/// Source MAC of every frame: a locally administered address.
const SRC_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// Destination MAC for unicast destinations.
const UNICAST_DST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const TTL: u8 = 64;

/// Writes UDP/IPv4 datagrams to a classic pcap file (nanosecond
/// timestamps, Ethernet link type), building the Ethernet, IPv4 and UDP
/// headers with valid checksums. Multicast destinations get the matching
/// `01:00:5e` multicast MAC, as on a real wire.
///
/// Frames are built in one reusable buffer: writing allocates nothing per
/// packet.
pub struct CaptureWriter<W: Write> {
    name: String,
    writer: PcapWriter<W>,
    frame: Vec<u8>,
    packets: u64,
}

impl CaptureWriter<BufWriter<File>> {
    /// Creates (or truncates) a capture file and writes its header.
    ///
    /// # Errors
    /// The file cannot be created or written.
    pub fn create(path: impl AsRef<Path>) -> Result<Self, CaptureError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let file = File::create(path).map_err(|source| CaptureError::Open {
            name: name.clone(),
            source,
        })?;
        Self::new(name, BufWriter::new(file))
    }
}

impl<W: Write> CaptureWriter<W> {
    /// Writes the pcap file header to `writer`; `name` is what errors call
    /// the stream.
    ///
    /// # Errors
    /// Writing the header fails.
    pub fn new(name: impl Into<String>, writer: W) -> Result<Self, CaptureError> {
        let name = name.into();
        let header = PcapHeader {
            version_major: 2,
            version_minor: 4,
            ts_correction: 0,
            ts_accuracy: 0,
            snaplen: SNAPLEN,
            datalink: DataLink::ETHERNET,
            ts_resolution: TsResolution::NanoSecond,
            endianness: Endianness::native(),
        };
        let writer = PcapWriter::with_header(writer, header).map_err(|e| write_error(&name, e))?;
        Ok(Self {
            name,
            writer,
            frame: Vec::with_capacity(HEADERS_LEN + MAX_UDP_PAYLOAD),
            packets: 0,
        })
    }

    /// Writes one datagram captured at `timestamp_ns` (nanoseconds since
    /// the Unix epoch).
    ///
    /// # Errors
    /// The payload exceeds 65,507 bytes, the timestamp is past 2106, or
    /// writing fails.
    pub fn write_udp(
        &mut self,
        timestamp_ns: u64,
        src: SocketAddrV4,
        dst: SocketAddrV4,
        payload: &[u8],
    ) -> Result<(), CaptureError> {
        if payload.len() > MAX_UDP_PAYLOAD {
            return Err(CaptureError::PayloadTooLarge {
                name: self.name.clone(),
                len: payload.len(),
            });
        }
        let timestamp = Duration::from_nanos(timestamp_ns);
        if u32::try_from(timestamp.as_secs()).is_err() {
            return Err(CaptureError::TimestampOutOfRange {
                name: self.name.clone(),
                timestamp_ns,
            });
        }
        self.frame.clear();
        PacketBuilder::ethernet2(SRC_MAC, dst_mac(*dst.ip()))
            .ipv4(src.ip().octets(), dst.ip().octets(), TTL)
            .udp(src.port(), dst.port())
            .write(&mut self.frame, payload)
            .map_err(|e| CaptureError::Io {
                name: self.name.clone(),
                source: std::io::Error::other(e),
            })?;
        // The frame is at most 65,549 bytes, so the length fits in u32.
        let len = u32::try_from(self.frame.len()).unwrap_or(u32::MAX);
        let packet = PcapPacket::new(timestamp, len, &self.frame);
        self.writer
            .write_packet(&packet)
            .map_err(|e| write_error(&self.name, e))?;
        self.packets += 1;
        Ok(())
    }

    /// Datagrams written so far.
    pub fn packets_written(&self) -> u64 {
        self.packets
    }

    /// Flushes and returns the underlying writer. (pcap-file's writer owns
    /// the stream, so flushing happens here, once, rather than per packet.)
    ///
    /// # Errors
    /// Flushing fails.
    pub fn finish(self) -> Result<W, CaptureError> {
        let mut w = self.writer.into_writer();
        w.flush().map_err(|source| CaptureError::Io {
            name: self.name,
            source,
        })?;
        Ok(w)
    }
}

impl<W: Write> std::fmt::Debug for CaptureWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureWriter")
            .field("name", &self.name)
            .field("packets", &self.packets)
            .finish_non_exhaustive()
    }
}

/// The Ethernet destination for an IPv4 destination: for multicast groups
/// `01:00:5e` followed by the low 23 bits of the group (RFC 1112).
fn dst_mac(ip: Ipv4Addr) -> [u8; 6] {
    if ip.is_multicast() {
        let o = ip.octets();
        [0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]]
    } else {
        UNICAST_DST_MAC
    }
}

fn write_error(name: &str, e: PcapError) -> CaptureError {
    match e {
        PcapError::IoError(source) => CaptureError::Io {
            name: name.to_owned(),
            source,
        },
        other => CaptureError::Io {
            name: name.to_owned(),
            source: std::io::Error::other(other),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multicast_mac_keeps_low_23_bits() {
        assert_eq!(
            dst_mac(Ipv4Addr::new(233, 200, 79, 1)),
            [0x01, 0x00, 0x5e, 0x48, 79, 1]
        );
        assert_eq!(dst_mac(Ipv4Addr::new(10, 0, 0, 1)), UNICAST_DST_MAC);
    }
}
