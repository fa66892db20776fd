//! Stable metric names for the counters, and the OpenMetrics text format.
//!
//! A counters-file label `SCOPE.NAME.COUNTER` becomes the family
//! `mdbus_<SCOPE'>_<COUNTER>` with NAME as a label:
//!
//! | scope | family prefix | label |
//! | --- | --- | --- |
//! | `pub` | `mdbus_publisher_` | `stream` |
//! | `sub` | `mdbus_subscriber_` | `stream` |
//! | `sess` | `mdbus_session_` | `session` |
//! | `stream` (mdbus-relay) | `mdbus_stream_` | `stream` |
//! | `rec` (an archive recorder) | `mdbus_recorder_` | `stream` |
//! | `replay` (an archive replay service) | `mdbus_replay_service_` | `stream` |
//! | `bus` | `mdbus_bus_` | (none: the owner is `bus`) |
//! | `wc` | `mdbus_wc_` | `status` (work completion status) |
//! | `port` | `mdbus_port_` | `device`, `port` |
//! | `qp` | `mdbus_qp_` | `device`, `qp`, `queue` (send, receive), `status` |
//! | `cq` | `mdbus_cq_` | `device` |
//! | other | `mdbus_<scope>_` | `name` |
//!
//! A second handle of one channel in a process (`sub.md#2`) adds
//! `instance="2"`. A label without a dot (mdbus-relay's own counters,
//! `packets`) is `mdbus_<label>`. Every sample also carries `bus` (the
//! owner's name) and `pid`. Counters are exposed as `<family>_total`,
//! gauges as `<family>`; the RDMA port counters from sysfs as
//! `mdbus_rdma_port_<name>_total{device,port}` (hw_counters as
//! `mdbus_rdma_port_hw_<name>_total`), the kernel's figures of each
//! bus's UDP sockets as `mdbus_udp_socket_drops_total{local}` and
//! `mdbus_udp_socket_rx_queue_bytes{local}`, and each bus's liveness as
//! `mdbus_bus_up`.

use std::collections::BTreeMap;
use std::fmt::Write;

use mdbus::counters::Kind;

use crate::snapshot::Bus;
use crate::sysfs::Port;

/// A metric family and the labels a counter adds to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    /// The family name (without `_total`).
    pub family: String,
    /// Labels from the counter's label (`stream`, `instance`...).
    pub labels: Vec<(&'static str, String)>,
}

/// `s` with every character outside `[a-z0-9_]` made `_`, lower-case.
fn metric_part(s: &str) -> String {
    s.chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The family and labels of counters-file label `label`.
pub fn name_of(label: &str) -> Named {
    let (Some((scope, rest)), Some((_, counter))) = (label.split_once('.'), label.rsplit_once('.'))
    else {
        return Named {
            family: format!("mdbus_{}", metric_part(label)),
            labels: Vec::new(),
        };
    };
    let name = &rest[..rest.len() - counter.len() - 1];
    let (name, instance) = match name.rsplit_once('#') {
        Some((n, i)) => (n, Some(i)),
        None => (name, None),
    };
    let (prefix, key): (String, Option<&'static str>) = match scope {
        "pub" => ("publisher".into(), Some("stream")),
        "sub" => ("subscriber".into(), Some("stream")),
        "sess" => ("session".into(), Some("session")),
        "stream" => ("stream".into(), Some("stream")),
        "rec" => ("recorder".into(), Some("stream")),
        "replay" => ("replay_service".into(), Some("stream")),
        "bus" => ("bus".into(), None),
        "wc" => ("wc".into(), Some("status")),
        "port" => ("port".into(), None),
        "qp" => ("qp".into(), None),
        "cq" => ("cq".into(), Some("device")),
        other => (metric_part(other), Some("name")),
    };
    let mut labels = Vec::new();
    if scope == "port" {
        let (dev, port) = name.split_once('/').unwrap_or((name, ""));
        labels.push(("device", dev.to_string()));
        labels.push(("port", port.to_string()));
    } else if scope == "qp" {
        // DEVICE/QPN/QUEUE/STATUS (mdbus::counters::registry::note_qp_completion_error).
        let mut parts = name.splitn(4, '/');
        for k in ["device", "qp", "queue", "status"] {
            labels.push((k, parts.next().unwrap_or("").to_string()));
        }
    } else if let Some(k) = key {
        labels.push((k, name.to_string()));
    }
    if let Some(i) = instance {
        labels.push(("instance", i.to_string()));
    }
    Named {
        family: format!("mdbus_{prefix}_{}", metric_part(counter)),
        labels,
    }
}

/// A label value escaped for the exposition format.
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// One family's samples: labels rendered, value.
struct Family {
    kind: Kind,
    help: &'static str,
    samples: Vec<(String, u64)>,
}

fn labels_text(labels: &[(&str, String)]) -> String {
    let inner: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// Every family and sample of `buses` and `ports`.
fn families(buses: &[Bus], ports: &[Port]) -> BTreeMap<String, Family> {
    let mut fams: BTreeMap<String, Family> = BTreeMap::new();
    let mut add = |family: String, kind: Kind, help: &'static str, labels: String, v: u64| {
        let f = fams.entry(family).or_insert(Family {
            kind,
            help,
            samples: Vec::new(),
        });
        // One family, one type: a sample of the other kind (two owners
        // disagreeing about a name) is left out rather than mislabelled.
        if f.kind == kind {
            f.samples.push((labels, v));
        }
    };
    for b in buses {
        let base = vec![("bus", b.name.clone()), ("pid", b.pid.to_string())];
        add(
            "mdbus_bus_up".into(),
            Kind::Gauge,
            "1 while the bus's process runs, 0 for a stale counters file",
            labels_text(&base),
            u64::from(b.alive),
        );
        for c in &b.counters {
            let n = name_of(&c.label);
            let mut labels = base.clone();
            labels.extend(n.labels);
            add(
                n.family,
                c.kind,
                "an mdbus counter (see docs/OPERATIONS.md)",
                labels_text(&labels),
                c.value,
            );
        }
        for u in &b.udp {
            let mut labels = base.clone();
            labels.push(("local", u.local.clone()));
            let labels = labels_text(&labels);
            add(
                "mdbus_udp_socket_drops".into(),
                Kind::Counter,
                "datagrams the kernel dropped at a bus's UDP socket (receive buffer full)",
                labels.clone(),
                u.drops,
            );
            add(
                "mdbus_udp_socket_rx_queue_bytes".into(),
                Kind::Gauge,
                "bytes waiting in a bus's UDP socket's receive buffer",
                labels,
                u.rx_queue_bytes,
            );
        }
    }
    for p in ports {
        let labels = labels_text(&[("device", p.device.clone()), ("port", p.port.to_string())]);
        for (name, v) in &p.counters {
            let kind = if Port::is_gauge(name) {
                Kind::Gauge
            } else {
                Kind::Counter
            };
            add(
                format!("mdbus_rdma_port_{}", metric_part(name)),
                kind,
                "an RDMA port counter from sysfs",
                labels.clone(),
                *v,
            );
        }
    }
    fams
}

/// The OpenMetrics text exposition of `buses` and `ports`, ending in
/// `# EOF`.
pub fn openmetrics(buses: &[Bus], ports: &[Port]) -> String {
    let mut out = String::new();
    for (name, f) in families(buses, ports) {
        let (kind, suffix) = match f.kind {
            Kind::Counter => ("counter", "_total"),
            Kind::Gauge => ("gauge", ""),
        };
        // Writing to a String cannot fail.
        let _ = writeln!(out, "# TYPE {name} {kind}");
        let _ = writeln!(out, "# HELP {name} {}", f.help);
        for (labels, v) in &f.samples {
            let _ = writeln!(out, "{name}{suffix}{labels} {v}");
        }
    }
    out.push_str("# EOF\n");
    out
}

/// The sample names (`mdbus_subscriber_messages_total`, `mdbus_bus_up`)
/// of an exposition, for checking dashboards against it.
pub fn sample_names(exposition: &str) -> std::collections::BTreeSet<String> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_map_to_families_and_labels() {
        let n = name_of("sub.md.nasdaq#2.messages");
        assert_eq!(n.family, "mdbus_subscriber_messages");
        assert_eq!(
            n.labels,
            [
                ("stream", "md.nasdaq".to_string()),
                ("instance", "2".into())
            ]
        );
        let n = name_of("replay.md.messages");
        assert_eq!(n.family, "mdbus_replay_service_messages");
        assert_eq!(n.labels, [("stream", "md".to_string())]);
        let n = name_of("rec.md.last_seq");
        assert_eq!(n.family, "mdbus_recorder_last_seq");
        let n = name_of("port.mlx5_0/1.open");
        assert_eq!(n.family, "mdbus_port_open");
        assert_eq!(
            n.labels,
            [("device", "mlx5_0".to_string()), ("port", "1".into())]
        );
        assert_eq!(name_of("bus.relay.errors").family, "mdbus_bus_errors");
        assert!(name_of("bus.relay.errors").labels.is_empty());
        assert_eq!(name_of("packets").family, "mdbus_packets");
        assert_eq!(
            name_of("wc.12.completion_errors").labels,
            [("status", "12".to_string())]
        );
        assert_eq!(name_of("odd-Scope.x.y").family, "mdbus_odd_scope_y");
        let n = name_of("qp.rxe0/0x11/send/retry_exc_err.completion_errors");
        assert_eq!(n.family, "mdbus_qp_completion_errors");
        assert_eq!(
            n.labels,
            [
                ("device", "rxe0".to_string()),
                ("qp", "0x11".into()),
                ("queue", "send".into()),
                ("status", "retry_exc_err".into())
            ]
        );
        let n = name_of("cq.mlx5_0.overflows");
        assert_eq!(n.family, "mdbus_cq_overflows");
        assert_eq!(n.labels, [("device", "mlx5_0".to_string())]);
    }

    #[test]
    fn escapes_label_values() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
