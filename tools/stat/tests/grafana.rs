//! The Grafana dashboard (monitoring/grafana/mdbus.json) queries only
//! metrics mdbus-stat's exporter emits: every `mdbus_*` name in a panel's
//! PromQL or a variable's query is among the samples of an exposition
//! made from a real bus (publisher, subscriber, session, a failed work
//! completion), mdbus-relay's counters, a recorder's lag gauge and an
//! RDMA port of a fake sysfs tree.

use std::collections::BTreeSet;
use std::path::PathBuf;

use mdbus::counters::{CountersFile, Kind};
use mdbus_stat::snapshot::{counters_files, Sampler};

const DASHBOARD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../monitoring/grafana/mdbus.json"
);

/// Every PromQL string of the dashboard: panel targets and variables.
fn queries(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("expr", serde_json::Value::String(s)) => out.push(s.clone()),
                    ("query", serde_json::Value::String(s)) if s.contains("mdbus_") => {
                        out.push(s.clone())
                    }
                    _ => queries(x, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| queries(x, out)),
        _ => {}
    }
}

/// The `mdbus_*` metric names a query uses.
fn metric_names(q: &str) -> Vec<String> {
    let re = regex::Regex::new(r"\bmdbus_[a-z0-9_]+").unwrap();
    re.find_iter(q).map(|m| m.as_str().to_string()).collect()
}

/// The sample names of an exposition of every kind of counters file.
fn emitted() -> BTreeSet<String> {
    let dir = std::env::temp_dir().join(format!("mdbus-stat-grafana-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let counters = dir.join("counters");
    let cfg = mdbus::Config::from_toml_str(
        &format!(
            "transport = \"shm\"\n[shm]\ndir = \"{}\"\nprefix = \"grafana\"\n\
             [counters]\ndir = \"{}\"\nname = \"grafana\"\n",
            dir.display(),
            counters.display()
        ),
        "<test>",
    )
    .unwrap();
    let bus = mdbus::Bus::new(cfg).unwrap();
    let _p = bus.publisher("md").unwrap();
    let _s = bus.subscriber("md").unwrap();
    let acceptor = std::thread::spawn({
        let bus = bus.clone();
        move || bus.session_accept("orders").unwrap()
    });
    let _client = bus.session_connect("orders").unwrap();
    let _server = acceptor.join().unwrap();
    mdbus::counters::registry::note_completion_error(12, "a test completion error");
    mdbus::counters::registry::note_qp_completion_error(
        "rxe9",
        0x11,
        mdbus::counters::registry::WcQueue::Send,
        12,
        "a test completion error of a QP",
    );
    mdbus::counters::registry::note_cq_overflow("rxe9", "a test CQ error");
    bus.counters().unwrap().note_port("rxe9", 1);

    // mdbus-relay's own file, and a recorder's lag gauges.
    let names = vec!["s1".to_string()];
    let relay_labels = mdbus_relay::stats::labels(&names);
    let refs: Vec<&str> = relay_labels.iter().map(String::as_str).collect();
    let _relay =
        CountersFile::create(counters.join("relay.counters"), "mdbus-relay", &refs).unwrap();
    let rec = CountersFile::with_capacity(counters.join("rec.counters"), "recorder", 2, 0).unwrap();
    rec.allocate(&[
        ("rec.md.lag_messages", Kind::Gauge),
        ("rec.md.lag_ns", Kind::Gauge),
    ])
    .unwrap();

    // The RDMA port the bus uses, in a fake sysfs tree.
    let port = dir.join("sys/class/infiniband/rxe9/ports/1");
    std::fs::create_dir_all(port.join("counters")).unwrap();
    std::fs::create_dir_all(port.join("hw_counters")).unwrap();
    for c in ["port_rcv_errors", "port_xmit_discards", "link_downed"] {
        std::fs::write(port.join("counters").join(c), "0\n").unwrap();
    }
    std::fs::write(port.join("hw_counters/rnr_nak_retry_err"), "0\n").unwrap();

    // One UDP socket of this process, in a fake /proc.
    let me = dir.join("proc").join(std::process::id().to_string());
    std::fs::create_dir_all(me.join("fd")).unwrap();
    std::fs::create_dir_all(me.join("net")).unwrap();
    std::os::unix::fs::symlink("socket:[9]", me.join("fd/3")).unwrap();
    std::fs::write(
        me.join("net/udp"),
        "sl local rem st q q tr tm uid timeout inode ref pointer drops\n\
         1: 0100007F:1F90 00000000:0000 07 00000000:00000000 00:00000000 00000000 0 0 9 2 0 1\n",
    )
    .unwrap();

    let mut sampler = Sampler::new();
    let buses: Vec<_> = counters_files(&[counters])
        .iter()
        .map(|p| {
            let mut b = sampler.sample(p).unwrap();
            b.read_udp(&dir.join("proc"));
            b
        })
        .collect();
    let ports: Vec<_> = mdbus_stat::snapshot::ports_in_use(&buses)
        .into_iter()
        .map(|(d, p)| mdbus_stat::sysfs::read_port(&dir.join("sys"), &d, p).unwrap())
        .collect();
    assert_eq!(ports.len(), 1, "the bus names its RDMA port");
    let text = mdbus_stat::metrics::openmetrics(&buses, &ports);
    drop((bus, rec));
    std::fs::remove_dir_all(&dir).ok();
    mdbus_stat::metrics::sample_names(&text)
}

#[test]
fn every_dashboard_query_names_an_emitted_metric() {
    let text = std::fs::read_to_string(PathBuf::from(DASHBOARD)).unwrap();
    let dash: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut qs = Vec::new();
    queries(&dash, &mut qs);
    assert!(qs.len() >= 20, "the dashboard's queries: {qs:?}");
    let emitted = emitted();
    let mut unknown = Vec::new();
    let mut used = BTreeSet::new();
    for q in &qs {
        let names = metric_names(q);
        assert!(!names.is_empty(), "a query without an mdbus metric: {q}");
        for n in names {
            if !emitted.contains(&n) {
                unknown.push(format!("{n} (in {q})"));
            }
            used.insert(n);
        }
    }
    assert!(
        unknown.is_empty(),
        "not emitted: {unknown:#?}\nemitted: {emitted:#?}"
    );
    // The panels the dashboard promises.
    let titles: Vec<&str> = dash["panels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["title"].as_str().unwrap())
        .collect();
    for t in [
        "Message rates",
        "Gaps and losses",
        "Retransmissions",
        "Relay latency percentiles",
        "RDMA errors",
        "Recorder lag",
    ] {
        assert!(titles.contains(&t), "no panel {t}: {titles:?}");
    }
}

#[test]
fn metric_names_are_found_in_promql() {
    assert_eq!(
        metric_names("sum by (bus) (rate(mdbus_a_total{bus=~\"x\"}[1m])) / mdbus_b"),
        ["mdbus_a_total", "mdbus_b"]
    );
}
