"""mdbus from Python: streams, sessions, .mdcap recordings, ITCH messages
(mdbus.itch.decode) and .hlog latency logs.

    bus = mdbus.Bus.from_toml('transport = "shm"')
    pub = bus.publisher("md")
    seq = pub.publish(b"AAPL 189.50")
    sub = bus.subscriber("md")
    for ev in sub.poll(timeout=1.0):
        print(ev.kind, ev.seq, ev.payload)

Polling releases the GIL. See docs/EMBEDDING.md.
"""

from ._mdbus import (  # noqa: F401
    Bus,
    Error,
    Event,
    Mdcap,
    PeerClosed,
    Publisher,
    Record,
    Session,
    Subscriber,
    hlog_percentiles,
    read_mdcap,
    read_mdcap_columns,
)
from . import itch  # noqa: F401

__all__ = [
    "Bus",
    "Error",
    "Event",
    "Mdcap",
    "PeerClosed",
    "Publisher",
    "Record",
    "Session",
    "Subscriber",
    "hlog_percentiles",
    "itch",
    "read_mdcap",
    "read_mdcap_columns",
]
