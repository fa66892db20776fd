"""The Python module against itself, against a Rust tool process (the
relay demo), and on a recording the relay made.

The relay binary comes from MDBUS_RELAY, else target/release/mdbus-relay
(cargo build --release -p mdbus-relay). Without it these tests skip, except
under CI=true, where they fail."""

import json
import math
import os
import subprocess
import tempfile
import threading

import pytest

import mdbus
from binaries import binary



def shm_bus(extra=""):
    d = tempfile.mkdtemp(prefix="mdbus-py-")
    return mdbus.Bus.from_toml(f'transport = "shm"\n[shm]\ndir = "{d}"\n{extra}')


def test_publish_and_poll_every_event_kind():
    bus = shm_bus("[streams.md]\nmax_message = 64\ncapacity = 1024\ntimestamps = true\n")
    assert bus.transport == "shm"
    pub = bus.publisher("md")
    sub = bus.subscriber("md")
    assert pub.publish(b"hello") == 1
    assert pub.publish(b"world") == 2
    events = sub.poll(timeout=5.0)
    assert [(e.kind, e.seq, e.payload) for e in events] == [
        ("message", 1, b"hello"),
        ("message", 2, b"world"),
    ]
    assert all(e.timestamp_ns for e in events)
    # Overrun: 1100 published behind a 1024-message ring.
    for i in range(1100):
        pub.publish(b"x")
    got, lost = 0, 0
    while got + lost < 1100:
        for e in sub.poll(timeout=5.0):
            if e.kind == "message":
                got += 1
            else:
                assert e.kind == "overrun" and e.from_seq == 3 and e.to_seq > 3
                lost += e.to_seq - e.from_seq
    assert lost > 0 and got + lost == 1100
    assert sub.stats()[:3] == (2 + got, 1, lost)
    pub.close()
    end = sub.poll(timeout=5.0)
    assert [(e.kind, e.seq) for e in end] == [("end_of_stream", 1102)]


def test_errors_are_exceptions_with_the_sentence():
    with pytest.raises(mdbus.Error, match="unknown variant `pigeon`"):
        mdbus.Bus.from_toml('transport = "pigeon"')
    bus = shm_bus("[streams.md]\nmax_message = 8\n")
    pub = bus.publisher("md")
    with pytest.raises(mdbus.Error, match="9-byte message is larger than the 8-byte maximum"):
        pub.publish(b"123456789")
    pub.close()
    with pytest.raises(mdbus.Error, match="closed"):
        pub.publish(b"x")


def test_poll_releases_the_gil():
    # The poller waits in another thread; this thread must be able to
    # publish meanwhile, which it can only while the GIL is released.
    bus = shm_bus()
    pub = bus.publisher("md")
    sub = bus.subscriber("md")
    seen = []
    t = threading.Thread(target=lambda: seen.extend(sub.poll(timeout=30.0)))
    t.start()
    pub.publish(b"tick")
    t.join()
    assert [(e.kind, e.payload) for e in seen] == [("message", b"tick")]


def test_sessions_both_ways_until_the_peer_closes():
    bus = shm_bus()
    server = {}
    # accept blocks until the connect below: only possible without the GIL.
    t = threading.Thread(target=lambda: server.update(s=bus.session_accept("orders")))
    t.start()
    client = bus.session_connect("orders")
    t.join()
    srv = server["s"]
    for i in range(1, 101):
        assert client.send(f"order {i}".encode()) == i
    orders = []
    while len(orders) < 100:
        for e in srv.poll(timeout=5.0):
            orders.append(e.payload)
            srv.send(b"ACK " + e.payload)
    assert orders == [f"order {i}".encode() for i in range(1, 101)]
    acks = []
    while len(acks) < 100:
        acks += [e.payload for e in client.poll(timeout=5.0)]
    assert acks == [b"ACK " + o for o in orders]
    client.close()
    with pytest.raises(mdbus.PeerClosed):
        # Raised by the first poll after the close: no event may come first.
        assert srv.poll(timeout=30.0) == [], "an event after the last ack"


def test_python_subscribes_to_the_relay_process():
    relay = binary("relay")
    d = tempfile.mkdtemp(prefix="mdbus-py-relay-")
    bus_toml = (
        f'transport = "shm"\n[shm]\ndir = "{d}"\nprefix = "py"\nhuge_pages = "off"\n'
        "attach_timeout = \"30s\"\n[streams.md-0]\nmax_message = 64\ncapacity = 65536\n"
    )
    cfg = os.path.join(d, "relay.toml")
    with open(cfg, "w") as f:
        f.write('[input]\nline_a = "239.192.10.1:26400"\n')
        f.write("[bus]\n" + bus_toml.replace("[shm]", "[bus.shm]").replace("[streams.", "[bus.streams."))
        f.write('[routing]\nmode = "hash"\nhash_streams = 1\nhash_prefix = "md"\n')
    proc = subprocess.Popen(
        [relay, "--demo", "--config", cfg, "--duration", "2s", "--json"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        sub = mdbus.Bus.from_toml(bus_toml).subscriber("md-0")
        next_seq, messages, lost, end, last_feed_seq = None, 0, 0, None, 0
        while end is None:
            for e in sub.poll(timeout=30.0):
                if e.kind == "message":
                    assert next_seq is None or e.seq == next_seq
                    # The feed sequence (8 bytes, big-endian), then one whole
                    # ITCH message.
                    assert mdbus.itch.decode(e.payload[8:])["type"] == chr(e.payload[8])
                    feed_seq = int.from_bytes(e.payload[:8], "big")
                    assert feed_seq > last_feed_seq
                    last_feed_seq = feed_seq
                    messages += 1
                    next_seq = e.seq + 1
                elif e.kind in ("overrun", "gap"):
                    assert next_seq is None or e.from_seq == next_seq
                    lost += e.to_seq - e.from_seq
                    next_seq = e.to_seq
                elif e.kind == "source_gap":
                    # Upstream loss, in band: it took one stream sequence.
                    if next_seq is not None:
                        next_seq += 1
                else:
                    assert e.kind == "end_of_stream", e
                    end = e.seq
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode in (0, 3), out
    assert messages > 0
    assert next_seq - 1 == end


def test_reads_a_recording_of_the_relay_demo():
    relay = binary("relay")
    d = tempfile.mkdtemp(prefix="mdbus-py-mdcap-")
    path = os.path.join(d, "demo.mdcap")
    run = subprocess.run(
        [relay, "--demo", "--duration", "2s", "--record", path, "--json"],
        stdout=subprocess.PIPE,
        text=True,
        timeout=300,
    )
    assert run.returncode in (0, 3), run.stdout
    records = list(mdbus.read_mdcap(path))
    assert len(records) > 0
    seqs = [r.sequence for r in records]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    # Every record is one whole ITCH 5.0 message (decode checks the type
    # and the exact length), and the demo's symbols are in its directory.
    decoded = [mdbus.itch.decode(r.data) for r in records]
    assert [m["type"] for m in decoded] == [chr(r.data[0]) for r in records]
    directory = {m["stock_locate"]: m["stock"] for m in decoded if m["name"] == "StockDirectory"}
    adds = [m for m in decoded if m["name"] in ("AddOrder", "AddOrderMpid")]
    assert adds and all(directory.get(m["stock_locate"], m["stock"]) == m["stock"] for m in adds)
    assert all(r.timestamp_ns > 0 for r in records)
    cols = mdbus.read_mdcap_columns(path)
    assert list(cols["sequence"]) == seqs
    assert list(cols["timestamp_ns"]) == [r.timestamp_ns for r in records]
    assert list(cols["length"]) == [len(r.data) for r in records]
    assert cols["sequence"].itemsize == 8 and cols["length"].itemsize == 4
    # The demo routes by hash into md-0..md-3 (system events to every
    # stream): each record says where it went, and a symbol always goes to
    # the same stream.
    assert cols["streams"] == ["md-0", "md-1", "md-2", "md-3", "ctl"], cols["streams"]
    assert list(cols["stream"]) == [r.stream for r in records]
    assert cols["stream"].itemsize == 2
    every, nowhere = 65535, 65534
    assert all(r.stream < 5 or r.stream in (every, nowhere) for r in records)
    where = {}
    for m, r in zip(decoded, records):
        if m["name"] in ("AddOrder", "AddOrderMpid"):
            assert where.setdefault(m["stock_locate"], r.stream) == r.stream, m
    assert len(set(where.values())) > 1, where
    assert all(r.stream == every for m, r in zip(decoded, records) if m["name"] == "SystemEvent")
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert (summary["recorded"], summary["record_errors"]) == (len(records), 0), summary


def test_hlog_percentiles_agree_with_the_hdrhistogram_package():
    from hdrh.histogram import HdrHistogram
    from hdrh.log import HistogramLogReader

    replay = binary("replay")
    d = tempfile.mkdtemp(prefix="mdbus-py-hlog-")
    day = os.path.join(d, "day.itch")
    subprocess.run([replay, "synth", "--messages", "20000", "--out", day], check=True, timeout=300)
    out = os.path.join(d, "run")
    subprocess.run(
        [replay, "run", day, "--transport", "shm", "--rate", "max", "--out", out, "--json"],
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=300,
    )
    path = os.path.join(out, "latency.hlog")
    ours = mdbus.hlog_percentiles(path, [50.0, 90.0, 99.0, 99.9])

    reference = HdrHistogram(1, 3600 * 1000 * 1000 * 1000, 3)
    merged = HdrHistogram(1, 3600 * 1000 * 1000 * 1000, 3)
    reader = HistogramLogReader(path, reference)
    while True:
        h = reader.get_next_interval_histogram()
        if h is None:
            break
        merged.add(h)
    assert ours["count"] == merged.get_total_count() > 0
    assert merged.values_are_equivalent(ours["max"], merged.get_max_value())
    # The two libraries pick the rank differently: HdrHistogram (Rust, Java)
    # takes the ceiling of q% of the count, the hdrh package rounds it. Ask
    # the package for exactly the rank ours uses, so the check compares the
    # buckets, not the rounding (they differ by a bucket when q% of the
    # count has a fraction under one half).
    total = merged.get_total_count()
    for q, v in ours["percentiles"].items():
        rank = max(1, math.ceil(q / 100.0 * total))
        want = merged.get_value_at_percentile(100.0 * rank / total)
        assert merged.values_are_equivalent(v, want), (q, rank, v, want)
