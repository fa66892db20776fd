//! Where a run's channels live on the IP transport: the multicast group of
//! a UDP stream and the interface it is sent and joined on, the address of
//! a TCP session.
//!
//! Each setting comes from the command line if given there, else from the
//! channel's entry in --config, else from a default that works on one host:
//! loopback, group 239.255.77.1, and a port that is free when this process
//! starts its own peer (so runs side by side never meet) or 47100 with
//! --role (so two sides started by hand agree).

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, UdpSocket};

use mdbus::config::{SessionConfig, StreamConfig, VerbsConfig};
use mdbus::TransportKind;

use crate::common::{Common, Failure};

/// Multicast group of the default stream.
pub const DEFAULT_GROUP: Ipv4Addr = Ipv4Addr::new(239, 255, 77, 1);
/// Port of the default group and address when the two sides are started
/// by hand.
pub const DEFAULT_PORT: u16 = 47100;
/// Interface used when neither the command line nor the file names one.
pub const DEFAULT_INTERFACE: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// Whether `kind` is the IP transport (one transport under two names).
pub fn is_ip(kind: TransportKind) -> bool {
    matches!(kind, TransportKind::Udp | TransportKind::Tcp)
}

/// Whether `kind` places its channels at IP addresses and ports (the IP
/// transport, and verbs through rdma_cm).
pub fn has_ports(kind: TransportKind) -> bool {
    is_ip(kind) || kind == TransportKind::Verbs
}

/// For a run that starts its own peer: a port that nothing on this host
/// uses right now, for the default group or address, so that runs side by
/// side do not share one. Returns `None` on shared memory, which has no
/// ports.
pub fn pick_default_port(common: &Common) -> Result<Option<u16>, Failure> {
    if !has_ports(common.transport) || common.default_port.is_some() {
        return Ok(common.default_port);
    }
    let any = (Ipv4Addr::LOCALHOST, 0);
    // rdma_cm has port spaces of its own; a port free for TCP here is a
    // good guess that nothing else of this host's uses it there either.
    let port = if common.transport != TransportKind::Udp {
        TcpListener::bind(any).and_then(|l| l.local_addr())
    } else {
        UdpSocket::bind(any).and_then(|s| s.local_addr())
    };
    match port {
        // Ports above 65000 leave room for a second stream's port + 1.
        Ok(a) if a.port() < 65_000 => Ok(Some(a.port())),
        Ok(_) => Ok(Some(DEFAULT_PORT)),
        Err(e) => Err(Failure::Run(format!(
            "cannot find a free port on the loopback: {e}"
        ))),
    }
}

fn port(common: &Common, offset: u16) -> Result<u16, Failure> {
    common
        .default_port
        .unwrap_or(DEFAULT_PORT)
        .checked_add(offset)
        .ok_or_else(|| Failure::Usage("the default port is too high".into()))
}

/// Sets up stream `s` (from the file or the defaults) for this run on UDP
/// or verbs: its group `offset` ports above the base, and on UDP its
/// interface and time-to-live 0 on the loopback (the datagrams never leave
/// the host). Verbs interfaces come from [`crate::verbs::stream_interface`].
pub fn stream(common: &Common, s: &mut StreamConfig, offset: u16) -> Result<(), Failure> {
    if !has_ports(common.transport) {
        return Ok(());
    }
    if let Some(g) = common.group.filter(|g| g.port() == 0) {
        s.group = SocketAddrV4::new(*g.ip(), port(common, offset)?).to_string();
    } else if let Some(g) = common.group {
        let port = g.port().checked_add(offset).ok_or_else(|| {
            Failure::Usage(format!(
                "--group {g}: this run needs ports up to {} + {offset}",
                g.port()
            ))
        })?;
        s.group = SocketAddrV4::new(*g.ip(), port).to_string();
    } else if s.group.is_empty() {
        s.group = SocketAddrV4::new(DEFAULT_GROUP, port(common, offset)?).to_string();
    }
    if !is_ip(common.transport) {
        return Ok(());
    }
    if let Some(i) = common.interface {
        s.interface = i.to_string();
    } else if s.interface.is_empty() {
        s.interface = DEFAULT_INTERFACE.to_string();
    }
    if s.interface
        .parse::<Ipv4Addr>()
        .is_ok_and(|i| i.is_loopback())
    {
        s.ttl = 0;
    }
    Ok(())
}

/// Sets up session `s` for this run on TCP or verbs: its address.
pub fn session(common: &Common, v: &VerbsConfig, s: &mut SessionConfig) -> Result<(), Failure> {
    if common.transport == TransportKind::Verbs {
        return crate::verbs::session(common, v, s, port(common, 0)?);
    }
    if !is_ip(common.transport) {
        return Ok(());
    }
    if let Some(a) = common.address {
        s.address = a.to_string();
    } else if s.address.is_empty() {
        let host = common.interface.unwrap_or(DEFAULT_INTERFACE);
        s.address = SocketAddrV4::new(host, port(common, 0)?).to_string();
    }
    Ok(())
}

/// Where a stream or session of this run goes, for the table heading.
pub fn describe_stream(s: &StreamConfig) -> String {
    format!("group {} on {}", s.group, s.interface)
}
