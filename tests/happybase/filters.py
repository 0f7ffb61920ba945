#!/usr/bin/env python3
"""happybase (PyPI, 1.2.0) scans with HBase filter strings against the hbidx Thrift gateway.

Driven by tests/gateway.rs, which starts `hbidx serve --thrift-listen ...` with the transport
and protocol given here and passes:

    filters.py HOST PORT TRANSPORT PROTOCOL

TRANSPORT is `buffered` or `framed`, PROTOCOL `binary` or `compact`, as happybase's
`Connection(transport=..., protocol=...)` takes them. The script creates a table, writes rows,
and checks `table.scan(filter=...)` answers (TScan.filterString, as HBase's ParseFilter reads
it) together with happybase's `batch_size` (TScan.caching), `scan_batching` (TScan.batchSize),
`limit` and `columns`, plus the IOError a bad filter string gets. The expectations are HBase
1.x's answers, worked out by hand for these rows.

Output as compat.py's (whose check helpers it uses): `ok <name>` per check, the first mismatch
on stderr with exit status 1, and `happybase filters: N checks passed` at the end.
"""

import sys

import compat
from compat import check, check_raises
from Hbase_thrift import IOError as HBaseIOError  # noqa: E402  (registered by happybase)

import happybase  # noqa: E402  (compat exits with a hint when it is missing)

ODD = [b"row-01", b"row-03", b"row-05", b"row-07", b"row-09"]
ALL = [b"row-%02d" % i for i in range(1, 11)]


def keys(table, **scan):
    return [key for key, _ in table.scan(**scan)]


def main():
    if len(sys.argv) != 5:
        sys.exit("usage: filters.py HOST PORT TRANSPORT PROTOCOL")
    host, port, transport, protocol = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    connection = happybase.Connection(
        host, port, timeout=30000, transport=transport, protocol=protocol
    )
    connection.create_table("filtered", {"cf1": dict(), "cf2": dict()})
    table = connection.table("filtered")
    with table.batch() as batch:
        for i in range(1, 11):
            batch.put(
                b"row-%02d" % i,
                {
                    b"cf1:qual1": b"val1" if i % 2 else b"val2",
                    b"cf1:qual2": b"x%d" % i,
                    b"cf2:c": b"Hello" if i <= 3 else b"bye",
                },
            )
    table.put(b"zz-quote", {b"cf1:q": b"it's"})

    # happybase's own test_scan_filter_and_batch_size filter, with and without small pages.
    scvf = b"SingleColumnValueFilter ('cf1', 'qual1', =, 'binary:val1')"
    # zz-quote has no cf1:qual1: without filterIfMissing, a row missing the column passes.
    check("SingleColumnValueFilter", ODD + [b"zz-quote"], keys(table, filter=scvf))
    check(
        "SingleColumnValueFilter, pages of 2", ODD + [b"zz-quote"],
        keys(table, filter=scvf, batch_size=2),
    )
    check(
        "SingleColumnValueFilter answers whole rows",
        {b"cf1:qual1": b"val1", b"cf1:qual2": b"x1", b"cf2:c": b"Hello"},
        dict(table.scan(filter=scvf, limit=1))[b"row-01"],
    )
    # The filter runs on the whole row, then TScan.batchSize cuts it: 3 parts of one cell.
    parts = list(table.scan(filter=scvf, scan_batching=1, limit=3))
    check(
        "scan_batching cuts filtered rows",
        [(b"row-01", {b"cf1:qual1": b"val1"}), (b"row-01", {b"cf1:qual2": b"x1"}),
         (b"row-01", {b"cf2:c": b"Hello"})],
        parts,
    )
    check(
        "SingleColumnValueExcludeFilter",
        {b"cf1:qual2": b"x1", b"cf2:c": b"Hello"},
        dict(table.scan(
            filter=b"SingleColumnValueExcludeFilter('cf1', 'qual1', =, 'binary:val1')",
            limit=1,
        ))[b"row-01"],
    )
    check(
        "filterIfMissing", ODD,
        keys(table, filter=b"SingleColumnValueFilter('cf1', 'qual1', =, 'binary:val1', true, true)"),
    )

    # The other filters happybase's test module and its users reach for.
    rows = list(table.scan(filter=b"KeyOnlyFilter()", row_prefix=b"row-0", limit=1))
    check(
        "KeyOnlyFilter", [(b"row-01", {b"cf1:qual1": b"", b"cf1:qual2": b"", b"cf2:c": b""})], rows
    )
    rows = list(table.scan(filter=b"FirstKeyOnlyFilter()", limit=2))
    check(
        "FirstKeyOnlyFilter",
        [(b"row-01", {b"cf1:qual1": b"val1"}), (b"row-02", {b"cf1:qual1": b"val2"})], rows,
    )
    rows = list(table.scan(filter=b"FirstKeyOnlyFilter() AND KeyOnlyFilter()", limit=1))
    check("FirstKeyOnlyFilter AND KeyOnlyFilter", [(b"row-01", {b"cf1:qual1": b""})], rows)
    check("PrefixFilter", [b"row-10"], keys(table, filter=b"PrefixFilter('row-1')"))
    check(
        "PrefixFilter AND ValueFilter", [b"row-02", b"row-04"],
        keys(table, filter=b"PrefixFilter('row-0') AND ValueFilter(=, 'binary:val2')", limit=2),
    )
    check(
        "OR of RowFilters", [b"row-02", b"row-10"],
        keys(table, filter=b"RowFilter(=, 'binary:row-02') OR RowFilter(=, 'binary:row-10')"),
    )
    # Rows 01-03 hold "Hello" in cf2:c; row-05 holds none.
    check(
        "AND binds tighter than OR", [b"row-02", b"row-03", b"row-05"],
        keys(table, filter=b"RowFilter(=, 'binary:row-05') OR "
                           b"RowFilter(>, 'binary:row-01') AND ValueFilter(=, 'substring:ELL')"),
    )
    check(
        "parentheses", [b"row-02", b"row-03"],
        keys(table, filter=b"(RowFilter(=, 'binary:row-05') OR "
                           b"RowFilter(>, 'binary:row-01')) AND ValueFilter(=, 'substring:ELL')"),
    )
    check(
        "regexstring", [b"row-01", b"row-03"],
        keys(table, filter=b"RowFilter(=, 'regexstring:-0[13]$')"),
    )
    check(
        "quoted quote", [(b"zz-quote", {b"cf1:q": b"it's"})],
        list(table.scan(filter=b"ValueFilter(=, 'binary:it''s')")),
    )
    check(
        "FamilyFilter and columns", [(b"row-04", {b"cf2:c": b"bye"})],
        list(table.scan(filter=b"FamilyFilter(=, 'binary:cf2')", row_start=b"row-04", limit=1)),
    )
    check(
        "QualifierFilter", {b"cf1:qual2": b"x5"},
        dict(table.scan(filter=b"QualifierFilter(=, 'binaryprefix:qual2')", row_start=b"row-05",
                        limit=1))[b"row-05"],
    )
    check(
        "ColumnPrefixFilter with columns", {b"cf1:qual2": b"x6"},
        dict(table.scan(filter=b"ColumnPrefixFilter('qual2')", columns=[b"cf1"],
                        row_start=b"row-06", limit=1))[b"row-06"],
    )
    check(
        "ColumnPaginationFilter", {b"cf1:qual2": b"x7", b"cf2:c": b"bye"},
        dict(table.scan(filter=b"ColumnPaginationFilter(2, 1)", row_start=b"row-07",
                        limit=1))[b"row-07"],
    )

    # Filters that end the scan: PageFilter counts rows per scanner, whatever the page size.
    check("PageFilter", ALL[:3], keys(table, filter=b"PageFilter(3)"))
    check("PageFilter, pages of 1", ALL[:3], keys(table, filter=b"PageFilter(3)", batch_size=1))
    check("InclusiveStopFilter", ALL[:4], keys(table, filter=b"InclusiveStopFilter('row-04')"))
    check("WHILE", ALL[:2], keys(table, filter=b"WHILE RowFilter(<, 'binary:row-03')"))
    check(
        "SKIP", [b"row-01", b"row-02", b"row-03", b"zz-quote"],
        keys(table, filter=b"SKIP ValueFilter(!=, 'binary:bye')"),
    )

    # A filter string HBase's ParseFilter refuses: an IOError naming the byte offset.
    check_raises(
        "bad filter names the byte", HBaseIOError, "byte 13",
        lambda: list(table.scan(filter=b"PrefixFilter(row)")),
    )
    check_raises(
        "unknown filter", HBaseIOError, "unknown filter `NoSuchFilter`",
        lambda: list(table.scan(filter=b"KeyOnlyFilter() AND NoSuchFilter()")),
    )
    check_raises(
        "unbalanced parenthesis", HBaseIOError, "byte 16",
        lambda: list(table.scan(filter=b"(KeyOnlyFilter()")),
    )

    connection.delete_table("filtered", disable=True)
    connection.close()
    print(f"happybase filters: {compat.CHECKS} checks passed")


if __name__ == "__main__":
    main()
