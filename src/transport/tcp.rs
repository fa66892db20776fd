//! Sessions over TCP, for hosts without RDMA.
//!
//! Frames are the 24-byte [`wire`](crate::wire) header and the payload,
//! back to back on the stream. Each side first sends a hello naming the
//! session, so two ends configured for different sessions refuse each
//! other; an orderly close sends a close frame before the FIN, so the peer
//! can tell "closed" from "lost".
//!
//! Both buffers are allocated once. A claim is space in the send buffer; the
//! commit writes it to the socket at once (TCP_NODELAY), keeping what the
//! kernel did not take for the next commit or poll. Receiving is a
//! non-blocking `recv` per poll into the receive buffer; complete frames are
//! handed out in place.
//!
//! Flow control is the same as on the other session transports: each side
//! grants the other `capacity` messages (announced in the hello), and a
//! sender with that many unconsumed messages outstanding is held back. The
//! receiver returns credit with a credit frame (the count it has consumed)
//! every half capacity, so a ping-pong pays for none.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::config::SessionConfig;
use crate::error::{Error, Result};
use crate::message::Message;
use crate::transport::SessionEnd;
use crate::wire::{self, Header, HeaderError, FLAG_CLOSE, FLAG_CREDIT, FLAG_HELLO, HEADER_LEN};

/// One end of a TCP session.
#[derive(Debug)]
pub struct TcpSession {
    sock: TcpStream,
    channel: String,
    peer: SocketAddr,
    max_message: usize,
    sbuf: Box<[u8]>,
    /// Unsent bytes are `sbuf[s_start..s_end]`.
    s_start: usize,
    s_end: usize,
    /// Where the claimed frame starts.
    claim_at: usize,
    next_seq: u64,
    /// Length of the current claim, the most a commit may send.
    claim_len: usize,
    rbuf: Box<[u8]>,
    /// Received, undelivered bytes are `rbuf[r_start..r_end]`.
    r_start: usize,
    r_end: usize,
    /// Frame checks and the peer's sequence and credit state.
    reader: FrameReader,
    /// Credit frames before this offset of `rbuf` have been applied.
    scan_at: usize,
    /// Messages the peer grants us in flight.
    peer_capacity: u64,
    /// Why the peer's stream cannot be trusted any more, found where no
    /// error could be returned (a sender looking for credit); reported by
    /// the next poll or liveness check.
    broken: Option<String>,
    /// Messages we consumed, and how many of those we told the peer about.
    consumed: u64,
    credit_sent: u64,
    credit_every: u64,
    /// The peer sent its close frame.
    peer_closed: bool,
    /// The connection reached end of file.
    eof: bool,
    closed: bool,
}

fn parse_addr(channel: &str, cfg: &SessionConfig, name: &str) -> Result<SocketAddr> {
    if cfg.address.is_empty() {
        return Err(Error::Missing {
            channel: channel.into(),
            key: format!("sessions.{name}.address"),
            transport: "tcp",
        });
    }
    cfg.address.parse().map_err(|_| Error::NoPeer {
        channel: channel.into(),
        address: cfg.address.clone(),
        reason: "not an address such as 10.0.0.1:7000".into(),
    })
}

impl TcpSession {
    /// Listens on the session's address and waits up to `connect_timeout`
    /// for the initiator.
    pub fn accept(name: &str, cfg: &SessionConfig) -> Result<TcpSession> {
        let channel = format!("session `{name}`");
        let addr = parse_addr(&channel, cfg, name)?;
        let listener =
            TcpListener::bind(addr).map_err(|e| Error::io("listen on", addr.to_string(), e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::io("configure", addr.to_string(), e))?;
        let deadline = Instant::now() + cfg.connect_timeout;
        let sock = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        return Err(Error::Timeout {
                            channel,
                            what: "a peer connecting",
                            waited_ms: cfg.connect_timeout.as_millis() as u64,
                        });
                    }
                    // Control plane: waiting for another host to start.
                    std::thread::sleep(Duration::from_micros(500));
                }
                Err(e) => return Err(Error::io("accept on", addr.to_string(), e)),
            }
        };
        Self::establish(sock, name, channel, cfg, deadline)
    }

    /// Connects to the session's address, retrying until `connect_timeout`
    /// while nobody listens there yet.
    pub fn connect(name: &str, cfg: &SessionConfig) -> Result<TcpSession> {
        let channel = format!("session `{name}`");
        let addr = parse_addr(&channel, cfg, name)?;
        let deadline = Instant::now() + cfg.connect_timeout;
        let sock = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let attempt = TcpStream::connect_timeout(&addr, left.max(Duration::from_millis(1)));
            match attempt {
                Ok(s) => break s,
                Err(e) if Instant::now() < deadline && e.kind() == ErrorKind::ConnectionRefused => {
                    // Control plane: the acceptor has not started yet.
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => {
                    return Err(Error::NoPeer {
                        channel,
                        address: addr.to_string(),
                        reason: format!("{} (waited {} ms)", e, cfg.connect_timeout.as_millis()),
                    })
                }
            }
        };
        Self::establish(sock, name, channel, cfg, deadline)
    }

    fn establish(
        sock: TcpStream,
        name: &str,
        channel: String,
        cfg: &SessionConfig,
        deadline: Instant,
    ) -> Result<TcpSession> {
        let peer = sock
            .peer_addr()
            .map_err(|e| Error::io("query peer of", channel.clone(), e))?;
        let io = |op: &'static str| {
            let target = peer.to_string();
            move |e| Error::io(op, target, e)
        };
        sock.set_nodelay(true).map_err(io("configure"))?;
        let frame = HEADER_LEN + cfg.max_message;
        // Room for many frames each way; at least 64 KiB.
        let sbuf_len = (frame * cfg.capacity.min(1024)).max(64 << 10);
        let rbuf_len = (frame * 4).max(256 << 10);
        let mut s = TcpSession {
            sock,
            channel,
            peer,
            max_message: cfg.max_message,
            sbuf: vec![0u8; sbuf_len].into_boxed_slice(),
            s_start: 0,
            s_end: 0,
            claim_at: 0,
            next_seq: 1,
            claim_len: 0,
            rbuf: vec![0u8; rbuf_len].into_boxed_slice(),
            r_start: 0,
            r_end: 0,
            reader: FrameReader::new(cfg.max_message),
            scan_at: 0,
            peer_capacity: 0,
            broken: None,
            consumed: 0,
            credit_sent: 0,
            credit_every: (cfg.capacity as u64 / 2).max(1),
            peer_closed: false,
            eof: false,
            closed: false,
        };
        // Hello both ways, blocking with the remaining connect time.
        let hello = wire::hello(name, cfg.max_message as u32, cfg.capacity as u32);
        let mut out = vec![0u8; HEADER_LEN + hello.len()];
        Header {
            seq: 0,
            len: hello.len() as u32,
            flags: FLAG_HELLO,
            timestamp: 0,
        }
        .encode(&mut out);
        out[HEADER_LEN..].copy_from_slice(&hello);
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(100));
        s.sock
            .set_write_timeout(Some(left))
            .map_err(io("configure"))?;
        s.sock
            .set_read_timeout(Some(left))
            .map_err(io("configure"))?;
        s.sock.write_all(&out).map_err(|e| s.lost(&e))?;
        let mut head = [0u8; HEADER_LEN];
        s.sock.read_exact(&mut head).map_err(|e| s.lost(&e))?;
        let len = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes")) as usize;
        if len > 4096 {
            return Err(s.protocol(format!("a {len}-byte hello is not an mdbus hello")));
        }
        let mut body = vec![0u8; len];
        s.sock.read_exact(&mut body).map_err(|e| s.lost(&e))?;
        let flags = u32::from_le_bytes(head[12..16].try_into().expect("4 bytes"));
        match (flags & FLAG_HELLO != 0)
            .then(|| wire::parse_hello(&body))
            .flatten()
        {
            Some((peer_name, _, cap)) if peer_name == name && cap > 0 => {
                s.peer_capacity = cap as u64;
            }
            Some((peer_name, _, _)) => {
                return Err(s.protocol(format!("the peer is session `{peer_name}`, not `{name}`")))
            }
            None => return Err(s.protocol("the peer did not start with an mdbus hello".into())),
        }
        s.sock.set_nonblocking(true).map_err(io("configure"))?;
        Ok(s)
    }

    fn lost(&self, e: &std::io::Error) -> Error {
        Error::PeerLost {
            channel: self.channel.clone(),
            peer: self.peer.to_string(),
            reason: e.to_string(),
        }
    }

    /// Marks the session broken by `reason` and returns its error: every
    /// later call fails the same way, so no frame after a lie is trusted.
    #[cold]
    fn fail(&mut self, reason: String) -> Error {
        let e = self.protocol(reason.clone());
        self.broken = Some(reason);
        e
    }

    fn protocol(&self, reason: String) -> Error {
        Error::Protocol {
            channel: self.channel.clone(),
            peer: self.peer.to_string(),
            reason,
        }
    }

    /// Writes as much of the unsent bytes as the kernel takes.
    #[inline]
    fn flush(&mut self) -> Result<()> {
        while self.s_start < self.s_end {
            match self.sock.write(&self.sbuf[self.s_start..self.s_end]) {
                Ok(0) => {
                    return Err(self.lost(&std::io::Error::from(ErrorKind::WriteZero)));
                }
                Ok(n) => self.s_start += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(self.lost(&e)),
            }
        }
        self.s_start = 0;
        self.s_end = 0;
        Ok(())
    }

    /// Makes room for a frame of `frame` bytes at the end of the send
    /// buffer, flushing and compacting as needed.
    fn make_room(&mut self, frame: usize) -> bool {
        if self.s_end + frame <= self.sbuf.len() {
            return true;
        }
        if self.flush().is_err() {
            // Reported by the commit or poll that follows.
            return false;
        }
        if self.s_start > 0 {
            self.sbuf.copy_within(self.s_start..self.s_end, 0);
            self.s_end -= self.s_start;
            self.s_start = 0;
        }
        self.s_end + frame <= self.sbuf.len()
    }
}

impl TcpSession {
    /// Moves undelivered bytes to the front when the tail has no room for
    /// a whole frame.
    fn compact_rx(&mut self) {
        if self.r_start == self.r_end {
            self.r_start = 0;
            self.r_end = 0;
            self.scan_at = 0;
        } else if self.r_end + HEADER_LEN + self.max_message > self.rbuf.len() {
            self.rbuf.copy_within(self.r_start..self.r_end, 0);
            self.r_end -= self.r_start;
            self.scan_at = self.scan_at.saturating_sub(self.r_start);
            self.r_start = 0;
        }
    }

    /// Reads what has arrived, without reporting errors (the next poll
    /// does).
    fn receive(&mut self) -> std::io::Result<()> {
        if self.peer_closed || self.eof {
            return Ok(());
        }
        self.compact_rx();
        if self.r_end == self.rbuf.len() {
            // Full of frames nobody polled yet: a read into no room would
            // return 0, which is not the end of the stream.
            return Ok(());
        }
        match self.sock.read(&mut self.rbuf[self.r_end..]) {
            Ok(0) => self.eof = true,
            Ok(n) => self.r_end += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// Called by a sender out of credit: reads and applies credit frames
    /// that arrived, leaving data frames for `poll`. A lying frame marks
    /// the session broken; the next poll or liveness check reports it.
    #[cold]
    fn absorb_credits(&mut self) {
        if self.broken.is_some() || self.receive().is_err() {
            return;
        }
        let sent = self.next_seq - 1;
        let mut at = self.r_start.max(self.scan_at);
        loop {
            match self.reader.frame(&self.rbuf[at..self.r_end]) {
                Ok(None) => break,
                Ok(Some((frame, used))) => {
                    if let Frame::Credit(count) = frame {
                        if let Err(reason) = self.reader.accept_credit(count, sent) {
                            self.broken = Some(reason);
                            break;
                        }
                    }
                    at += used;
                }
                Err(reason) => {
                    self.broken = Some(reason);
                    break;
                }
            }
        }
        self.scan_at = at;
    }

    /// The error a broken session reports from now on.
    #[cold]
    fn broken_error(&self) -> Option<Error> {
        self.broken.as_ref().map(|r| self.protocol(r.clone()))
    }

    /// Tells the peer how many messages we consumed.
    fn send_credit(&mut self) -> Result<()> {
        if !self.make_room(HEADER_LEN) {
            // The send buffer is full of unsent data: the credit goes with
            // a later poll.
            return Ok(());
        }
        Header {
            seq: self.consumed,
            len: 0,
            flags: FLAG_CREDIT,
            timestamp: 0,
        }
        .encode(&mut self.sbuf[self.s_end..]);
        self.s_end += HEADER_LEN;
        self.credit_sent = self.consumed;
        self.flush()
    }
}

impl SessionEnd for TcpSession {
    fn max_message(&self) -> usize {
        self.max_message
    }

    #[inline]
    fn try_claim(&mut self, len: usize) -> Option<&mut [u8]> {
        if len > self.max_message {
            // The safe API's callers check first; this keeps the slice in
            // the frame even for those that do not.
            return None;
        }
        let sent = self.next_seq - 1;
        if self.reader.in_flight(sent) >= self.peer_capacity {
            self.absorb_credits();
            if self.broken.is_some() || self.reader.in_flight(sent) >= self.peer_capacity {
                return None;
            }
        }
        if !self.make_room(HEADER_LEN + len) {
            return None;
        }
        self.claim_at = self.s_end;
        self.claim_len = len;
        let start = self.claim_at + HEADER_LEN;
        Some(&mut self.sbuf[start..start + len])
    }

    #[inline]
    fn commit(&mut self, len: usize, flags: u32, timestamp: u64) -> Result<u64> {
        Error::check_fits(len, self.claim_len, &self.channel)?;
        let seq = self.next_seq;
        Header {
            seq,
            len: len as u32,
            flags,
            timestamp,
        }
        .encode(&mut self.sbuf[self.claim_at..]);
        self.s_end = self.claim_at + HEADER_LEN + len;
        self.claim_len = 0;
        self.next_seq += 1;
        self.flush()?;
        Ok(seq)
    }

    #[inline]
    fn poll<F: FnMut(Message<'_>)>(&mut self, max: usize, f: &mut F) -> Result<usize> {
        if let Some(e) = self.broken_error() {
            return Err(e);
        }
        if self.s_start < self.s_end {
            self.flush()?;
        }
        if let Err(e) = self.receive() {
            return Err(self.lost(&e));
        }
        let sent = self.next_seq - 1;
        let mut n = 0;
        while n < max {
            let (frame, used) = match self.reader.frame(&self.rbuf[self.r_start..self.r_end]) {
                Ok(Some(x)) => x,
                Ok(None) => break,
                Err(reason) => return Err(self.fail(reason)),
            };
            match frame {
                Frame::Close => {
                    self.peer_closed = true;
                    self.r_start = self.r_end;
                    break;
                }
                Frame::Credit(count) => {
                    // Frames before `scan_at` were applied by a sender
                    // looking for credit already.
                    if self.r_start >= self.scan_at {
                        if let Err(reason) = self.reader.accept_credit(count, sent) {
                            return Err(self.fail(reason));
                        }
                    }
                    self.r_start += used;
                }
                Frame::Data(h, payload) => {
                    if let Err(reason) = self.reader.accept_data(&h) {
                        return Err(self.fail(reason));
                    }
                    f(Message {
                        seq: h.seq,
                        flags: h.flags,
                        timestamp: h.timestamp,
                        payload,
                    });
                    self.r_start += used;
                    n += 1;
                }
            }
        }
        if n > 0 {
            self.consumed += n as u64;
            if self.consumed - self.credit_sent >= self.credit_every {
                self.send_credit()?;
            }
        }
        if n == 0 {
            if self.peer_closed {
                return Err(Error::PeerClosed {
                    channel: self.channel.clone(),
                });
            }
            if self.eof {
                let what = if self.r_start == self.r_end {
                    "connection closed without a close message"
                } else {
                    "connection closed in the middle of a message"
                };
                return Err(self.lost(&std::io::Error::new(ErrorKind::UnexpectedEof, what)));
            }
        }
        Ok(n)
    }

    fn check_peer(&mut self) -> Result<()> {
        if let Some(e) = self.broken_error() {
            return Err(e);
        }
        if self.peer_closed {
            return Err(Error::PeerClosed {
                channel: self.channel.clone(),
            });
        }
        // A broken connection shows up as an error on the next write.
        self.flush()
    }

    fn wait_for_data(&mut self, timeout: Duration) -> Result<bool> {
        use std::os::fd::AsRawFd;
        // Something for the next poll already: a whole frame buffered (the
        // last poll stopped at its batch), the end of the stream, a fault.
        let buffered = !matches!(
            self.reader.frame(&self.rbuf[self.r_start..self.r_end]),
            Ok(None)
        );
        if buffered || self.eof || self.peer_closed || self.broken.is_some() {
            return Ok(true);
        }
        // Bytes a full socket buffer held back are sent by the next poll
        // once the socket takes them: wake for that too.
        let mut events = libc::POLLIN;
        if self.s_start < self.s_end {
            events |= libc::POLLOUT;
        }
        crate::wait::poll_fd(self.sock.as_raw_fd(), events, timeout)
            .map_err(|e| Error::io("poll", &self.channel, e))
    }

    /// A TCP session has no timers of its own: the socket reports the
    /// peer's data, close and reset. So once a stop ends the block at once
    /// ([`stop_waits`](crate::wait::stop_waits)), adaptive waiting's block
    /// lasts up to [`LONG_BLOCK`](crate::wait::LONG_BLOCK) instead of
    /// `adaptive_max_block`.
    fn wait_idle(&mut self, timeout: Duration) -> Result<bool> {
        let timeout = if crate::wait::stop_wakes() {
            timeout.max(crate::wait::LONG_BLOCK)
        } else {
            timeout
        };
        self.wait_for_data(timeout)
    }

    fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        let mut frame = [0u8; HEADER_LEN];
        Header {
            seq: self.next_seq,
            len: 0,
            flags: FLAG_CLOSE,
            timestamp: 0,
        }
        .encode(&mut frame);
        // Best effort, bounded: the session is going away either way.
        let _ = self.sock.set_nonblocking(false);
        let _ = self
            .sock
            .set_write_timeout(Some(Duration::from_millis(200)));
        let _ = self.sock.write_all(&self.sbuf[self.s_start..self.s_end]);
        let _ = self.sock.write_all(&frame);
        let _ = self.sock.shutdown(std::net::Shutdown::Write);
    }
}

impl Drop for TcpSession {
    fn drop(&mut self) {
        self.close();
    }
}

/// What the next bytes of a TCP session's receive stream hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A message, with its payload.
    Data(Header, &'a [u8]),
    /// The peer has consumed this many of our messages.
    Credit(u64),
    /// The peer closed the session.
    Close,
}

/// The checks a TCP session applies to what its peer sends, apart from the
/// socket so that tests and the fuzz target can drive them with arbitrary
/// bytes. Everything here treats the peer as hostile: a frame that is not
/// well formed, a sequence that does not follow the last one, and a credit
/// for messages never sent or going backwards are errors (a sentence
/// saying what was wrong), never a wrap or a panic.
#[derive(Debug, Clone)]
pub struct FrameReader {
    max_message: usize,
    expect_seq: u64,
    /// Messages of ours the peer has consumed.
    acked: u64,
}

impl FrameReader {
    /// A reader for a session whose messages are at most `max_message`
    /// bytes, before the first frame.
    pub fn new(max_message: usize) -> FrameReader {
        FrameReader {
            max_message,
            expect_seq: 1,
            acked: 0,
        }
    }

    /// The next frame at the start of `buf` and the bytes it takes; `None`
    /// while it has not arrived whole. Checks the frame's form only (see
    /// [`FrameReader::accept_data`] and [`FrameReader::accept_credit`]).
    #[inline]
    pub fn frame<'a>(&self, buf: &'a [u8]) -> Result<Option<(Frame<'a>, usize)>, String> {
        let (h, payload) = match Header::decode(buf) {
            Ok(x) => x,
            Err(HeaderError::Short(_)) => return Ok(None),
            Err(HeaderError::LengthOverrun { claimed, .. })
                if claimed as usize <= self.max_message =>
            {
                return Ok(None)
            }
            Err(HeaderError::LengthOverrun { claimed, .. }) => {
                return Err(format!(
                    "a frame of {claimed} bytes, larger than max_message {}",
                    self.max_message
                ))
            }
            Err(e) => return Err(format!("a frame with {e}")),
        };
        let used = HEADER_LEN + h.len as usize;
        if h.flags & (FLAG_CLOSE | FLAG_CREDIT | FLAG_HELLO) == 0 {
            if h.len as usize > self.max_message {
                return Err(format!(
                    "a frame of {} bytes, larger than max_message {}",
                    h.len, self.max_message
                ));
            }
            return Ok(Some((Frame::Data(h, payload), used)));
        }
        if h.flags & FLAG_HELLO != 0 {
            return Err("a second hello in the middle of the session".into());
        }
        if h.len != 0 {
            return Err(format!(
                "a {} frame with {} payload bytes, where none belong",
                if h.flags & FLAG_CLOSE != 0 {
                    "close"
                } else {
                    "credit"
                },
                h.len
            ));
        }
        if h.flags & FLAG_CLOSE != 0 {
            return Ok(Some((Frame::Close, used)));
        }
        Ok(Some((Frame::Credit(h.seq), used)))
    }

    /// Accepts a data frame when it carries the next sequence.
    #[inline]
    pub fn accept_data(&mut self, h: &Header) -> Result<(), String> {
        if h.seq != self.expect_seq {
            let how = if h.seq < self.expect_seq {
                "goes backwards"
            } else {
                "skips ahead"
            };
            return Err(format!(
                "frame with sequence {} and length {}, expected sequence {}: the sequence {how}",
                h.seq, h.len, self.expect_seq
            ));
        }
        self.expect_seq += 1;
        Ok(())
    }

    /// Accepts a credit frame saying the peer consumed `count` of the
    /// `sent` messages we sent: it must not exceed them, nor go back.
    #[inline]
    pub fn accept_credit(&mut self, count: u64, sent: u64) -> Result<(), String> {
        if count > sent {
            return Err(format!(
                "a credit for {count} consumed messages, but only {sent} were sent"
            ));
        }
        if count < self.acked {
            return Err(format!(
                "a credit for {count} consumed messages after one for {}: credits never go back",
                self.acked
            ));
        }
        self.acked = count;
        Ok(())
    }

    /// Our messages the peer has not consumed, of the `sent` ones.
    #[inline]
    pub fn in_flight(&self, sent: u64) -> u64 {
        // `accept_credit` keeps `acked <= sent`; saturating all the same.
        sent.saturating_sub(self.acked)
    }

    /// The sequence the next data frame must carry.
    pub fn expected_seq(&self) -> u64 {
        self.expect_seq
    }
}
