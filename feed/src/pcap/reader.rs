//! Reading UDP/IPv4 datagrams out of pcap and pcapng captures.

use std::fs::File;
use std::io::{self, Cursor, ErrorKind, Read};

use crate::bytes::read_full;
use std::net::SocketAddrV4;
use std::path::Path;

use etherparse::err::packet::SliceError;
use etherparse::err::Layer;
use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::{DataLink, PcapError, TsResolution};

use super::CaptureError;

/// One UDP datagram from a capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// Capture time, nanoseconds since the Unix epoch.
    pub timestamp_ns: u64,
    /// Source address and port.
    pub src: SocketAddrV4,
    /// Destination address and port.
    pub dst: SocketAddrV4,
    /// The UDP payload (a MoldUDP64 packet, for a feed capture).
    pub payload: &'a [u8],
}

/// Counts of what a [`CaptureReader`] has read and skipped, each skipped
/// frame under exactly one reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CaptureStats {
    /// Packet records read (pcap records; pcapng enhanced, simple and
    /// obsolete packet blocks).
    pub packets: u64,
    /// UDP/IPv4 datagrams yielded.
    pub datagrams: u64,
    /// Skipped: not IP at all (ARP, other ether types).
    pub not_ipv4: u64,
    /// Skipped: IPv6 (this reader yields UDP over IPv4 only).
    pub ipv6: u64,
    /// Skipped: IPv4 but not UDP (TCP, ICMP, IGMP, ...).
    pub not_udp: u64,
    /// Skipped: IPv4 fragments, which this reader does not reassemble.
    pub fragments: u64,
    /// Skipped: the frame ends before its headers or the IP length say it
    /// does (often a packet cut short by the capture's snapshot length).
    pub truncated: u64,
    /// Skipped: the UDP length field disagrees with the IP payload (0,
    /// shorter than the UDP header, longer or shorter than the datagram).
    pub bad_udp_length: u64,
    /// Skipped: headers that do not parse for another reason (a bad IP
    /// version or header length, a malformed VLAN or SLL header).
    pub unparseable: u64,
    /// Skipped: pcapng packets on an interface whose link type is not
    /// Ethernet, Linux SLL or raw IPv4.
    pub unsupported_link: u64,
}

impl CaptureStats {
    /// Packets read but not yielded.
    pub fn skipped(&self) -> u64 {
        self.not_ipv4
            + self.ipv6
            + self.not_udp
            + self.fragments
            + self.truncated
            + self.bad_udp_length
            + self.unparseable
            + self.unsupported_link
    }
}

/// The container format of a capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureFormat {
    /// Classic libpcap format (microsecond or nanosecond timestamps).
    Pcap,
    /// pcapng.
    PcapNg,
}

/// The capture format whose magic number `prefix` starts with, if any.
pub fn capture_format(prefix: &[u8]) -> Option<CaptureFormat> {
    match prefix {
        // 0xa1b2c3d4 (microseconds) and 0xa1b23c4d (nanoseconds), in
        // either byte order.
        [0xa1, 0xb2, 0xc3, 0xd4, ..]
        | [0xd4, 0xc3, 0xb2, 0xa1, ..]
        | [0xa1, 0xb2, 0x3c, 0x4d, ..]
        | [0x4d, 0x3c, 0xb2, 0xa1, ..] => Some(CaptureFormat::Pcap),
        // The section header block type, 0x0a0d0d0a, reads the same in
        // both byte orders.
        [0x0a, 0x0d, 0x0d, 0x0a, ..] => Some(CaptureFormat::PcapNg),
        _ => None,
    }
}

/// The link layers this reader can take apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    Ethernet,
    LinuxSll,
    RawIp,
    Unsupported,
}

impl Link {
    fn of(dl: DataLink) -> Self {
        match dl {
            DataLink::ETHERNET => Link::Ethernet,
            DataLink::LINUX_SLL => Link::LinuxSll,
            DataLink::RAW | DataLink::IPV4 => Link::RawIp,
            _ => Link::Unsupported,
        }
    }
}

/// What a pcapng interface description says about its packets.
#[derive(Debug, Clone, Copy)]
struct Interface {
    link: Link,
    // `if_tsresol`: timestamp units. Defaults to microseconds.
    tsresol: u8,
    // `if_tsoffset`: seconds added to every timestamp.
    tsoffset: u64,
}

// The first bytes are read before the format is known, then put back in
// front of the stream for pcap-file's reader.
type Replayed<R> = io::Chain<Cursor<[u8; 4]>, R>;

enum Inner<R: Read> {
    Pcap {
        reader: PcapReader<Replayed<R>>,
        link: Link,
        nanos: bool,
    },
    PcapNg {
        reader: PcapNgReader<Replayed<R>>,
        interfaces: Vec<Interface>,
    },
}

/// Reads the UDP/IPv4 datagrams of a pcap or pcapng capture, one at a time.
///
/// Links: Ethernet (with or without VLAN tags), Linux cooked capture (SLL)
/// and raw IPv4. Everything else is skipped and counted in
/// [`CaptureReader::stats`]. Each payload is copied once into a buffer the
/// reader reuses, so reading allocates nothing per packet.
///
/// ```no_run
/// use mdbus_feed::pcap::CaptureReader;
///
/// let mut r = CaptureReader::open("feed.pcap")?;
/// while let Some(d) = r.next_datagram()? {
///     println!("{} {} -> {} {} bytes", d.timestamp_ns, d.src, d.dst, d.payload.len());
/// }
/// eprintln!("skipped {} packets", r.stats().skipped());
/// # Ok::<(), mdbus_feed::pcap::CaptureError>(())
/// ```
pub struct CaptureReader<R: Read = File> {
    name: String,
    inner: Inner<R>,
    stats: CaptureStats,
    // Index of the next record (packet or block), for error messages.
    record: u64,
    payload: Vec<u8>,
}

impl CaptureReader<File> {
    /// Opens a capture file and reads its file header.
    ///
    /// # Errors
    /// The file cannot be opened, is not a capture, is truncated inside
    /// its header, or (classic pcap) has an unsupported link type.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, CaptureError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let file = File::open(path).map_err(|source| CaptureError::Open {
            name: name.clone(),
            source,
        })?;
        Self::new(name, file)
    }
}

impl<R: Read> CaptureReader<R> {
    /// Reads a capture from any reader; `name` is what errors call it.
    /// (The reader is buffered internally.)
    ///
    /// # Errors
    /// As [`CaptureReader::open`].
    pub fn new(name: impl Into<String>, mut reader: R) -> Result<Self, CaptureError> {
        let name = name.into();
        let mut magic = [0; 4];
        let n = read_full(&mut reader, &mut magic).map_err(|source| CaptureError::Io {
            name: name.clone(),
            source,
        })?;
        if n < magic.len() {
            return Err(CaptureError::NotACapture {
                name,
                found: if n == 0 {
                    "the file is empty".to_owned()
                } else {
                    format!("the file is only {n} bytes long")
                },
            });
        }
        let replayed = Cursor::new(magic).chain(reader);
        let header_error = |e: PcapError, what: &str| match e {
            PcapError::IoError(e) if e.kind() == ErrorKind::UnexpectedEof => {
                CaptureError::Truncated {
                    name: name.clone(),
                    what: format!("the file ends inside the {what}"),
                }
            }
            PcapError::IoError(source) => CaptureError::Io {
                name: name.clone(),
                source,
            },
            other => CaptureError::Malformed {
                name: name.clone(),
                record: 0,
                reason: format!("bad {what}: {other}"),
            },
        };
        let inner = match capture_format(&magic) {
            Some(CaptureFormat::Pcap) => {
                let reader = PcapReader::new(replayed)
                    .map_err(|e| header_error(e, "24-byte pcap file header"))?;
                let header = reader.header();
                let link = Link::of(header.datalink);
                if link == Link::Unsupported {
                    return Err(CaptureError::UnsupportedLinkType {
                        name,
                        link_type: u32::from(header.datalink),
                    });
                }
                Inner::Pcap {
                    reader,
                    link,
                    nanos: header.ts_resolution == TsResolution::NanoSecond,
                }
            }
            Some(CaptureFormat::PcapNg) => {
                let reader = PcapNgReader::new(replayed)
                    .map_err(|e| header_error(e, "pcapng section header block"))?;
                Inner::PcapNg {
                    reader,
                    interfaces: Vec::new(),
                }
            }
            None => {
                return Err(CaptureError::NotACapture {
                    name,
                    found: describe_magic(magic),
                })
            }
        };
        Ok(Self {
            name,
            inner,
            stats: CaptureStats::default(),
            record: 1,
            payload: Vec::with_capacity(usize::from(u16::MAX)),
        })
    }

    /// The container format.
    pub fn format(&self) -> CaptureFormat {
        match self.inner {
            Inner::Pcap { .. } => CaptureFormat::Pcap,
            Inner::PcapNg { .. } => CaptureFormat::PcapNg,
        }
    }

    /// The name errors use (the path, for [`CaptureReader::open`]).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What has been read and skipped so far.
    pub fn stats(&self) -> &CaptureStats {
        &self.stats
    }

    /// The next UDP/IPv4 datagram, or `None` at the end of the capture.
    /// Packets of other kinds are skipped and counted.
    ///
    /// # Errors
    /// The file ends inside a record, a record is malformed, or reading
    /// fails; the error names the file and the record.
    pub fn next_datagram(&mut self) -> Result<Option<Datagram<'_>>, CaptureError> {
        loop {
            let found = match &mut self.inner {
                Inner::Pcap {
                    reader,
                    link,
                    nanos,
                } => match reader.next_raw_packet() {
                    None => return Ok(None),
                    Some(Err(e)) => return Err(record_error(&self.name, self.record, e)),
                    Some(Ok(p)) => {
                        self.stats.packets += 1;
                        let frac = u64::from(p.ts_frac) * if *nanos { 1 } else { 1_000 };
                        let ts = u64::from(p.ts_sec) * 1_000_000_000 + frac;
                        extract(*link, &p.data, ts, &mut self.stats, &mut self.payload)
                    }
                },
                Inner::PcapNg { reader, interfaces } => match reader.next_block() {
                    None => return Ok(None),
                    Some(Err(e)) => return Err(record_error(&self.name, self.record, e)),
                    Some(Ok(block)) => match block {
                        Block::SectionHeader(_) => {
                            // Interface numbering restarts with each section.
                            interfaces.clear();
                            None
                        }
                        Block::InterfaceDescription(idb) => {
                            interfaces.push(describe_interface(&idb));
                            None
                        }
                        Block::EnhancedPacket(epb) => {
                            self.stats.packets += 1;
                            let iface =
                                interface(interfaces, epb.interface_id, &self.name, self.record)?;
                            // pcap-file 2.0 hands back the raw 64-bit timestamp
                            // as if it were nanoseconds; the interface says what
                            // its units really are.
                            let raw = u64::try_from(epb.timestamp.as_nanos()).unwrap_or(u64::MAX);
                            let ts = pcapng_nanos(raw, iface);
                            extract(
                                iface.link,
                                &epb.data,
                                ts,
                                &mut self.stats,
                                &mut self.payload,
                            )
                        }
                        Block::Packet(pb) => {
                            self.stats.packets += 1;
                            let iface = interface(
                                interfaces,
                                u32::from(pb.interface_id),
                                &self.name,
                                self.record,
                            )?;
                            let ts = pcapng_nanos(pb.timestamp, iface);
                            extract(iface.link, &pb.data, ts, &mut self.stats, &mut self.payload)
                        }
                        Block::SimplePacket(spb) => {
                            self.stats.packets += 1;
                            // Simple packets carry no timestamp and belong to
                            // the first interface.
                            let iface = interface(interfaces, 0, &self.name, self.record)?;
                            extract(iface.link, &spb.data, 0, &mut self.stats, &mut self.payload)
                        }
                        _ => None,
                    },
                },
            };
            self.record += 1;
            if let Some((timestamp_ns, src, dst)) = found {
                self.stats.datagrams += 1;
                return Ok(Some(Datagram {
                    timestamp_ns,
                    src,
                    dst,
                    payload: &self.payload,
                }));
            }
        }
    }
}

impl<R: Read> std::fmt::Debug for CaptureReader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureReader")
            .field("name", &self.name)
            .field("format", &self.format())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// Takes a link-layer frame apart; on a UDP/IPv4 datagram copies the
/// payload into `payload` and returns its time and addresses, otherwise
/// counts why it was skipped.
fn extract(
    link: Link,
    frame: &[u8],
    timestamp_ns: u64,
    stats: &mut CaptureStats,
    payload: &mut Vec<u8>,
) -> Option<(u64, SocketAddrV4, SocketAddrV4)> {
    let sliced = match link {
        Link::Ethernet => SlicedPacket::from_ethernet(frame),
        Link::LinuxSll => SlicedPacket::from_linux_sll(frame),
        Link::RawIp => SlicedPacket::from_ip(frame),
        Link::Unsupported => {
            stats.unsupported_link += 1;
            return None;
        }
    };
    let sliced = match sliced {
        Ok(sliced) => sliced,
        Err(SliceError::Len(e)) => {
            match e.layer {
                Layer::UdpHeader | Layer::UdpPayload => stats.bad_udp_length += 1,
                _ => stats.truncated += 1,
            }
            return None;
        }
        Err(_) => {
            stats.unparseable += 1;
            return None;
        }
    };
    let ip = match &sliced.net {
        Some(NetSlice::Ipv4(ip)) => ip,
        Some(NetSlice::Ipv6(_)) => {
            stats.ipv6 += 1;
            return None;
        }
        _ => {
            stats.not_ipv4 += 1;
            return None;
        }
    };
    if ip.is_payload_fragmented() {
        stats.fragments += 1;
        return None;
    }
    let Some(TransportSlice::Udp(udp)) = &sliced.transport else {
        stats.not_udp += 1;
        return None;
    };
    // etherparse takes a length of 0 to mean "the rest", and a length
    // shorter than the IP payload as the end of the datagram; either way
    // the datagram is not what its sender wrote.
    if usize::from(udp.length()) != ip.payload().payload.len() {
        stats.bad_udp_length += 1;
        return None;
    }
    let header = ip.header();
    payload.clear();
    payload.extend_from_slice(udp.payload());
    Some((
        timestamp_ns,
        SocketAddrV4::new(header.source_addr(), udp.source_port()),
        SocketAddrV4::new(header.destination_addr(), udp.destination_port()),
    ))
}

fn describe_interface(
    idb: &pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock<'_>,
) -> Interface {
    let mut iface = Interface {
        link: Link::of(idb.linktype),
        tsresol: 6,
        tsoffset: 0,
    };
    for opt in &idb.options {
        match opt {
            InterfaceDescriptionOption::IfTsResol(r) => iface.tsresol = *r,
            InterfaceDescriptionOption::IfTsOffset(o) => iface.tsoffset = *o,
            _ => {}
        }
    }
    iface
}

fn interface<'i>(
    interfaces: &'i [Interface],
    id: u32,
    name: &str,
    record: u64,
) -> Result<&'i Interface, CaptureError> {
    usize::try_from(id)
        .ok()
        .and_then(|i| interfaces.get(i))
        .ok_or_else(|| CaptureError::Malformed {
            name: name.to_owned(),
            record,
            reason: format!(
                "packet on interface {id}, but the section describes only {} interfaces",
                interfaces.len()
            ),
        })
}

/// Converts a pcapng timestamp in the interface's units to nanoseconds
/// since the epoch, saturating rather than wrapping on absurd values.
fn pcapng_nanos(raw: u64, iface: &Interface) -> u64 {
    let raw = u128::from(raw);
    let v = u32::from(iface.tsresol & 0x7f);
    let nanos = if iface.tsresol & 0x80 == 0 {
        // Units of 10^-v seconds.
        if v <= 9 {
            raw * 10u128.pow(9 - v)
        } else {
            raw / 10u128.checked_pow(v - 9).unwrap_or(u128::MAX)
        }
    } else {
        // Units of 2^-v seconds.
        (raw * 1_000_000_000) >> v.min(127)
    };
    let nanos = nanos + u128::from(iface.tsoffset) * 1_000_000_000;
    u64::try_from(nanos).unwrap_or(u64::MAX)
}

fn record_error(name: &str, record: u64, e: PcapError) -> CaptureError {
    match e {
        PcapError::IoError(e) if e.kind() == ErrorKind::UnexpectedEof => CaptureError::Truncated {
            name: name.to_owned(),
            what: format!(
                "the file ends inside record {record} (after {} complete records)",
                record - 1
            ),
        },
        PcapError::IoError(source) => CaptureError::Io {
            name: name.to_owned(),
            source,
        },
        other => CaptureError::Malformed {
            name: name.to_owned(),
            record,
            reason: other.to_string(),
        },
    }
}

fn describe_magic(magic: [u8; 4]) -> String {
    let hex = magic.map(|b| format!("{b:02x}")).join(" ");
    if magic.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
        let text: String = magic.iter().map(|&b| char::from(b)).collect();
        format!("it starts with bytes {hex} (\"{text}\"), not a pcap or pcapng magic number")
    } else {
        format!("it starts with bytes {hex}, not a pcap or pcapng magic number")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcapng_resolutions() {
        let us = Interface {
            link: Link::Ethernet,
            tsresol: 6,
            tsoffset: 0,
        };
        assert_eq!(pcapng_nanos(1_500_000, &us), 1_500_000_000);
        let ns = Interface { tsresol: 9, ..us };
        assert_eq!(pcapng_nanos(7, &ns), 7);
        let ps = Interface { tsresol: 12, ..us };
        assert_eq!(pcapng_nanos(7_000, &ps), 7);
        let pow2 = Interface {
            tsresol: 0x80 | 10,
            ..us
        };
        assert_eq!(pcapng_nanos(1024, &pow2), 1_000_000_000);
        let offset = Interface { tsoffset: 2, ..us };
        assert_eq!(pcapng_nanos(1, &offset), 2_000_001_000);
        let absurd = Interface { tsresol: 0, ..us };
        assert_eq!(pcapng_nanos(u64::MAX, &absurd), u64::MAX);
    }
}
