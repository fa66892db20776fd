"""Pub/sub and sessions between this Python process and a Rust process
(capi/examples/peer.rs), on shared memory and on UDP multicast (sessions:
TCP, as a UDP bus runs them), both directions each.

The peer binary comes from MDBUS_PEER, else target/release/examples/peer
(cargo build --release -p mdbus-capi --example peer). Without it these
tests skip, except under CI=true, where they fail. Every wait on the peer
is for a line it prints: no sleeps."""

import os
import socket
import subprocess
import tempfile
import threading

import pytest

import mdbus
from binaries import binary

COUNT = 2000
TRANSPORTS = ["shm", "udp"]
# Guards against a hung peer or a lost message, not synchronisation: a
# test fails after this long with nothing happening.
QUIET_LIMIT = 30.0
PEER_LIMIT = 120.0


def wait(poll):
    """The next events from `poll`; fails when none come within QUIET_LIMIT."""
    events = poll(timeout=QUIET_LIMIT)
    assert events, f"nothing arrived for {QUIET_LIMIT} s"
    return events


def payload_of(i):
    """What the peer's `publish` sends as message i (see peer.rs)."""
    return f"{i}:".encode() + bytes((i * 7 + k) % 256 for k in range(i % 40))


def free_tcp_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bus_config(transport):
    """(path of a TOML file, its text): stream `md` and session `orders`
    on `transport`; UDP buses run the service thread, so a Python
    publisher answers retransmit requests without calling service()."""
    d = tempfile.mkdtemp(prefix=f"mdbus-py-x-{transport}-")
    if transport == "shm":
        text = (
            f'transport = "shm"\n[shm]\ndir = "{d}"\nhuge_pages = "off"\nattach_timeout = "30s"\n'
            "[streams.md]\nmax_message = 64\ncapacity = 65536\n"
            '[sessions.orders]\nconnect_timeout = "30s"\n'
        )
    else:
        pid = os.getpid()
        group = f"239.254.{pid % 250 + 1}.{(pid >> 8) % 250 + 1}"
        text = (
            'transport = "udp"\n[service]\nthread = true\n'
            f'[streams.md]\nmax_message = 64\ncapacity = 65536\ngroup = "{group}:{free_tcp_port()}"\n'
            'interface = "127.0.0.1"\nttl = 0\n'
            f'[sessions.orders]\naddress = "127.0.0.1:{free_tcp_port()}"\nconnect_timeout = "30s"\n'
        )
    path = os.path.join(d, "bus.toml")
    with open(path, "w") as f:
        f.write(text)
    return path, text


class Peer:
    """The Rust peer process; `expect` reads its next line."""

    def __init__(self, *args):
        self.proc = subprocess.Popen(
            [binary("peer"), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # A peer that hangs is killed, so that reading its output ends.
        self.guard = threading.Timer(PEER_LIMIT, self.proc.kill)
        self.guard.daemon = True
        self.guard.start()

    def line(self):
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=60)
            raise AssertionError(f"peer exited {self.proc.returncode}: {self.proc.stderr.read()}")
        return line.rstrip("\n")

    def expect(self, want):
        got = self.line()
        assert got == want, got

    def tell(self, word):
        self.proc.stdin.write(word + "\n")
        self.proc.stdin.flush()

    def finish(self):
        self.proc.stdin.close()
        rest = self.proc.stdout.read()
        code = self.proc.wait(timeout=60)
        assert code == 0, (code, self.proc.stderr.read())
        return rest

    def kill(self):
        self.guard.cancel()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_python_subscribes_to_a_rust_publisher(transport):
    path, text = bus_config(transport)
    peer = Peer("publish", path, "md", str(COUNT))
    try:
        peer.expect("ready")
        sub = mdbus.Bus.from_toml(text).subscriber("md")
        peer.tell("go")
        got = []
        while len(got) < COUNT:
            for e in wait(sub.poll):
                assert e.kind == "message", e
                got.append((e.seq, e.payload))
        peer.expect(f"published {COUNT}")
        peer.tell("done")
        end = wait(sub.poll)
        assert [(e.kind, e.seq) for e in end] == [("end_of_stream", COUNT)]
        assert peer.finish() == ""
    finally:
        peer.kill()
    assert got == [(i, payload_of(i)) for i in range(1, COUNT + 1)]
    assert sub.stats() == (COUNT, 0, 0, 0, 0)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_rust_subscriber_receives_what_python_publishes(transport):
    path, text = bus_config(transport)
    bus = mdbus.Bus.from_toml(text)
    pub = bus.publisher("md")
    peer = Peer("subscribe", path, "md")
    try:
        peer.expect("ready")
        sent = [f"py {i} ".encode() * (i % 5 + 1) for i in range(1, COUNT + 1)]
        assert [pub.publish(p) for p in sent] == list(range(1, COUNT + 1))
        # The peer prints every message; once it has all of them the stream
        # may end (a UDP publisher first answers any retransmit request,
        # from the service thread).
        lines = [peer.line() for _ in range(COUNT)]
        pub.close()
        peer.expect(f"end {COUNT}")
        assert peer.finish() == ""
    finally:
        peer.kill()
    assert lines == [f"message {i} {p.hex()}" for i, p in enumerate(sent, 1)]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_python_connects_to_a_rust_session_acceptor(transport):
    path, text = bus_config(transport)
    peer = Peer("accept", path, "orders")
    try:
        s = mdbus.Bus.from_toml(text).session_connect("orders")
        peer.expect("accepted")
        orders = [f"order {i} ".encode() + bytes(range(i % 30)) for i in range(1, COUNT + 1)]
        acks = []
        for i, o in enumerate(orders, 1):
            assert s.send(o) == i
            acks += [(e.seq, e.payload) for e in s.poll()]
        while len(acks) < COUNT:
            acks += [(e.seq, e.payload) for e in wait(s.poll)]
        s.close()
        peer.expect(f"closed after {COUNT}")
        assert peer.finish() == ""
    finally:
        peer.kill()
    assert acks == [(i, b"ACK " + o) for i, o in enumerate(orders, 1)]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_rust_session_client_connects_to_python(transport):
    path, text = bus_config(transport)
    bus = mdbus.Bus.from_toml(text)
    peer = Peer("connect", path, "orders", str(COUNT))
    try:
        s = bus.session_accept("orders")
        peer.expect("connected")
        got = []
        while len(got) < COUNT:
            for e in wait(s.poll):
                got.append((e.seq, e.payload))
                s.send(b"ACK " + e.payload)
        peer.expect(f"acked {COUNT}")
        with pytest.raises(mdbus.PeerClosed):
            wait(s.poll)
        assert peer.finish() == ""
    finally:
        peer.kill()
    assert got == [(i, f"order {i}".encode()) for i in range(1, COUNT + 1)]
