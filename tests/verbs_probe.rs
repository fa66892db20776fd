//! Device detection and the verbs transport's choice, on whatever machine
//! runs the tests: without RDMA (the usual build host) the probe must say
//! "no device" cleanly and `transport = "verbs"` must fail with one clear
//! sentence, while `auto` falls back to shared memory; with RDMA (the
//! Soft-RoCE lane) both must pick the device.

use mdbus::config::VerbsConfig;
use mdbus::transport::verbs;
use mdbus::{Bus, Config, Error, TransportKind};

fn config(transport: &str) -> Config {
    Config::from_toml_str(&format!("transport = \"{transport}\"\n"), "<test>").unwrap()
}

#[test]
fn verbs_transport_is_chosen_only_with_an_active_port() {
    match verbs::detect(&VerbsConfig::default()) {
        Err(why) => {
            assert!(
                why.starts_with(
                    "no RDMA device with an active port (looked in libibverbs device list: "
                ),
                "{why}"
            );
            assert!(why.ends_with("load rdma_rxe or install a NIC)"), "{why}");
            let err = Bus::new(config("verbs")).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::TransportUnavailable {
                        transport: "verbs",
                        ..
                    }
                ),
                "{err}"
            );
            assert_eq!(
                err.to_string(),
                format!("transport verbs is not available: {why}")
            );
            assert!(!err.to_string().contains('\n'), "one line: {err}");
            let auto = Bus::new(config("auto")).unwrap();
            assert_eq!(auto.transport(), TransportKind::Shm);
            if std::env::var("MDBUS_REQUIRE_RDMA").as_deref() == Ok("1") {
                panic!("MDBUS_REQUIRE_RDMA=1, but {why}");
            }
        }
        Ok(port) => {
            assert!(port.active_mtu >= 256, "{port:?}");
            let bus = Bus::new(config("verbs")).unwrap();
            assert_eq!(bus.transport(), TransportKind::Verbs);
            assert_eq!(
                Bus::new(config("auto")).unwrap().transport(),
                TransportKind::Verbs
            );
            // A stream needs a multicast group on this transport.
            let err = bus.publisher("s").unwrap_err();
            assert_eq!(
                err.to_string(),
                "stream `s`: streams.s.group must be set for transport verbs"
            );
            // A session needs an address on this transport.
            let err = bus.session_connect("o").unwrap_err();
            assert_eq!(
                err.to_string(),
                "session `o`: sessions.o.address must be set for transport verbs"
            );
        }
    }
}

#[test]
fn the_probe_lists_devices_or_says_why_there_are_none() {
    match verbs::probe() {
        Ok(devices) => {
            for d in &devices {
                assert!(!d.name.is_empty());
                for p in &d.ports {
                    assert!(p.port >= 1);
                    assert_eq!(p.active, p.state == "ACTIVE", "{p:?}");
                }
            }
        }
        Err(why) => assert!(
            why.contains("ibv_get_device_list") || why.contains("libibverbs.so.1"),
            "{why}"
        ),
    }
}

#[test]
fn a_named_device_that_is_absent_is_reported_by_name() {
    let cfg = VerbsConfig {
        device: "nosuch9".into(),
        ..VerbsConfig::default()
    };
    let why = verbs::detect(&cfg).unwrap_err();
    assert!(
        why.starts_with(
            "RDMA device nosuch9 has no active port 1 (looked in libibverbs device list: "
        ) || why.starts_with("no RDMA device with an active port"),
        "{why}"
    );
}

#[test]
fn numa_node_of_an_absent_device_is_none() {
    assert_eq!(verbs::numa_node("nosuch9"), None);
}
