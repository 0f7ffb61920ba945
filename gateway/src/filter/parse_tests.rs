//! The parser: every filter's arguments, precedence and nesting, quoting, and errors that name
//! the byte at fault; with proptest, no input panics and rendered trees parse back.

use proptest::prelude::*;

use super::FilterError;
use super::compare::{Comparator, Compare, CompareOp, quote};
use super::parse::{Expr, MAX_DEPTH, MAX_FILTERS, MAX_REGEXES, Spec, parse};

fn spec(text: &str) -> Spec {
    match parse(text.as_bytes()) {
        Ok(Expr::Filter(spec)) => spec,
        other => panic!("{text}: {other:?}"),
    }
}

fn parse_error(text: &str) -> FilterError {
    parse(text.as_bytes()).expect_err(text)
}

fn binary(op: CompareOp, value: &str) -> Compare {
    Compare {
        op,
        comparator: Comparator::Binary(value.as_bytes().to_vec()),
    }
}

fn prefix(text: &str) -> Expr {
    Expr::Filter(Spec::Prefix(text.as_bytes().to_vec()))
}

#[test]
fn every_filter_parses_with_its_arguments() {
    assert_eq!(
        spec("KeyOnlyFilter()"),
        Spec::KeyOnly {
            len_as_value: false
        }
    );
    assert_eq!(
        spec("KeyOnlyFilter(TRUE)"),
        Spec::KeyOnly { len_as_value: true }
    );
    assert_eq!(spec("FirstKeyOnlyFilter ( )"), Spec::FirstKeyOnly);
    assert_eq!(spec("PrefixFilter('row')"), Spec::Prefix(b"row".to_vec()));
    assert_eq!(
        spec("ColumnPrefixFilter('q')"),
        Spec::ColumnPrefix(b"q".to_vec())
    );
    assert_eq!(
        spec("MultipleColumnPrefixFilter('a', 'b','c')"),
        Spec::MultipleColumnPrefix(vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()])
    );
    assert_eq!(spec("ColumnCountGetFilter(3)"), Spec::ColumnCountGet(3));
    assert_eq!(
        spec("ColumnPaginationFilter(2, 1)"),
        Spec::ColumnPagination {
            limit: 2,
            offset: 1
        }
    );
    assert_eq!(
        spec("ColumnRangeFilter('a', true, '', false)"),
        Spec::ColumnRange {
            min: Some(b"a".to_vec()),
            min_inclusive: true,
            max: None,
            max_inclusive: false,
        }
    );
    assert_eq!(
        spec("InclusiveStopFilter('r5')"),
        Spec::InclusiveStop(b"r5".to_vec())
    );
    assert_eq!(spec("PageFilter(10)"), Spec::Page(10));
    assert_eq!(
        spec("TimestampsFilter(5, 1, 9000000000)"),
        Spec::Timestamps(vec![5, 1, 9_000_000_000])
    );
    assert_eq!(spec("TimestampsFilter()"), Spec::Timestamps(vec![]));
    assert_eq!(
        spec("RowFilter(<=, 'binary:r5')"),
        Spec::Row(binary(CompareOp::LessOrEqual, "r5"))
    );
    assert_eq!(
        spec("FamilyFilter(!=, 'binaryprefix:c')"),
        Spec::Family(Compare {
            op: CompareOp::NotEqual,
            comparator: Comparator::BinaryPrefix(b"c".to_vec()),
        })
    );
    assert_eq!(
        spec("QualifierFilter(=, 'substring:AB')"),
        Spec::Qualifier(Compare {
            op: CompareOp::Equal,
            comparator: Comparator::Substring("ab".to_owned()),
        })
    );
    assert!(matches!(
        spec("ValueFilter(=, 'regexstring:^v[0-9]+$')"),
        Spec::Value(Compare {
            op: CompareOp::Equal,
            comparator: Comparator::Regex(_),
        })
    ));
    assert_eq!(
        spec("DependentColumnFilter('cf', 'q')"),
        Spec::DependentColumn {
            family: b"cf".to_vec(),
            qualifier: b"q".to_vec(),
            drop_dependent: false,
            compare: None,
        }
    );
    assert_eq!(
        spec("DependentColumnFilter('cf', 'q', true, >, 'binary:5')"),
        Spec::DependentColumn {
            family: b"cf".to_vec(),
            qualifier: b"q".to_vec(),
            drop_dependent: true,
            compare: Some(binary(CompareOp::Greater, "5")),
        }
    );
    // happybase's own test string, with the space before the parenthesis.
    assert_eq!(
        spec("SingleColumnValueFilter ('cf1', 'qual1', =, 'binary:val1')"),
        Spec::SingleColumnValue {
            family: b"cf1".to_vec(),
            qualifier: b"qual1".to_vec(),
            compare: binary(CompareOp::Equal, "val1"),
            filter_if_missing: false,
            latest_version_only: true,
            exclude: false,
        }
    );
    assert_eq!(
        spec("SingleColumnValueExcludeFilter('cf', 'q', >=, 'binary:b', true, false)"),
        Spec::SingleColumnValue {
            family: b"cf".to_vec(),
            qualifier: b"q".to_vec(),
            compare: binary(CompareOp::GreaterOrEqual, "b"),
            filter_if_missing: true,
            latest_version_only: false,
            exclude: true,
        }
    );
}

#[test]
fn and_binds_tighter_than_or_and_skip_while_tighter_than_and() {
    let a = || prefix("a");
    let b = || prefix("b");
    let c = || prefix("c");
    let text = "PrefixFilter('a') OR PrefixFilter('b') AND PrefixFilter('c')";
    assert_eq!(
        parse(text.as_bytes()).unwrap(),
        Expr::Or(vec![a(), Expr::And(vec![b(), c()])])
    );
    let text = "PrefixFilter('a') AND PrefixFilter('b') OR PrefixFilter('c')";
    assert_eq!(
        parse(text.as_bytes()).unwrap(),
        Expr::Or(vec![Expr::And(vec![a(), b()]), c()])
    );
    let text = "PrefixFilter('a') AND PrefixFilter('b') AND PrefixFilter('c')";
    assert_eq!(
        parse(text.as_bytes()).unwrap(),
        Expr::And(vec![a(), b(), c()])
    );
    let text = "(PrefixFilter('a') OR PrefixFilter('b'))AND(PrefixFilter('c'))";
    assert_eq!(
        parse(text.as_bytes()).unwrap(),
        Expr::And(vec![Expr::Or(vec![a(), b()]), c()])
    );
    let text = "SKIP PrefixFilter('a') AND WHILE PrefixFilter('b')";
    assert_eq!(
        parse(text.as_bytes()).unwrap(),
        Expr::And(vec![Expr::Skip(Box::new(a())), Expr::While(Box::new(b()))])
    );
    let text = "WHILE (SKIP(PrefixFilter('a')) OR PrefixFilter('b'))";
    assert_eq!(
        parse(text.as_bytes()).unwrap(),
        Expr::While(Box::new(Expr::Or(vec![Expr::Skip(Box::new(a())), b()])))
    );
}

#[test]
fn quotes_inside_arguments_are_doubled() {
    assert_eq!(
        spec("PrefixFilter('it''s')"),
        Spec::Prefix(b"it's".to_vec())
    );
    assert_eq!(spec("PrefixFilter('''')"), Spec::Prefix(b"'".to_vec()));
    assert_eq!(spec("PrefixFilter('')"), Spec::Prefix(Vec::new()));
    // Parentheses, commas and keywords inside quotes are text.
    assert_eq!(
        spec("PrefixFilter('a) OR (b, c')"),
        Spec::Prefix(b"a) OR (b, c".to_vec())
    );
    assert_eq!(
        spec("RowFilter(=, 'binary:a:b')"),
        Spec::Row(binary(CompareOp::Equal, "a:b"))
    );
}

#[test]
fn errors_name_the_byte_and_what_was_expected() {
    let cases: &[(&str, usize, &str)] = &[
        ("", 0, "expected a filter name"),
        ("   ", 3, "expected a filter name"),
        ("NoSuchFilter()", 0, "unknown filter `NoSuchFilter`"),
        ("PrefixFilter", 12, "expected `(`"),
        ("PrefixFilter('a'", 16, "expected `,` or `)`"),
        ("PrefixFilter('abc", 13, "closing `'`"),
        ("PrefixFilter('a') AND", 21, "expected a filter name"),
        (
            "PrefixFilter('a') XOR PrefixFilter('b')",
            18,
            "AND, OR or the end",
        ),
        ("(PrefixFilter('a')", 18, "expected `)`, AND or OR"),
        ("PrefixFilter('a'))", 17, "AND, OR or the end"),
        ("PrefixFilter(a)", 13, "expected a quoted string"),
        (
            "PrefixFilter('a', 'b')",
            0,
            "PrefixFilter takes one quoted row prefix",
        ),
        ("PageFilter(-1)", 11, "page size must be >= 0"),
        ("PageFilter(x1)", 11, "expected an integer"),
        (
            "ColumnCountGetFilter(3000000000)",
            21,
            "from 0 to 2147483647",
        ),
        ("KeyOnlyFilter(yes)", 14, "expected true or false"),
        (
            "RowFilter(==, 'binary:a')",
            10,
            "expected a compare operator",
        ),
        (
            "RowFilter(<, 'regexstring:a')",
            10,
            "only be used with = and !=",
        ),
        (
            "RowFilter(=, 'exact:a')",
            13,
            "unknown comparator type `exact`",
        ),
        ("RowFilter(=, 'binary')", 13, "no `:`"),
        (
            "ValueFilter(=, 'regexstring:(')",
            15,
            "invalid regexstring pattern",
        ),
        ("TimestampsFilter(1, -2)", 20, "timestamps must be >= 0"),
        ("SkipFilter(PrefixFilter('a'))", 0, "SKIP <filter>"),
        ("PrefixFilter('a'),", 17, "AND, OR or the end"),
        ("PrefixFilter(,)", 13, "expected an argument"),
        // Client text in a message is one line, cut short.
        ("PrefixFilter('a')\nOR x", 17, "found `\\nOR x`"),
        (
            "RowFilter(=, 'binary:a') 0123456789abcdefXYZ",
            25,
            "found `0123456789abcdef…`",
        ),
    ];
    for (text, position, needle) in cases {
        let error = parse_error(text);
        let message = error.to_string();
        assert_eq!(error.position(), *position, "{text}: {message}");
        assert!(message.contains(needle), "{text}: {message}");
        assert!(
            message.starts_with(&format!("filter string, byte {position}: ")),
            "{message}"
        );
    }
}

#[test]
fn keywords_need_whitespace_or_parentheses_around_them() {
    // `ORPrefixFilter` is not OR followed by a filter.
    let error = parse_error("PrefixFilter('a') ORPrefixFilter('b')");
    assert_eq!(error.position(), 18, "{error}");
    assert_eq!(
        parse(b"SKIP(PrefixFilter('a'))").unwrap(),
        Expr::Skip(Box::new(prefix("a")))
    );
    assert_eq!(
        parse(b"\tPrefixFilter('a')\tOR\tPrefixFilter('b') ").unwrap(),
        Expr::Or(vec![prefix("a"), prefix("b")])
    );
}

#[test]
fn nesting_is_bounded() {
    let deep = |levels: usize| {
        format!(
            "{}PrefixFilter('a'){}",
            "(".repeat(levels),
            ")".repeat(levels)
        )
    };
    assert!(parse(deep(MAX_DEPTH - 1).as_bytes()).is_ok());
    let error = parse_error(&deep(MAX_DEPTH + 1));
    assert!(matches!(error, FilterError::TooDeep { position } if position == MAX_DEPTH));
    let error = parse_error(&"SKIP ".repeat(10_000));
    assert!(matches!(error, FilterError::TooDeep { .. }), "{error}");
    // A long flat list is not nesting: it parses, up to the bound on filters.
    let wide = |filters: usize| vec!["PrefixFilter('a')"; filters].join(" OR ");
    assert!(parse(wide(MAX_FILTERS).as_bytes()).is_ok());
    let error = parse_error(&wide(MAX_FILTERS + 1));
    assert_eq!(
        error.position(),
        MAX_FILTERS * "PrefixFilter('a') OR ".len()
    );
    assert!(
        error.to_string().contains("more than 1000 filters"),
        "{error}"
    );
}

#[test]
fn regex_comparators_are_bounded() {
    let regexes = |count: usize| vec!["RowFilter(=, 'regexstring:a')"; count].join(" OR ");
    assert!(parse(regexes(MAX_REGEXES).as_bytes()).is_ok());
    let error = parse_error(&regexes(MAX_REGEXES + 1));
    assert!(
        error
            .to_string()
            .contains("more than 16 regexstring comparators"),
        "{error}"
    );
    // Substrings are not regexes.
    let substrings = vec!["RowFilter(=, 'substring:a')"; MAX_REGEXES + 1].join(" OR ");
    assert!(parse(substrings.as_bytes()).is_ok());
}

fn arb_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..6),
        "[a-z' ():,]{0,6}".prop_map(String::into_bytes),
    ]
}

fn arb_compare() -> impl Strategy<Value = Compare> {
    let op = proptest::sample::select(CompareOp::ALL.to_vec());
    (op, 0..3u8, arb_bytes()).prop_map(|(op, kind, value)| {
        let comparator = match kind {
            0 => Comparator::Binary(value),
            1 => Comparator::BinaryPrefix(value),
            // A lowercase needle: the parser lowercases substrings.
            _ => Comparator::Substring(String::from_utf8_lossy(&value).to_lowercase()),
        };
        let op = if comparator.is_match_only() {
            CompareOp::NotEqual
        } else {
            op
        };
        Compare { op, comparator }
    })
}

fn arb_spec() -> impl Strategy<Value = Spec> {
    prop_oneof![
        any::<bool>().prop_map(|len_as_value| Spec::KeyOnly { len_as_value }),
        Just(Spec::FirstKeyOnly),
        arb_bytes().prop_map(Spec::Prefix),
        arb_bytes().prop_map(Spec::ColumnPrefix),
        proptest::collection::vec(arb_bytes(), 0..3).prop_map(Spec::MultipleColumnPrefix),
        (0..=i32::MAX as u32).prop_map(Spec::ColumnCountGet),
        (0..=i32::MAX as u32, 0..=i32::MAX as u32)
            .prop_map(|(limit, offset)| Spec::ColumnPagination { limit, offset }),
        (arb_bytes(), any::<bool>(), arb_bytes(), any::<bool>()).prop_map(
            |(min, min_inclusive, max, max_inclusive)| Spec::ColumnRange {
                min: (!min.is_empty()).then_some(min),
                min_inclusive,
                max: (!max.is_empty()).then_some(max),
                max_inclusive,
            }
        ),
        arb_bytes().prop_map(Spec::InclusiveStop),
        (0..=i64::MAX as u64).prop_map(Spec::Page),
        proptest::collection::vec(0..=i64::MAX, 0..3).prop_map(Spec::Timestamps),
        arb_compare().prop_map(Spec::Row),
        arb_compare().prop_map(Spec::Family),
        arb_compare().prop_map(Spec::Qualifier),
        arb_compare().prop_map(Spec::Value),
        (
            arb_bytes(),
            arb_bytes(),
            any::<bool>(),
            proptest::option::of(arb_compare())
        )
            .prop_map(|(family, qualifier, drop_dependent, compare)| {
                Spec::DependentColumn {
                    family,
                    qualifier,
                    drop_dependent,
                    compare,
                }
            }),
        (
            arb_bytes(),
            arb_bytes(),
            arb_compare(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(
                |(family, qualifier, compare, filter_if_missing, latest_version_only, exclude)| {
                    Spec::SingleColumnValue {
                        family,
                        qualifier,
                        compare,
                        filter_if_missing,
                        latest_version_only,
                        exclude,
                    }
                }
            ),
    ]
}

fn arb_expr() -> impl Strategy<Value = Expr> {
    arb_spec()
        .prop_map(Expr::Filter)
        .prop_recursive(4, 24, 3, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 2..4).prop_map(Expr::And),
                proptest::collection::vec(inner.clone(), 2..4).prop_map(Expr::Or),
                inner.clone().prop_map(|expr| Expr::Skip(Box::new(expr))),
                inner.prop_map(|expr| Expr::While(Box::new(expr))),
            ]
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = parse(&bytes);
    }

    #[test]
    fn filter_like_text_never_panics(text in "[A-Za-z()', =<>!:0-9-]{0,80}") {
        if let Err(error) = parse(text.as_bytes()) {
            prop_assert!(error.position() <= text.len(), "{error} in {text}");
        }
    }

    #[test]
    fn rendered_trees_parse_back(expr in arb_expr()) {
        let text = render(&expr);
        let parsed = parse(&text);
        prop_assert_eq!(parsed, Ok(expr), "{}", String::from_utf8_lossy(&text));
    }
}

/// The filter string of an expression: parsing it gives the expression back.
fn render(expr: &Expr) -> Vec<u8> {
    let mut out = Vec::new();
    render_into(expr, &mut out);
    out
}

fn render_into(expr: &Expr, out: &mut Vec<u8>) {
    let list = |operands: &[Expr], keyword: &[u8], out: &mut Vec<u8>| {
        for (index, operand) in operands.iter().enumerate() {
            if index > 0 {
                out.extend_from_slice(keyword);
            }
            out.push(b'(');
            render_into(operand, out);
            out.push(b')');
        }
    };
    match expr {
        Expr::And(operands) => list(operands, b" AND ", out),
        Expr::Or(operands) => list(operands, b" OR ", out),
        Expr::Skip(inner) | Expr::While(inner) => {
            out.extend_from_slice(if matches!(expr, Expr::Skip(_)) {
                b"SKIP ("
            } else {
                b"WHILE ("
            });
            render_into(inner, out);
            out.push(b')');
        }
        Expr::Filter(spec) => render_spec(spec, out),
    }
}

fn render_spec(spec: &Spec, out: &mut Vec<u8>) {
    fn args(out: &mut Vec<u8>, name: &str, parts: Vec<Vec<u8>>) {
        out.extend_from_slice(name.as_bytes());
        out.push(b'(');
        out.extend_from_slice(&parts.join(&b", "[..]));
        out.push(b')');
    }
    let q = |text: &[u8]| {
        let mut quoted = Vec::new();
        quote(text, &mut quoted);
        quoted
    };
    let word = |value: &dyn std::fmt::Display| value.to_string().into_bytes();
    let c = |compare: &Compare| {
        let mut rendered = Vec::new();
        compare.render(&mut rendered);
        rendered
    };
    match spec {
        Spec::KeyOnly { len_as_value } => args(out, "KeyOnlyFilter", vec![word(len_as_value)]),
        Spec::FirstKeyOnly => args(out, "FirstKeyOnlyFilter", vec![]),
        Spec::Prefix(prefix) => args(out, "PrefixFilter", vec![q(prefix)]),
        Spec::ColumnPrefix(prefix) => args(out, "ColumnPrefixFilter", vec![q(prefix)]),
        Spec::MultipleColumnPrefix(prefixes) => args(
            out,
            "MultipleColumnPrefixFilter",
            prefixes.iter().map(|prefix| q(prefix)).collect(),
        ),
        Spec::ColumnCountGet(limit) => args(out, "ColumnCountGetFilter", vec![word(limit)]),
        Spec::ColumnPagination { limit, offset } => args(
            out,
            "ColumnPaginationFilter",
            vec![word(limit), word(offset)],
        ),
        Spec::ColumnRange {
            min,
            min_inclusive,
            max,
            max_inclusive,
        } => args(
            out,
            "ColumnRangeFilter",
            vec![
                q(min.as_deref().unwrap_or_default()),
                word(min_inclusive),
                q(max.as_deref().unwrap_or_default()),
                word(max_inclusive),
            ],
        ),
        Spec::InclusiveStop(stop) => args(out, "InclusiveStopFilter", vec![q(stop)]),
        Spec::Page(size) => args(out, "PageFilter", vec![word(size)]),
        Spec::Timestamps(timestamps) => args(
            out,
            "TimestampsFilter",
            timestamps.iter().map(|ts| word(ts)).collect(),
        ),
        Spec::Row(compare) => args(out, "RowFilter", vec![c(compare)]),
        Spec::Family(compare) => args(out, "FamilyFilter", vec![c(compare)]),
        Spec::Qualifier(compare) => args(out, "QualifierFilter", vec![c(compare)]),
        Spec::Value(compare) => args(out, "ValueFilter", vec![c(compare)]),
        Spec::DependentColumn {
            family,
            qualifier,
            drop_dependent,
            compare,
        } => {
            let mut parts = vec![q(family), q(qualifier), word(drop_dependent)];
            parts.extend(compare.iter().map(c));
            args(out, "DependentColumnFilter", parts)
        }
        Spec::SingleColumnValue {
            family,
            qualifier,
            compare,
            filter_if_missing,
            latest_version_only,
            exclude,
        } => args(
            out,
            if *exclude {
                "SingleColumnValueExcludeFilter"
            } else {
                "SingleColumnValueFilter"
            },
            vec![
                q(family),
                q(qualifier),
                c(compare),
                word(filter_if_missing),
                word(latest_version_only),
            ],
        ),
    }
}
