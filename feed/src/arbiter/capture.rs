//! A capture's datagrams through the arbiter: one implementation of the
//! sequence rules for live feeds and files alike.

use std::net::SocketAddrV4;

use super::{Arbiter, ArbiterConfig, ArbiterCounters, ArbiterSink, Line};
use crate::mdcap::Record;
use crate::moldudp64::{PacketBuilder, Session, BLOCK_PREFIX_LEN, HEADER_LEN};
use crate::pcap::Datagram;

/// The session name mdcap records are sequenced under (an mdcap file holds
/// one session's messages and does not name it).
const MDCAP_SESSION: Session = crate::alpha::Alpha(*b"MDCAP     ");

/// Runs the datagrams of a capture ([`crate::pcap::CaptureReader`])
/// through an [`Arbiter`], so a replay applies exactly the live rules: one
/// session, far jumps only when confirmed, no overflow, each sequence
/// number published at most once and in order, duplicates dropped and
/// counted, everything skipped counted by reason.
///
/// Lines are told apart by destination: the configured addresses, or
/// else the first two destinations seen become lines A and B; datagrams to
/// any other destination (a re-request server's unicast answers) are
/// taken as [`Line::Recovery`]. Capture time is the arbiter's clock
/// (never going backwards), so the result does not depend on how fast the
/// capture is read.
///
/// ```
/// use std::net::{Ipv4Addr, SocketAddrV4};
/// use mdbus_feed::arbiter::{ArbiterConfig, ArbiterSink, CaptureSequencer, Line};
/// use mdbus_feed::moldudp64::{PacketBuilder, Request, Session};
/// use mdbus_feed::pcap::Datagram;
///
/// struct Out(Vec<u64>);
/// impl ArbiterSink for Out {
///     fn message(&mut self, sequence: u64, _line: Line, _data: &[u8]) { self.0.push(sequence) }
///     fn request(&mut self, _request: &Request) {}
/// }
/// let session = Session::new("DEMO").unwrap();
/// let packet = |seq| {
///     let mut buf = [0u8; 64];
///     let mut b = PacketBuilder::new(&mut buf, session, seq).unwrap();
///     b.push(b"hi").unwrap();
///     b.finish().to_vec()
/// };
/// let host = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 1);
/// let line_a = SocketAddrV4::new(Ipv4Addr::new(233, 0, 0, 1), 9);
/// let mut seq = CaptureSequencer::new(ArbiterConfig::for_capture());
/// let mut out = Out(Vec::new());
/// for (t, s) in [(1, 1), (2, 2), (3, 2), (4, 1 << 63), (5, 3)] {
///     let p = packet(s);
///     let d = Datagram { timestamp_ns: t, src: host, dst: line_a, payload: &p };
///     seq.on_datagram(&d, &mut out);
/// }
/// seq.finish(&mut out);
/// assert_eq!(out.0, [1, 2, 3]);
/// let c = seq.counters();
/// assert_eq!((c.duplicate_messages, c.suspect_jumps), (1, 1));
/// ```
#[derive(Debug)]
pub struct CaptureSequencer {
    arbiter: Arbiter,
    lines: [Option<SocketAddrV4>; 2],
    fixed: bool,
    now_ns: u64,
    /// A packet of one record, for [`CaptureSequencer::on_record`];
    /// allocated once.
    packet: Box<[u8]>,
}

impl CaptureSequencer {
    /// Lines taken from the first two destinations seen.
    /// [`ArbiterConfig::for_capture`] suits a file.
    pub fn new(config: ArbiterConfig) -> Self {
        Self {
            arbiter: Arbiter::new(config),
            lines: [None; 2],
            fixed: false,
            now_ns: 0,
            packet: vec![0; HEADER_LEN + BLOCK_PREFIX_LEN + usize::from(u16::MAX)]
                .into_boxed_slice(),
        }
    }

    /// Lines A and B at the given destinations; datagrams to others are
    /// [`Line::Recovery`].
    pub fn with_lines(
        config: ArbiterConfig,
        a: Option<SocketAddrV4>,
        b: Option<SocketAddrV4>,
    ) -> Self {
        Self {
            lines: [a, b],
            fixed: true,
            ..Self::new(config)
        }
    }

    /// The line a datagram to `dst` belongs to.
    pub fn line_of(&mut self, dst: SocketAddrV4) -> Line {
        for (i, line) in [Line::A, Line::B].into_iter().enumerate() {
            match self.lines[i] {
                Some(l) if l == dst => return line,
                None if !self.fixed => {
                    self.lines[i] = Some(dst);
                    return line;
                }
                _ => {}
            }
        }
        Line::Recovery
    }

    /// One datagram of the capture.
    pub fn on_datagram(&mut self, d: &Datagram<'_>, sink: &mut impl ArbiterSink) {
        let line = self.line_of(d.dst);
        self.now_ns = self.now_ns.max(d.timestamp_ns);
        self.arbiter.on_packet(line, d.payload, self.now_ns, sink);
    }

    /// One record of an mdcap file, sequenced by its upstream sequence
    /// number under the same rules (as a one-message packet on line A):
    /// a record repeating or going back is a duplicate, one far ahead is
    /// suspect until confirmed, sequence 0 or near 2^64 is malformed.
    pub fn on_record(&mut self, r: &Record<'_>, sink: &mut impl ArbiterSink) {
        self.now_ns = self.now_ns.max(r.timestamp_ns);
        let Ok(mut b) = PacketBuilder::new(&mut self.packet, MDCAP_SESSION, r.sequence) else {
            return;
        };
        if b.push(r.data).is_err() {
            // Longer than a block can carry: the mdcap reader refuses
            // such records, so this is not reached.
            return;
        }
        let len = b.finish().len();
        self.arbiter
            .on_packet(Line::A, &self.packet[..len], self.now_ns, sink);
    }

    /// The capture is over: what is still missing is reported
    /// unrecoverable, and what was held behind it delivered.
    pub fn finish(&mut self, sink: &mut impl ArbiterSink) {
        self.arbiter.finish(sink);
    }

    /// The arbiter, for its state.
    pub fn arbiter(&self) -> &Arbiter {
        &self.arbiter
    }

    /// What the arbiter has seen and done.
    pub fn counters(&self) -> &ArbiterCounters {
        self.arbiter.counters()
    }
}
