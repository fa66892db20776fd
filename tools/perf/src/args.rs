//! Parsers of the options every command shares (`--transport`,
//! `--group`), apart from the modules that use the parsed values, so that
//! `common` (which declares the options) imports none of them.

use std::net::{Ipv4Addr, SocketAddrV4};

use mdbus::TransportKind;

/// Every transport name the command line accepts.
const ALL: [TransportKind; 5] = [
    TransportKind::Shm,
    TransportKind::Udp,
    TransportKind::Tcp,
    TransportKind::Verbs,
    TransportKind::Auto,
];

/// Parses `--transport`: any transport name, so that one this build lacks
/// gets its own error rather than a usage message.
pub fn parse_transport(text: &str) -> Result<TransportKind, String> {
    ALL.into_iter()
        .find(|t| t.name() == text)
        .ok_or_else(|| format!("expected one of {}", names(&ALL)))
}

fn names(kinds: &[TransportKind]) -> String {
    kinds
        .iter()
        .map(|t| t.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Parses `--group`: an IPv4 multicast group and a port, or a group alone
/// (port 0: the run's default port).
pub fn parse_group(text: &str) -> Result<SocketAddrV4, String> {
    let parsed = text
        .parse::<SocketAddrV4>()
        .or_else(|_| text.parse::<Ipv4Addr>().map(|ip| SocketAddrV4::new(ip, 0)));
    match parsed {
        Ok(a) if a.ip().is_multicast() => Ok(a),
        _ => Err(
            "expected an IPv4 multicast group, with or without a port, such as 239.1.1.1:5000"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_and_unknown_names_list_them() {
        for kind in ALL {
            assert_eq!(parse_transport(kind.name()), Ok(kind));
        }
        let err = parse_transport("rdma").unwrap_err();
        assert!(err.contains("shm, udp, tcp, verbs, auto"), "{err}");
    }

    #[test]
    fn groups_must_be_multicast() {
        assert_eq!(
            parse_group("239.1.2.3:5000"),
            Ok(SocketAddrV4::new(Ipv4Addr::new(239, 1, 2, 3), 5000))
        );
        assert!(parse_group("10.0.0.1:5000").is_err());
        assert!(parse_group("10.0.0.1").is_err());
        assert_eq!(
            parse_group("239.1.2.3"),
            Ok(SocketAddrV4::new(Ipv4Addr::new(239, 1, 2, 3), 0))
        );
    }
}
