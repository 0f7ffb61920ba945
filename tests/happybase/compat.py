#!/usr/bin/env python3
"""happybase (PyPI, 1.2.0) against the hbidx HBase Thrift gateway.

Driven by tests/gateway.rs, which starts `hbidx serve --thrift-listen ...` and passes:

    compat.py HOST PORT SPEC_JSON

SPEC_JSON: {"table": "<a table to create>",
            "user_table": "user",
            "user_rows": [{"rowkey_hex": "...", "cells": {"info:phone": "...", ...}}, ...]}

The script uses happybase exactly as applications do (default buffered transport and binary
protocol): create a table, put, get, scan with row_prefix and with row_start/row_stop, delete,
batch, plus the errors a client should see. It writes `user_rows` into the configured user table
so the Rust test can then find them through hbidx's lookups.

Every check prints `ok <name>`; the first mismatch prints `FAIL <name>: expected ..., got ...` to
stderr and exits with status 1. At the end it prints `happybase compat: N checks passed`.
"""

import json
import sys
import time

try:
    import happybase
except ImportError:
    sys.exit("happybase is not installed: python3 -m pip install happybase==1.2.0")

# happybase registers the thriftpy2 module generated from HBase's IDL under this name.
from Hbase_thrift import AlreadyExists, IllegalArgument  # noqa: E402
from Hbase_thrift import IOError as HBaseIOError  # noqa: E402

CHECKS = 0


def check(name, expected, actual):
    global CHECKS
    if expected != actual:
        print(f"FAIL {name}: expected {expected!r}, got {actual!r}", file=sys.stderr)
        sys.exit(1)
    CHECKS += 1
    print(f"ok {name}")


def check_true(name, condition, detail):
    global CHECKS
    if not condition:
        print(f"FAIL {name}: {detail}", file=sys.stderr)
        sys.exit(1)
    CHECKS += 1
    print(f"ok {name}")


def check_raises(name, exception, needle, call):
    """`call` must raise `exception` whose message contains `needle`."""
    global CHECKS
    try:
        call()
    except exception as error:
        message = getattr(error, "message", None) or str(error)
        if isinstance(message, bytes):
            message = message.decode("utf-8", "replace")
        if needle not in message:
            print(f"FAIL {name}: message {message!r} lacks {needle!r}", file=sys.stderr)
            sys.exit(1)
        CHECKS += 1
        print(f"ok {name}")
        return
    except Exception as error:  # noqa: BLE001 - report what came instead
        print(f"FAIL {name}: expected {exception.__name__}, got {error!r}", file=sys.stderr)
        sys.exit(1)
    print(f"FAIL {name}: expected {exception.__name__}, nothing was raised", file=sys.stderr)
    sys.exit(1)


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: compat.py HOST PORT SPEC_JSON")
    host, port, spec = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    name = spec["table"]
    user_table = spec["user_table"]

    connection = happybase.Connection(host, port, timeout=30000)

    # --- tables -------------------------------------------------------------------------------
    connection.create_table(name, {"cf": dict(max_versions=1), "meta": dict()})
    tables = connection.tables()
    check_true("create_table lists the table", name.encode() in tables, f"tables: {tables!r}")
    check_true("the configured table is listed", user_table.encode() in tables, f"{tables!r}")
    check_raises(
        "create_table twice", AlreadyExists, name,
        lambda: connection.create_table(name, {"cf": dict()}),
    )
    table = connection.table(name)
    check("families", [b"cf", b"meta"], sorted(table.families()))
    check("one region without splits", 1, len(table.regions()))
    check("is_table_enabled", True, connection.is_table_enabled(name))

    # --- put / get ------------------------------------------------------------------------------
    before_ms = int(time.time() * 1000)
    table.put(b"row-01", {b"cf:a": b"1", b"cf:b": b"x", b"meta:m": b"m1"})
    check("row", {b"cf:a": b"1", b"cf:b": b"x", b"meta:m": b"m1"}, table.row(b"row-01"))
    check("row with columns", {b"cf:a": b"1"}, table.row(b"row-01", columns=[b"cf:a"]))
    check("row with a family", {b"meta:m": b"m1"}, table.row(b"row-01", columns=[b"meta"]))
    value, ts = table.row(b"row-01", include_timestamp=True)[b"cf:a"]
    after_ms = int(time.time() * 1000)
    check_true(
        "server timestamps in ms", before_ms - 5000 <= ts <= after_ms + 5000,
        f"timestamp {ts} not within [{before_ms}, {after_ms}]",
    )
    check("missing row", {}, table.row(b"no-such-row"))

    # Explicit timestamps: reads with a timestamp see cells strictly older than it.
    table.put(b"row-ts", {b"cf:a": b"old"}, timestamp=1000)
    check("row at ts+1", {b"cf:a": b"old"}, table.row(b"row-ts", timestamp=1001))
    check("row at ts is exclusive", {}, table.row(b"row-ts", timestamp=1000))
    check("cells", [(b"old", 1000)], table.cells(b"row-ts", b"cf:a", include_timestamp=True))
    # An older write never overwrites a newer one.
    table.put(b"row-ts", {b"cf:a": b"older"}, timestamp=999)
    check("older put loses", {b"cf:a": b"old"}, table.row(b"row-ts"))

    # rows(): missing rows are dropped, results are matched by key.
    for i in range(2, 11):
        table.put(b"row-%02d" % i, {b"cf:a": b"%d" % i})
    rows = dict(table.rows([b"row-03", b"nope", b"row-02"]))
    check("rows drops missing rows", {b"row-02": {b"cf:a": b"2"}, b"row-03": {b"cf:a": b"3"}}, rows)

    # --- scans ----------------------------------------------------------------------------------
    keys = [key for key, _ in table.scan(row_prefix=b"row-0")]
    check("scan row_prefix", [b"row-%02d" % i for i in range(1, 10)], keys)
    keys = [key for key, _ in table.scan(row_start=b"row-02", row_stop=b"row-05")]
    check("scan row_start/row_stop", [b"row-02", b"row-03", b"row-04"], keys)
    keys = [key for key, _ in table.scan(row_start=b"row-08")]
    check("scan row_start to the end", [b"row-08", b"row-09", b"row-10", b"row-ts"], keys)
    keys = [key for key, _ in table.scan(batch_size=2)]
    check("scan in pages of 2", 11, len(keys))
    check("scan order", sorted(keys), keys)
    check("scan limit", [b"row-01", b"row-02", b"row-03"], [k for k, _ in table.scan(limit=3)])
    check("scan columns", [(b"row-01", {b"meta:m": b"m1"})], list(table.scan(columns=[b"meta"])))
    # The filter language has its own script (filters.py); a bad filter names the byte.
    check_raises(
        "scan with a bad filter", HBaseIOError, "byte 0",
        lambda: list(table.scan(filter=b"NoSuchFilter()")),
    )

    # --- deletes --------------------------------------------------------------------------------
    table.delete(b"row-01", columns=[b"cf:b"])
    check("delete a column", {b"cf:a": b"1", b"meta:m": b"m1"}, table.row(b"row-01"))
    table.delete(b"row-01", columns=[b"meta"])
    check("delete a family", {b"cf:a": b"1"}, table.row(b"row-01"))
    table.delete(b"row-02")
    check("delete a row", {}, table.row(b"row-02"))
    check("deleted row leaves scans", False, b"row-02" in [k for k, _ in table.scan()])

    # --- batch ----------------------------------------------------------------------------------
    with table.batch() as batch:
        for i in range(20):
            batch.put(b"batch-%02d" % i, {b"cf:n": str(i).encode()})
        batch.delete(b"row-03")
    check("batch puts", 20, len(list(table.scan(row_prefix=b"batch-"))))
    check("batch delete", {}, table.row(b"row-03"))
    with table.batch(batch_size=7) as batch:
        for i in range(20):
            batch.delete(b"batch-%02d" % i)
    check("batch deletes in chunks", [], list(table.scan(row_prefix=b"batch-")))

    # --- errors ---------------------------------------------------------------------------------
    check_raises(
        "unknown family", HBaseIOError, "nofamily",
        lambda: table.put(b"row-x", {b"nofamily:q": b"v"}),
    )
    check_raises(
        "put without qualifier", IllegalArgument, "qualifier",
        lambda: table.put(b"row-x", {b"cf": b"v"}),
    )
    check_raises(
        "a counter that isn't 8 bytes", HBaseIOError, "64 bits wide",
        lambda: table.counter_inc(b"row-01", b"cf:a"),
    )
    check_raises(
        "unknown table", HBaseIOError, "does not exist",
        lambda: connection.table("no_such_table").row(b"r"),
    )
    check_raises(
        "delete an enabled table", HBaseIOError, "disable",
        lambda: connection.delete_table(name),
    )
    check_raises(
        "delete the configured table", HBaseIOError, "hbidx config",
        lambda: connection.delete_table(user_table, disable=True),
    )

    # --- the configured, indexed table ---------------------------------------------------------
    user = connection.table(user_table)
    check_true("the user table has regions", len(user.regions()) >= 1, "no regions")
    with user.batch() as batch:
        for row in spec["user_rows"]:
            cells = {k.encode(): v.encode() for k, v in row["cells"].items()}
            batch.put(bytes.fromhex(row["rowkey_hex"]), cells)
    for row in spec["user_rows"]:
        stored = user.row(bytes.fromhex(row["rowkey_hex"]))
        expected = {k.encode(): v.encode() for k, v in row["cells"].items()}
        check("user row " + row["rowkey_hex"][:6], expected, stored)

    # --- delete the created table ---------------------------------------------------------------
    connection.delete_table(name, disable=True)
    check("delete_table", False, name.encode() in connection.tables())

    connection.close()
    print(f"happybase compat: {CHECKS} checks passed")


if __name__ == "__main__":
    main()
