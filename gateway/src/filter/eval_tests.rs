//! The evaluator against hand-worked HBase 1.x answers: each filter over small rows, with
//! several families and versions where the filter's answer depends on them.

use std::collections::BTreeMap;

use super::ScanFilter;
use super::eval::{self, Cell};
use super::parse::parse;

/// `family:qualifier@ts=value`, or `family:qualifier=value` at timestamp 1.
fn cell(text: &str) -> Cell {
    let (column, value) = text.split_once('=').expect("column=value");
    let (column, timestamp) = match column.split_once('@') {
        Some((column, ts)) => (column, ts.parse().expect("a timestamp")),
        None => (column, 1),
    };
    let (family, qualifier) = column.split_once(':').expect("family:qualifier");
    Cell {
        family: family.as_bytes().to_vec(),
        qualifier: qualifier.as_bytes().to_vec(),
        timestamp,
        value: value.as_bytes().to_vec(),
    }
}

fn row(key: &str, cells: &[&str]) -> (String, Vec<Cell>) {
    (
        key.to_owned(),
        cells.iter().map(|text| cell(text)).collect(),
    )
}

fn show(cell: &Cell) -> String {
    format!(
        "{}:{}@{}={}",
        String::from_utf8_lossy(&cell.family),
        String::from_utf8_lossy(&cell.qualifier),
        cell.timestamp,
        String::from_utf8_lossy(&cell.value)
    )
}

/// The rows a scan with `filter` answers, as `row: cells`, one version per column; stops when
/// the filter ends the scan, as the scanner does.
fn scan(filter: &str, rows: &[(String, Vec<Cell>)]) -> Vec<String> {
    let expr = parse(filter.as_bytes()).unwrap_or_else(|error| panic!("{filter}: {error}"));
    let mut scan_filter = eval::ScanFilter::new(&expr);
    let mut answered = Vec::new();
    for (key, cells) in rows {
        if scan_filter.is_done() {
            break;
        }
        if let Some(cells) = scan_filter.filter_row(key.as_bytes(), cells, 1) {
            let cells: Vec<String> = cells.iter().map(show).collect();
            answered.push(format!("{key}: {}", cells.join(" ")));
        }
    }
    answered
}

fn people() -> Vec<(String, Vec<Cell>)> {
    vec![
        row("r1", &["cf:a=1", "cf:b=2", "meta:m=x"]),
        row("r2", &["cf:a=10", "cf:c=hello"]),
        row("r3", &["cf:b=0", "meta:m=y"]),
        row("r4", &["cf:a=4"]),
    ]
}

#[test]
fn prefix_filter_ends_the_scan_past_its_prefix() {
    let rows = vec![
        row("r1", &["cf:a=1"]),
        row("r2a", &["cf:a=2"]),
        row("r2b", &["cf:a=3"]),
        row("r3", &["cf:a=4"]),
    ];
    let expr = parse(b"PrefixFilter('r2')").unwrap();
    let mut filter = eval::ScanFilter::new(&expr);
    assert!(filter.filter_row(b"r1", &rows[0].1, 1).is_none());
    assert!(!filter.is_done());
    assert!(filter.filter_row(b"r2a", &rows[1].1, 1).is_some());
    assert!(filter.filter_row(b"r2b", &rows[2].1, 1).is_some());
    assert!(filter.filter_row(b"r3", &rows[3].1, 1).is_none());
    assert!(filter.is_done(), "r3 is past the prefix");
    assert_eq!(
        scan("PrefixFilter('r2')", &rows),
        ["r2a: cf:a@1=2", "r2b: cf:a@1=3"]
    );
}

#[test]
fn column_prefix_filters_work_per_family() {
    let rows = vec![row(
        "r",
        &["c1:a=1", "c1:b=2", "c1:ba=3", "c1:c=4", "c2:a=5", "c2:b=6"],
    )];
    // NEXT_ROW at c1:c skips the rest of c1 only: c2 is its own store in HBase.
    assert_eq!(
        scan("ColumnPrefixFilter('b')", &rows),
        ["r: c1:b@1=2 c1:ba@1=3 c2:b@1=6"]
    );
    let rows = vec![row("r", &["cf:a1=1", "cf:b=2", "cf:c1=3", "cf:d=4"])];
    assert_eq!(
        scan("MultipleColumnPrefixFilter('c', 'a')", &rows),
        ["r: cf:a1@1=1 cf:c1@1=3"]
    );
    // HBase looks only at the greatest prefix not above the qualifier: with `a` and `ab`,
    // `ac` is past `ab`, the last prefix, so the family ends there.
    let rows = vec![row("r", &["cf:aa=1", "cf:ab1=2", "cf:ac=3"])];
    assert_eq!(
        scan("MultipleColumnPrefixFilter('a', 'ab')", &rows),
        ["r: cf:aa@1=1 cf:ab1@1=2"]
    );
}

#[test]
fn column_range_filter_bounds() {
    let rows = vec![row(
        "r",
        &["cf:a=1", "cf:b=2", "cf:c=3", "cf:d=4", "cf:e=5"],
    )];
    assert_eq!(
        scan("ColumnRangeFilter('b', true, 'd', false)", &rows),
        ["r: cf:b@1=2 cf:c@1=3"]
    );
    assert_eq!(
        scan("ColumnRangeFilter('b', false, 'd', true)", &rows),
        ["r: cf:c@1=3 cf:d@1=4"]
    );
    assert_eq!(
        scan("ColumnRangeFilter('', true, 'b', true)", &rows),
        ["r: cf:a@1=1 cf:b@1=2"]
    );
    assert_eq!(
        scan("ColumnRangeFilter('d', true, '', true)", &rows),
        ["r: cf:d@1=4 cf:e@1=5"]
    );
}

#[test]
fn column_count_get_filter_ends_the_scan_after_a_longer_row() {
    let rows = vec![
        row("r1", &["cf:a=1", "cf:b=2"]),
        row("r2", &["cf:a=1", "cf:b=2", "cf:c=3"]),
        row("r3", &["cf:a=1"]),
    ];
    // r2 has more columns than the limit: HBase answers its first two, then the scan is done.
    assert_eq!(
        scan("ColumnCountGetFilter(2)", &rows),
        ["r1: cf:a@1=1 cf:b@1=2", "r2: cf:a@1=1 cf:b@1=2"]
    );
}

#[test]
fn column_pagination_counts_across_families() {
    let rows = vec![row("r", &["cf:a=1", "cf:b=2", "cf:c=3", "cf:d=4"])];
    assert_eq!(
        scan("ColumnPaginationFilter(2, 1)", &rows),
        ["r: cf:b@1=2 cf:c@1=3"]
    );
    let rows = vec![row("r", &["c1:a=1", "c1:b=2", "c2:a=3", "c2:b=4"])];
    assert_eq!(
        scan("ColumnPaginationFilter(2, 1)", &rows),
        ["r: c1:b@1=2 c2:a@1=3"]
    );
}

#[test]
fn key_only_and_first_key_only() {
    assert_eq!(
        scan("KeyOnlyFilter()", &people()[..1]),
        ["r1: cf:a@1= cf:b@1= meta:m@1="]
    );
    let rows = vec![row("r", &["cf:a=hello"])];
    let answered = scan("KeyOnlyFilter(true)", &rows);
    assert_eq!(answered, ["r: cf:a@1=\0\0\0\u{5}"]);
    assert_eq!(
        scan("FirstKeyOnlyFilter()", &people()),
        [
            "r1: cf:a@1=1",
            "r2: cf:a@1=10",
            "r3: cf:b@1=0",
            "r4: cf:a@1=4"
        ]
    );
    assert_eq!(
        scan("FirstKeyOnlyFilter() AND KeyOnlyFilter()", &people()[..2]),
        ["r1: cf:a@1=", "r2: cf:a@1="]
    );
}

#[test]
fn inclusive_stop_and_page_filters_end_the_scan() {
    let keys = |answered: Vec<String>| -> Vec<String> {
        answered
            .into_iter()
            .map(|line| line.split(':').next().unwrap_or_default().to_owned())
            .collect()
    };
    assert_eq!(
        keys(scan("InclusiveStopFilter('r2')", &people())),
        ["r1", "r2"]
    );
    assert_eq!(keys(scan("PageFilter(2)", &people())), ["r1", "r2"]);
    assert!(scan("PageFilter(0)", &people()).is_empty());
    // Rows filtered out before filterRow don't count toward the page.
    assert_eq!(
        keys(scan(
            "RowFilter(!=, 'binary:r1') AND PageFilter(2)",
            &people()
        )),
        ["r2", "r3"]
    );
    assert_eq!(
        keys(scan(
            "PageFilter(2) AND RowFilter(!=, 'binary:r1')",
            &people()
        )),
        ["r2", "r3"]
    );
    let expr = parse(b"PageFilter(1)").unwrap();
    let mut filter = eval::ScanFilter::new(&expr);
    assert!(filter.filter_row(b"r1", &people()[0].1, 1).is_some());
    assert!(filter.is_done());
}

#[test]
fn timestamps_filter_offers_older_versions() {
    let rows = vec![row(
        "r",
        &[
            "cf:a@9=new",
            "cf:a@7=mid",
            "cf:a@5=old",
            "cf:b@6=x",
            "cf:b@3=y",
        ],
    )];
    // a: 9 is skipped, 7 is the first version included; b: 6 is skipped, 3 is below the
    // smallest timestamp (next column).
    assert_eq!(scan("TimestampsFilter(5, 7)", &rows), ["r: cf:a@7=mid"]);
    assert!(scan("TimestampsFilter()", &rows).is_empty());
}

#[test]
fn compare_filters() {
    let keys = |filter: &str| -> Vec<String> {
        scan(filter, &people())
            .into_iter()
            .map(|line| line.split(':').next().unwrap_or_default().to_owned())
            .collect()
    };
    assert_eq!(keys("RowFilter(>=, 'binary:r3')"), ["r3", "r4"]);
    assert_eq!(keys("RowFilter(=, 'regexstring:[13]$')"), ["r1", "r3"]);
    assert_eq!(keys("RowFilter(=, 'binaryprefix:r')").len(), 4);
    assert_eq!(
        scan("FamilyFilter(=, 'binary:meta')", &people()),
        ["r1: meta:m@1=x", "r3: meta:m@1=y"]
    );
    assert_eq!(
        scan("QualifierFilter(<, 'binary:b')", &people()),
        ["r1: cf:a@1=1", "r2: cf:a@1=10", "r4: cf:a@1=4"]
    );
    assert_eq!(
        scan("ValueFilter(=, 'substring:ELL')", &people()),
        ["r2: cf:c@1=hello"]
    );
    assert_eq!(
        scan("ValueFilter(>, 'binary:2')", &people()),
        [
            "r1: meta:m@1=x",
            "r2: cf:c@1=hello",
            "r3: meta:m@1=y",
            "r4: cf:a@1=4"
        ]
    );
    // The empty qualifier passes any QualifierFilter, as in HBase.
    let rows = vec![row("r", &["cf:=e", "cf:q=v"])];
    assert_eq!(
        scan("QualifierFilter(=, 'binary:zz')", &rows),
        ["r: cf:@1=e"]
    );
}

#[test]
fn value_filter_sees_versions_before_they_are_counted() {
    // HBase 1.x filters before counting versions: the newest version the filter includes is
    // answered, even when a newer one exists.
    let rows = vec![row("r", &["cf:a@2=new", "cf:a@1=old"])];
    assert_eq!(
        scan("ValueFilter(=, 'binary:old')", &rows),
        ["r: cf:a@1=old"]
    );
}

#[test]
fn dependent_column_filter_keeps_cells_stamped_like_the_dependent_one() {
    let rows = vec![row("r", &["cf:a@5=1", "cf:b@4=2", "cf:ts@5=y", "o:x@5=3"])];
    assert_eq!(
        scan("DependentColumnFilter('cf', 'ts')", &rows),
        ["r: cf:a@5=1 cf:ts@5=y o:x@5=3"]
    );
    assert_eq!(
        scan("DependentColumnFilter('cf', 'ts', true)", &rows),
        ["r: cf:a@5=1 o:x@5=3"]
    );
    assert_eq!(
        scan(
            "DependentColumnFilter('cf', 'ts', false, =, 'binary:y')",
            &rows
        ),
        ["r: cf:a@5=1 cf:ts@5=y o:x@5=3"]
    );
    assert!(
        scan(
            "DependentColumnFilter('cf', 'ts', false, =, 'binary:n')",
            &rows
        )
        .is_empty()
    );
    // Regex comparators take any operator here (HBase checks only the compare filters').
    assert!(
        scan(
            "DependentColumnFilter('cf', 'ts', false, <, 'regexstring:n')",
            &rows
        )
        .len()
            == 1
    );
}

#[test]
fn single_column_value_filters() {
    let rows = vec![
        row("r1", &["cf:a=1", "cf:q=v", "meta:m=x"]),
        row("r2", &["cf:a=2", "cf:q=w"]),
        row("r3", &["cf:a=3"]),
    ];
    assert_eq!(
        scan("SingleColumnValueFilter('cf', 'q', =, 'binary:v')", &rows),
        ["r1: cf:a@1=1 cf:q@1=v meta:m@1=x", "r3: cf:a@1=3"]
    );
    assert_eq!(
        scan(
            "SingleColumnValueFilter('cf', 'q', =, 'binary:v', true, true)",
            &rows
        ),
        ["r1: cf:a@1=1 cf:q@1=v meta:m@1=x"]
    );
    assert_eq!(
        scan(
            "SingleColumnValueExcludeFilter('cf', 'q', =, 'binary:v', true, true)",
            &rows
        ),
        ["r1: cf:a@1=1 meta:m@1=x"]
    );
    // latestVersionOnly false: an older matching version lets the row through, and the answer
    // is still the newest version (the filter sees one version past the one answered).
    let rows = vec![row("r", &["cf:q@2=w", "cf:q@1=v"])];
    assert!(scan("SingleColumnValueFilter('cf', 'q', =, 'binary:v')", &rows).is_empty());
    assert_eq!(
        scan(
            "SingleColumnValueFilter('cf', 'q', =, 'binary:v', false, false)",
            &rows
        ),
        ["r: cf:q@2=w"]
    );
}

#[test]
fn skip_and_while() {
    assert_eq!(
        scan("SKIP ValueFilter(!=, 'binary:0')", &people())
            .iter()
            .map(|line| &line[..2])
            .collect::<Vec<_>>(),
        ["r1", "r2", "r4"]
    );
    assert_eq!(
        scan("WHILE RowFilter(<, 'binary:r3')", &people())
            .iter()
            .map(|line| &line[..2])
            .collect::<Vec<_>>(),
        ["r1", "r2"]
    );
    // The row where the wrapped filter first fails is answered up to that cell.
    let rows = vec![row("r1", &["cf:a=v1", "cf:b=v2"]), row("r2", &["cf:a=v1"])];
    assert_eq!(
        scan("WHILE ValueFilter(=, 'binary:v1')", &rows),
        ["r1: cf:a@1=v1"]
    );
}

#[test]
fn filter_lists() {
    let keys = |filter: &str| -> Vec<String> {
        scan(filter, &people())
            .into_iter()
            .map(|line| line.split(':').next().unwrap_or_default().to_owned())
            .collect()
    };
    // OR doesn't end the scan when one of its prefixes is passed.
    assert_eq!(
        keys("PrefixFilter('r1') OR PrefixFilter('r3')"),
        ["r1", "r3"]
    );
    assert_eq!(
        scan(
            "QualifierFilter(=, 'binary:a') OR QualifierFilter(=, 'binary:c')",
            &people()[..2]
        ),
        ["r1: cf:a@1=1", "r2: cf:a@1=10 cf:c@1=hello"]
    );
    // A child that includes a cell transforms it, in an OR too.
    assert_eq!(
        scan(
            "KeyOnlyFilter() OR ValueFilter(=, 'binary:x')",
            &people()[..1]
        ),
        ["r1: cf:a@1= cf:b@1= meta:m@1="]
    );
    assert_eq!(
        keys(
            "RowFilter(=, 'binary:r2') OR RowFilter(=, 'binary:r4') AND ValueFilter(=, 'binary:4')"
        ),
        ["r2", "r4"]
    );
    assert_eq!(
        keys(
            "(RowFilter(=, 'binary:r2') OR RowFilter(=, 'binary:r4')) AND ValueFilter(=, 'binary:4')"
        ),
        ["r4"]
    );
}

#[test]
fn store_rows_are_filtered_in_hbase_order_within_the_time_range() {
    let row = hbidx_store::Row {
        rowkey: b"r".to_vec(),
        cells: BTreeMap::from([
            (
                "cf1:a".to_owned(),
                hbidx_store::Cell {
                    value: b"1".to_vec(),
                    ts: 10,
                },
            ),
            (
                "cf:b".to_owned(),
                hbidx_store::Cell {
                    value: b"2".to_vec(),
                    ts: 20,
                },
            ),
            (
                "cf:c".to_owned(),
                hbidx_store::Cell {
                    value: b"3".to_vec(),
                    ts: 30,
                },
            ),
        ]),
    };
    // The family `cf` comes before `cf1` in HBase, though `cf1:a` < `cf:b` as strings.
    let mut filter = ScanFilter::parse(b"FirstKeyOnlyFilter()").unwrap();
    let answered = filter.apply(row.clone(), None).expect("a row");
    assert_eq!(answered.cells.keys().collect::<Vec<_>>(), ["cf:b"]);
    // Cells outside the scan's time range are never offered to the filter.
    let mut filter = ScanFilter::parse(b"FirstKeyOnlyFilter()").unwrap();
    let answered = filter.apply(row.clone(), Some(15)).expect("a row");
    assert_eq!(answered.cells.keys().collect::<Vec<_>>(), ["cf1:a"]);
    let mut filter = ScanFilter::parse(b"KeyOnlyFilter()").unwrap();
    let answered = filter.apply(row, Some(25)).expect("a row");
    assert_eq!(answered.cells["cf:b"].value, b"");
    assert_eq!(answered.cells["cf:b"].ts, 20);
    assert!(!answered.cells.contains_key("cf:c"));
}
