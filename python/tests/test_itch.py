"""mdbus.itch.decode: exact fields of messages built here byte by byte from
the specification's layouts, the errors, and every message of a synthetic
day from `mdbus-replay synth`, cross-checked with struct.unpack and the
generator's guarantees (a directory entry per symbol before any order,
executions and cancels only of live orders and never beyond their shares).

The replay binary comes from MDBUS_REPLAY, else target/release/mdbus-replay.
Without it the synthetic-day test skips, except under CI=true."""

import os
import struct
import subprocess
import tempfile

import pytest

import mdbus
from binaries import binary



def header(t, locate, tracking, ts):
    """Type byte, stock locate, tracking number, 6-byte timestamp."""
    return t + struct.pack(">HH", locate, tracking) + ts.to_bytes(6, "big")


def test_add_order_fields_exactly():
    ts = 34_200_000_000_123  # 09:30:00.000000123
    raw = header(b"A", 7, 3, ts) + struct.pack(">QcI8sI", 42, b"B", 100, b"AAPL    ", 1_895_000)
    assert len(raw) == 36
    assert mdbus.itch.decode(raw) == {
        "type": "A",
        "name": "AddOrder",
        "stock_locate": 7,
        "tracking_number": 3,
        "timestamp": ts,
        "order_reference_number": 42,
        "buy_sell_indicator": "B",
        "shares": 100,
        "stock": "AAPL",
        "price": 1_895_000,
    }
    assert mdbus.itch.decode(raw)["price"] / mdbus.itch.PRICE4_SCALE == 189.5
    # bytes-like input, not only bytes
    assert mdbus.itch.decode(bytearray(raw))["order_reference_number"] == 42


def test_prices_alphas_and_codes_of_other_types():
    levels = (1, 2**40 + 5, 123_400_010_002)
    mwcb = mdbus.itch.decode(header(b"V", 0, 0, 1) + struct.pack(">QQQ", *levels))
    assert (mwcb["name"], mwcb["level1"], mwcb["level2"], mwcb["level3"]) == ("MwcbDeclineLevel", *levels)
    assert mdbus.itch.PRICE8_SCALE == 100_000_000 and mdbus.itch.PRICE4_SCALE == 10_000

    halt = mdbus.itch.decode(header(b"H", 9, 0, 2) + b"MSFT    " + b"H" + b" " + b"T1  ")
    assert {k: halt[k] for k in ("name", "stock", "trading_state", "reserved", "reason")} == {
        "name": "StockTradingAction",
        "stock": "MSFT",
        "trading_state": "H",
        "reserved": " ",
        "reason": "T1",
    }
    fmpid = mdbus.itch.decode(
        header(b"F", 1, 0, 3) + struct.pack(">QcI8sI4s", 2**64 - 1, b"S", 2**32 - 1, b"ZVZZT   ", 1, b"NSDQ")
    )
    assert (fmpid["order_reference_number"], fmpid["shares"], fmpid["attribution"]) == (
        2**64 - 1,
        2**32 - 1,
        "NSDQ",
    )
    # A symbol byte outside printable ASCII: the raw bytes, not a guess.
    odd = mdbus.itch.decode(header(b"Y", 1, 0, 4) + b"AB\x01     " + b"1")
    assert odd["stock"] == b"AB\x01" and odd["reg_sho_action"] == "1"


def test_bad_messages_raise_the_decoders_sentence():
    with pytest.raises(mdbus.Error, match="empty ITCH message"):
        mdbus.itch.decode(b"")
    with pytest.raises(mdbus.Error, match=r"unknown ITCH 5.0 message type 'Z'"):
        mdbus.itch.decode(b"Z" + bytes(20))
    with pytest.raises(mdbus.Error, match=r"truncated ITCH 'A' \(AddOrder\) message: 35 bytes, the specification gives 36"):
        mdbus.itch.decode(b"A" + bytes(34))
    with pytest.raises(mdbus.Error, match=r"too long: 37 bytes"):
        mdbus.itch.decode(b"A" + bytes(36))


def binaryfile(path):
    """The messages of a BinaryFILE: each behind a 2-byte big-endian length."""
    with open(path, "rb") as f:
        data = f.read()
    out, i = [], 0
    while i < len(data):
        (n,) = struct.unpack_from(">H", data, i)
        out.append(data[i + 2 : i + 2 + n])
        i += 2 + n
    assert i == len(data)
    return out


def test_every_message_of_a_synthetic_day():
    d = tempfile.mkdtemp(prefix="mdbus-py-itch-")
    day = os.path.join(d, "day.itch")
    subprocess.run([binary("replay"), "synth", "--messages", "20000", "--out", day], check=True, timeout=300)
    raw = binaryfile(day)
    msgs = [mdbus.itch.decode(m) for m in raw]
    assert len(msgs) >= 20000

    assert (msgs[0]["name"], msgs[0]["event_code"], msgs[0]["stock_locate"]) == ("SystemEvent", "O", 0)
    assert all(a["timestamp"] <= b["timestamp"] for a, b in zip(msgs, msgs[1:]))

    symbols = {}
    live = {}  # order reference -> [locate, shares left]
    seen = set()
    for m, b in zip(msgs, raw):
        seen.add(m["name"])
        assert m["type"] == chr(b[0])
        assert m["stock_locate"] == struct.unpack_from(">H", b, 1)[0]
        if m["name"] == "StockDirectory":
            assert not live, "a directory entry after the first order"
            symbols[m["stock_locate"]] = m["stock"]
            assert m["round_lot_size"] == struct.unpack_from(">I", b, 21)[0] > 0
        elif m["name"] in ("AddOrder", "AddOrderMpid"):
            ref, side, shares, stock, price = struct.unpack_from(">QcI8sI", b, 11)
            assert (m["order_reference_number"], m["buy_sell_indicator"], m["shares"], m["price"]) == (
                ref,
                side.decode(),
                shares,
                price,
            )
            assert m["stock"] == stock.decode().rstrip() == symbols[m["stock_locate"]]
            assert m["buy_sell_indicator"] in "BS" and m["shares"] > 0 and m["price"] > 0
            assert ref not in live
            live[ref] = [m["stock_locate"], m["shares"]]
        elif m["name"] in ("OrderExecuted", "OrderExecutedWithPrice", "OrderCancel"):
            order = live[m["order_reference_number"]]
            assert order[0] == m["stock_locate"]
            n = m.get("executed_shares", m.get("cancelled_shares"))
            assert 0 < n <= order[1]
            order[1] -= n
        elif m["name"] == "OrderDelete":
            assert live.pop(m["order_reference_number"])[0] == m["stock_locate"]
        elif m["name"] == "OrderReplace":
            old = live.pop(m["original_order_reference_number"])
            assert old[0] == m["stock_locate"]
            assert m["new_order_reference_number"] not in live
            live[m["new_order_reference_number"]] = [old[0], m["shares"]]
    assert len(symbols) > 0
    assert {"SystemEvent", "StockDirectory", "AddOrder", "OrderExecuted", "OrderCancel", "OrderDelete", "OrderReplace"} <= seen
