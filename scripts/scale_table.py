#!/usr/bin/env python3
"""Two `hbidx bench --json` files side by side: measure | small | large | ratio (large / small).

    python3 scripts/scale_table.py SMALL_ROWS small.json LARGE_ROWS large.json

Rows are lined up by `measure`, in the small run's order (a measure only one run has comes after
them with an empty cell), the RSS rows last; a row without a number shows its text. Run with --test for the self-test.
"""

import json
import sys


def number(value):
    """12,345 / 123 / 12.3 / 1.23: about three significant figures, thousands separated."""
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def cell(row):
    if row is None:
        return ""
    if row.get("value") is None:
        return row.get("text", "").replace("|", "\\|")
    return f"{number(row['value'])} {row['unit']}"


def ratio(small, large):
    if not small or not large:
        return ""
    a, b = small.get("value"), large.get("value")
    if a is None or b is None or a == 0:
        return ""
    return f"{b / a:.2f}×"


def table(small_rows, small, large_rows, large):
    by_measure = {row["measure"]: row for row in large}
    measures = [row["measure"] for row in small]
    measures += [m for m in by_measure if m not in set(measures)]
    measures.sort(key=lambda m: m.startswith("RSS"))
    small_by = {row["measure"]: row for row in small}
    lines = [
        f"| measure | {small_rows:,} rows | {large_rows:,} rows | ratio (large ÷ small) |",
        "|---|---|---|---|",
    ]
    for measure in measures:
        s, l = small_by.get(measure), by_measure.get(measure)
        lines.append(f"| {measure} | {cell(s)} | {cell(l)} | {ratio(s, l)} |")
    return "\n".join(lines)


def self_test():
    small = [
        {"measure": "a", "value": 100000.0, "unit": "events/s", "text": "x"},
        {"measure": "RSS, load", "value": 10.0, "unit": "MB", "text": "r"},
        {"measure": "b, p99", "value": 2.5, "unit": "ms", "text": "y"},
        {"measure": "c", "value": None, "unit": None, "text": "wrk | failed"},
    ]
    large = [
        {"measure": "b, p99", "value": 5.0, "unit": "ms", "text": "y"},
        {"measure": "a", "value": 50000.0, "unit": "events/s", "text": "x"},
        {"measure": "d", "value": 12.34, "unit": "s", "text": "z"},
    ]
    got = table(100000, small, 10000000, large)
    want = "\n".join([
        "| measure | 100,000 rows | 10,000,000 rows | ratio (large ÷ small) |",
        "|---|---|---|---|",
        "| a | 100,000 events/s | 50,000 events/s | 0.50× |",
        "| b, p99 | 2.50 ms | 5.00 ms | 2.00× |",
        "| c | wrk \\| failed |  |  |",
        "| d |  | 12.3 s |  |",
        "| RSS, load | 10.0 MB |  |  |",
    ])
    assert got == want, got
    assert number(0.634) == "0.63" and number(88502.1) == "88,502" and number(-12.345) == "-12.3"
    print("ok")


def main(argv):
    if argv[1:] == ["--test"]:
        self_test()
        return
    if len(argv) != 5:
        sys.exit(__doc__)
    small_rows, small_path, large_rows, large_path = argv[1:]
    with open(small_path, encoding="utf-8") as f:
        small = json.load(f)
    with open(large_path, encoding="utf-8") as f:
        large = json.load(f)
    print(table(int(small_rows), small, int(large_rows), large))


if __name__ == "__main__":
    main(sys.argv)
