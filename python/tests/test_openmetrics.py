"""mdbus-stat's OpenMetrics exposition of a bus this process opened, read
back with the reference parser
(prometheus_client.openmetrics.parser.text_string_to_metric_families),
which rejects anything the format does not allow.

The mdbus-stat binary comes from MDBUS_STAT, else target/release/mdbus-stat
(cargo build --release -p mdbus-stat); prometheus_client is pip-installed
into the test venv. Without either these tests skip, except under CI=true,
where they fail."""

import os
import subprocess
import tempfile

import pytest

import mdbus

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def missing(why):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(why)
    pytest.skip(why)


def stat_binary():
    path = os.environ.get("MDBUS_STAT") or os.path.join(ROOT, "target", "release", "mdbus-stat")
    if not os.access(path, os.X_OK):
        missing(f"{path} is missing: cargo build --release -p mdbus-stat")
    return path


def reference_parser():
    try:
        from prometheus_client.openmetrics.parser import text_string_to_metric_families
    except ImportError as e:
        missing(f"prometheus_client is not installed (pip install prometheus_client): {e}")
    return text_string_to_metric_families


def test_the_exposition_of_a_live_bus_parses_with_the_reference_parser():
    stat = stat_binary()
    parse = reference_parser()
    d = tempfile.mkdtemp(prefix="mdbus-py-om-")
    counters = os.path.join(d, "counters")
    bus = mdbus.Bus.from_toml(
        f'transport = "shm"\n[shm]\ndir = "{d}"\nprefix = "pyom"\n'
        f'[counters]\ndir = "{counters}"\nname = "py-om"\n'
        "[streams.md]\nmax_message = 64\ncapacity = 1024\n"
    )
    pub = bus.publisher("md")
    sub = bus.subscriber("md")
    for _ in range(7):
        pub.publish(b"x" * 10)
    got = 0
    while got < 7:
        got += sum(1 for e in sub.poll(timeout=5.0) if e.kind == "message")

    out = subprocess.run(
        [stat, "--dir", counters, "--openmetrics"], capture_output=True, text=True, check=True
    ).stdout
    assert out.endswith("# EOF\n")
    families = {f.name: f for f in parse(out)}

    def sample(family, name, **labels):
        f = families[family]
        found = [
            s.value
            for s in f.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        ]
        assert len(found) == 1, (family, name, labels, f.samples)
        return f.type, found[0]

    pid = str(os.getpid())
    assert sample(
        "mdbus_subscriber_messages", "mdbus_subscriber_messages_total", bus="py-om", pid=pid, stream="md"
    ) == ("counter", 7)
    assert sample(
        "mdbus_subscriber_bytes", "mdbus_subscriber_bytes_total", bus="py-om", stream="md"
    ) == ("counter", 70)
    assert sample(
        "mdbus_publisher_messages", "mdbus_publisher_messages_total", bus="py-om", stream="md"
    ) == ("counter", 7)
    assert sample("mdbus_publisher_last_seq", "mdbus_publisher_last_seq", bus="py-om", stream="md") == (
        "gauge",
        7,
    )
    assert sample("mdbus_subscriber_open", "mdbus_subscriber_open", bus="py-om", stream="md") == ("gauge", 1)
    assert sample("mdbus_bus_up", "mdbus_bus_up", bus="py-om", pid=pid) == ("gauge", 1)
    # Every family is named mdbus_* and typed.
    assert all(name.startswith("mdbus_") for name in families)
    assert all(f.type in ("counter", "gauge") for f in families.values())
    del pub, sub, bus
