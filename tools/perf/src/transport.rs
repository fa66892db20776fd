//! Which transports this build measures, and the bus each run uses.
//!
//! Adding a transport: list it in `MEASURABLE`, and give [`bus`] whatever
//! it needs beyond the shared settings (addresses, a device). The commands
//! only ever see an [`mdbus::Bus`], so little else changes: `verbs` takes
//! its device options (the `verbs` table of the configuration) here, and
//! its addresses from [`crate::verbs`].

use std::net::{IpAddr, UdpSocket};
use std::time::Duration;

use mdbus::{Config, TransportKind};

use crate::common::{Common, Failure};

/// The transports mdbus-perf can run in this build.
const MEASURABLE: &[TransportKind] = &[
    TransportKind::Shm,
    TransportKind::Udp,
    TransportKind::Tcp,
    TransportKind::Verbs,
];

/// Fails unless this build can measure `kind`.
pub fn check(kind: TransportKind) -> Result<(), Failure> {
    if MEASURABLE.contains(&kind) {
        Ok(())
    } else {
        Err(Failure::Unavailable(format!(
            "transport {} is not available in this build",
            kind.name()
        )))
    }
}

/// Sets `common.transport` from --transport: as given; `auto` as the
/// library decides it (verbs when an RDMA device has an active port, else
/// `one_host`: shm, or udp for mcast); without --transport, verbs when
/// -d/--device or -x/--gid-index names an RDMA device or GID (perftest's
/// meaning), else `one_host`. First thing each command does.
pub fn resolve(common: &mut Common, one_host: TransportKind) -> Result<(), Failure> {
    common.transport = match common.transport_arg {
        Some(TransportKind::Auto) => auto(common, one_host)?,
        Some(kind) => kind,
        None if common.device.is_some() || common.gid_index.is_some() => TransportKind::Verbs,
        None => one_host,
    };
    Ok(())
}

/// The library's `transport = "auto"` (see [`mdbus::Bus::new`]), read
/// off a bus built with the run's configuration and devices but no
/// channels: verbs, or `one_host` where the library would take shared
/// memory.
fn auto(common: &Common, one_host: TransportKind) -> Result<TransportKind, Failure> {
    let mut cfg = load(common)?;
    crate::verbs::configure(common, &mut cfg.verbs);
    cfg.transport = TransportKind::Auto;
    cfg.streams.clear();
    cfg.sessions.clear();
    cfg.service.thread = false;
    let chosen = match mdbus::Bus::new(cfg)?.transport() {
        TransportKind::Verbs => TransportKind::Verbs,
        _ => one_host,
    };
    log::info!("--transport auto: measuring {}", chosen.name());
    Ok(chosen)
}

/// Fails unless this build can measure the run's transport, the
/// interfaces named are this host's (and --address too when a session's
/// acceptor runs on this host: `accepts_here`) and, for verbs, this
/// machine has the device: before anything else of the run (core
/// placement included), so a refusal is the one line that says why.
pub fn ready(common: &Common, accepts_here: bool) -> Result<(), Failure> {
    check(common.transport)?;
    crate::verbs::check_options(common)?;
    if common.transport == TransportKind::Verbs {
        // First: without a device, nothing else about the run matters.
        let mut cfg = load(common)?;
        crate::verbs::configure(common, &mut cfg.verbs);
        available(&cfg)?;
    }
    if !crate::ip::has_ports(common.transport) {
        let given = [
            ("--group", common.group.is_some()),
            ("--interface", common.interface.is_some()),
            ("--address", common.address.is_some()),
        ];
        if let Some((flag, _)) = given.iter().find(|(_, set)| *set) {
            return Err(Failure::Usage(format!(
                "{flag} applies to --transport udp, tcp and verbs, not {}",
                common.transport.name()
            )));
        }
    } else {
        for (flag, addr) in [
            ("--interface", common.interface),
            ("--recv-interface", common.recv_interface),
        ] {
            if let Some(addr) = addr {
                local_address(flag, IpAddr::V4(addr))?;
            }
        }
        if let (true, Some(address)) = (accepts_here, common.address) {
            local_address("--address", address.ip())?;
        }
    }
    Ok(())
}

/// Fails unless `addr` is an address of one of this host's interfaces
/// (the run binds it).
fn local_address(flag: &str, addr: IpAddr) -> Result<(), Failure> {
    match UdpSocket::bind((addr, 0)) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AddrNotAvailable => Err(Failure::Usage(format!(
            "{flag} {addr} is not an address of this host's interfaces"
        ))),
        Err(e) => Err(Failure::Usage(format!(
            "{flag} {addr} cannot be bound: {e}"
        ))),
    }
}

fn load(common: &Common) -> Result<Config, Failure> {
    match &common.config {
        Some(path) => Config::from_file(path).map_err(|e| Failure::Usage(e.to_string())),
        None => Ok(Config::default()),
    }
}

/// The library's sentence when verbs has no active port here.
fn available(cfg: &Config) -> Result<(), Failure> {
    mdbus::transport::verbs::detect(&cfg.verbs)
        .map(|_| ())
        .map_err(|reason| {
            mdbus::Error::TransportUnavailable {
                transport: "verbs",
                reason,
            }
            .into()
        })
}

/// Builds the bus for a run: the configuration file (if any), with the
/// transport, timeouts and channels of this run set over it.
pub fn bus(common: &Common, channels: impl FnOnce(&mut Config)) -> Result<mdbus::Bus, Failure> {
    check(common.transport)?;
    let mut cfg = load(common)?;
    cfg.transport = common.transport;
    cfg.shm.attach_timeout = Duration::from_secs(common.timeout);
    cfg.threads.wait = common.wait;
    crate::verbs::check_options(common)?;
    if common.transport == TransportKind::Verbs {
        crate::verbs::configure(common, &mut cfg.verbs);
        // Before the channels: their addresses come from the device, and
        // a machine without one gets the library's sentence, not a lookup
        // failure.
        available(&cfg)?;
    }
    channels(&mut cfg);
    match mdbus::Bus::new(cfg) {
        Ok(bus) => Ok(bus),
        Err(mdbus::Error::Config(e)) => Err(Failure::Usage(e.to_string())),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn only_measurable_transports_pass_the_check() {
        for kind in [
            TransportKind::Shm,
            TransportKind::Udp,
            TransportKind::Tcp,
            TransportKind::Verbs,
        ] {
            assert!(check(kind).is_ok(), "{}", kind.name());
        }
        // `auto` is resolved before the check.
        assert!(check(TransportKind::Auto).is_err());
    }

    #[test]
    fn an_address_this_host_lacks_is_a_usage_error() {
        assert!(local_address("--interface", Ipv4Addr::LOCALHOST.into()).is_ok());
        // TEST-NET-3 (RFC 5737): never an address of this host.
        let err = local_address("--interface", Ipv4Addr::new(203, 0, 113, 7).into()).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert_eq!(
            err.to_string(),
            "--interface 203.0.113.7 is not an address of this host's interfaces"
        );
    }
}
