#!/usr/bin/env python3
"""`hbidx bench --json` files side by side: measure | one column per size | ratio (largest /
smallest).

    python3 scripts/scale_table.py ROWS run.json ROWS run.json [ROWS run.json ...]

Runs are given smallest first. Rows are lined up by `measure`, in the first run's order (a
measure only later runs have comes after them, with empty cells), the RSS rows and then the
memory budget rows last; a row without a number shows its text. Run with --test for the
self-test.
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


def table(runs):
    """runs: [(rows, json rows)], smallest first; the ratio is the last run over the first."""
    by_run = [{row["measure"]: row for row in rows} for _, rows in runs]
    measures = list(dict.fromkeys(row["measure"] for _, rows in runs for row in rows))
    # The memory rows last, RSS then the budget's parts, each in its run order.
    measures.sort(key=lambda m: (m.startswith("RSS") or m.startswith("memory budget"),
                                 m.startswith("memory budget")))
    sizes = " | ".join(f"{rows:,} rows" for rows, _ in runs)
    lines = [
        f"| measure | {sizes} | ratio ({runs[-1][0]:,} ÷ {runs[0][0]:,}) |",
        "|---|" + "---|" * len(runs) + "---|",
    ]
    for measure in measures:
        row = [by.get(measure) for by in by_run]
        cells = " | ".join(cell(r) for r in row)
        lines.append(f"| {measure} | {cells} | {ratio(row[0], row[-1])} |")
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
    middle = [
        {"measure": "memory budget in use, load", "value": 300.0, "unit": "MB", "text": "m"},
        {"measure": "a", "value": 70000.0, "unit": "events/s", "text": "x"},
    ]
    got = table([(100000, small), (1000000, middle), (10000000, large)])
    want = "\n".join([
        "| measure | 100,000 rows | 1,000,000 rows | 10,000,000 rows | ratio (10,000,000 ÷ 100,000) |",
        "|---|---|---|---|---|",
        "| a | 100,000 events/s | 70,000 events/s | 50,000 events/s | 0.50× |",
        "| b, p99 | 2.50 ms |  | 5.00 ms | 2.00× |",
        "| c | wrk \\| failed |  |  |  |",
        "| d |  |  | 12.3 s |  |",
        "| RSS, load | 10.0 MB |  |  |  |",
        "| memory budget in use, load |  | 300 MB |  |  |",
    ])
    assert got == want, got
    two = table([(100000, small), (10000000, large)]).splitlines()
    assert two[0] == "| measure | 100,000 rows | 10,000,000 rows | ratio (10,000,000 ÷ 100,000) |", two[0]
    assert number(0.634) == "0.63" and number(88502.1) == "88,502" and number(-12.345) == "-12.3"
    print("ok")


def main(argv):
    if argv[1:] == ["--test"]:
        self_test()
        return
    args = argv[1:]
    if len(args) < 4 or len(args) % 2:
        sys.exit(__doc__)
    runs = []
    for rows, path in zip(args[::2], args[1::2]):
        with open(path, encoding="utf-8") as f:
            runs.append((int(rows), json.load(f)))
    print(table(runs))


if __name__ == "__main__":
    main(sys.argv)
