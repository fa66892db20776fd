"""NASDAQ TotalView-ITCH 5.0 messages, decoded by mdbus-feed's decoder.

    msg = mdbus.itch.decode(record.data)
    # {"type": "A", "name": "AddOrder", "stock_locate": 7, "tracking_number": 0,
    #  "timestamp": 34200000000123, "order_reference_number": 42,
    #  "buy_sell_indicator": "B", "shares": 100, "stock": "AAPL", "price": 1895000}
    dollars = msg["price"] / mdbus.itch.PRICE4_SCALE

Field names are those of the specification (section 4) in snake case.
Prices are exact integers: Price(4) fields in 1/10 000 dollar
(PRICE4_SCALE), Price(8) fields (the MWCB decline levels level1..level3)
in 1/100 000 000 dollar (PRICE8_SCALE). "timestamp" is nanoseconds since
midnight. A message of an unknown type or of the wrong length raises
mdbus.Error.
"""

from ._mdbus import PRICE4_SCALE, PRICE8_SCALE  # noqa: F401
from ._mdbus import itch_decode as decode  # noqa: F401

__all__ = ["PRICE4_SCALE", "PRICE8_SCALE", "decode"]
