#!/usr/bin/env python3
"""Reads an HdrHistogram interval log (.hlog) with the reference Python
implementation (PyPI package `hdrhistogram`, module `hdrh`) and prints one
JSON object: the intervals summed into one histogram, its count, min, max
and mean, and the usual percentiles with the rank (target count) each was
taken at.

With a percentile distribution (.hgrm, values in microseconds) as a second
argument, it also checks every row of it against that histogram: the value
must be the top of a recorded bucket and TotalCount the number of values up
to it, and the footer's Max and Total count must agree. (The package's own
percentile iterator steps differently from the Java reference's, so its
table is not compared line by line.)

Usage: hdr-check.py LOG.hlog [DIST.hgrm]

Exit status 0, or 1 with a message on stderr when the log cannot be read.
"""

import json
import sys

from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

# The bounds mdbus-replay records with: 1 ns to one hour, 3 digits.
LOWEST = 1
HIGHEST = 3600 * 10**9
DIGITS = 3
PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9, "p9999": 99.99}


def main(argv):
    if len(argv) not in (2, 3):
        print("usage: hdr-check.py LOG.hlog [DIST.hgrm]", file=sys.stderr)
        return 2
    total = HdrHistogram(LOWEST, HIGHEST, DIGITS)
    reader = HistogramLogReader(argv[1], total)
    intervals = 0
    while reader.add_next_interval_histogram() is not None:
        intervals += 1
    reader.close()
    if intervals == 0:
        print(f"{argv[1]}: no interval histograms read", file=sys.stderr)
        return 1
    result = {
        "intervals": intervals,
        "count": total.get_total_count(),
        "min": total.get_min_value(),
        "max": total.get_max_value(),
        "percentiles": {k: total.get_value_at_percentile(p) for k, p in PERCENTILES.items()},
        "ranks": {k: total.get_target_count_at_percentile(p) for k, p in PERCENTILES.items()},
        "mean": total.get_mean_value(),
    }
    if len(argv) == 3:
        result["hgrm"] = check_distribution(total, argv[2])
    print(json.dumps(result))
    return 0


def check_distribution(total, path):
    """Checks each row and the footer of a .hgrm against `total`."""
    # Cumulative count at the top of each recorded bucket.
    cumulative = {}
    running = 0
    for item in total.get_recorded_iterator():
        running += item.count_at_value_iterated_to
        cumulative[total.get_highest_equivalent_value(item.value_iterated_to)] = running
    rows = 0
    mismatches = []
    footer = {}
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for line in lines[2:]:
        if line.startswith("#[Max"):
            parts = line.strip("#[]").replace("=", ",").split(",")
            footer["max_us"] = float(parts[1])
            footer["count"] = int(parts[3])
            continue
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        value_ns = round(float(fields[0]) * 1000)
        count = int(fields[2])
        rows += 1
        if cumulative.get(value_ns) != count:
            mismatches.append(
                f"{line.strip()}: the reference has {cumulative.get(value_ns)} values up to {value_ns} ns"
            )
    if footer.get("count") != total.get_total_count():
        mismatches.append(f"footer count {footer.get('count')} != {total.get_total_count()}")
    if footer.get("max_us") is None or round(footer["max_us"] * 1000) != total.get_max_value():
        mismatches.append(f"footer max {footer.get('max_us')} us != {total.get_max_value()} ns")
    return {"rows": rows, "mismatches": mismatches}


if __name__ == "__main__":
    sys.exit(main(sys.argv))
