//! The filter language's parser: bytes to an [`Expr`], or an error naming the byte where the
//! string stopped making sense and what would have.
//!
//! The grammar is HBase's `ParseFilter`'s, written as recursive descent instead of its operator
//! stacks (same trees, same precedence):
//!
//! ```text
//! expr   = and ("OR" and)*
//! and    = unary ("AND" unary)*
//! unary  = ("SKIP" | "WHILE") unary | "(" expr ")" | filter
//! filter = Name "(" [arg ("," arg)*] ")"
//! arg    = 'quoted, with '' for a quote' | bare (a number, true/false, <, <=, =, !=, >=, >)
//! ```
//!
//! SKIP and WHILE bind tightest, then AND, then OR; `A AND B AND C` is one list of three.
//! A keyword is one only when whitespace or a parenthesis surrounds it, as in `ParseFilter`.
//! Whitespace is spaces and tabs.

use super::FilterError;
use super::compare::{Comparator, Compare, CompareOp};

/// How deep SKIP, WHILE and parentheses may nest: the parser and the evaluator recurse once per
/// level, and the string is a client's.
pub(crate) const MAX_DEPTH: usize = 64;
/// Filters in one string: each cell of the scan goes through every one of them.
pub(crate) const MAX_FILTERS: usize = 1000;
/// `regexstring:` comparators in one string: each compiled pattern and its lazy DFA cache (up to
/// 256 KiB each) live as long as the scanner.
pub(crate) const MAX_REGEXES: usize = 16;

/// A parsed filter string.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Expr {
    Filter(Spec),
    /// `FilterList(MUST_PASS_ALL, …)`.
    And(Vec<Expr>),
    /// `FilterList(MUST_PASS_ONE, …)`.
    Or(Vec<Expr>),
    /// `SkipFilter`.
    Skip(Box<Expr>),
    /// `WhileMatchFilter`.
    While(Box<Expr>),
}

/// One filter with its arguments, checked as its `createFilterFromArguments` checks them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Spec {
    KeyOnly {
        len_as_value: bool,
    },
    FirstKeyOnly,
    Prefix(Vec<u8>),
    ColumnPrefix(Vec<u8>),
    MultipleColumnPrefix(Vec<Vec<u8>>),
    ColumnCountGet(u32),
    ColumnPagination {
        limit: u32,
        offset: u32,
    },
    ColumnRange {
        /// `None` for `''`: no lower bound.
        min: Option<Vec<u8>>,
        min_inclusive: bool,
        max: Option<Vec<u8>>,
        max_inclusive: bool,
    },
    InclusiveStop(Vec<u8>),
    Page(u64),
    Timestamps(Vec<i64>),
    Row(Compare),
    Family(Compare),
    Qualifier(Compare),
    Value(Compare),
    DependentColumn {
        family: Vec<u8>,
        qualifier: Vec<u8>,
        drop_dependent: bool,
        compare: Option<Compare>,
    },
    SingleColumnValue {
        family: Vec<u8>,
        qualifier: Vec<u8>,
        compare: Compare,
        filter_if_missing: bool,
        latest_version_only: bool,
        /// SingleColumnValueExcludeFilter: the tested column is left out of the answer.
        exclude: bool,
    },
}

impl Spec {
    /// How many `regexstring:` comparators the filter holds.
    fn regexes(&self) -> usize {
        let compare = match self {
            Spec::Row(compare)
            | Spec::Family(compare)
            | Spec::Qualifier(compare)
            | Spec::Value(compare)
            | Spec::SingleColumnValue { compare, .. } => Some(compare),
            Spec::DependentColumn { compare, .. } => compare.as_ref(),
            _ => None,
        };
        usize::from(
            compare.is_some_and(|compare| matches!(compare.comparator, Comparator::Regex(_))),
        )
    }
}

/// The filter names, as the language spells them.
pub(crate) const FILTER_NAMES: [&str; 20] = [
    "KeyOnlyFilter",
    "FirstKeyOnlyFilter",
    "PrefixFilter",
    "ColumnPrefixFilter",
    "MultipleColumnPrefixFilter",
    "ColumnCountGetFilter",
    "ColumnPaginationFilter",
    "ColumnRangeFilter",
    "InclusiveStopFilter",
    "PageFilter",
    "TimestampsFilter",
    "RowFilter",
    "FamilyFilter",
    "QualifierFilter",
    "ValueFilter",
    "DependentColumnFilter",
    "SingleColumnValueFilter",
    "SingleColumnValueExcludeFilter",
    "SkipFilter",
    "WhileMatchFilter",
];

/// Parses a whole filter string.
pub(crate) fn parse(input: &[u8]) -> Result<Expr, FilterError> {
    let mut parser = Parser {
        input,
        pos: 0,
        filters: 0,
        regexes: 0,
    };
    let expr = parser.expr(0)?;
    parser.skip_whitespace();
    if parser.pos < input.len() {
        return Err(parser.expected("AND, OR or the end of the filter string"));
    }
    Ok(expr)
}

struct Parser<'a> {
    input: &'a [u8],
    pos: usize,
    /// Filters and regex comparators parsed so far, against the bounds above.
    filters: usize,
    regexes: usize,
}

/// One argument of a filter, with where it starts.
struct Arg {
    position: usize,
    kind: ArgKind,
}

enum ArgKind {
    /// The text between the quotes, unescaped.
    Quoted(Vec<u8>),
    Bare(Vec<u8>),
}

/// Up to `limit` bytes of client text for an error message: one line, control characters
/// escaped, `…` when cut.
pub(crate) fn snippet(text: &[u8], limit: usize) -> String {
    let shown = &text[..text.len().min(limit)];
    let more = if text.len() > shown.len() { "…" } else { "" };
    let mut out: String = String::from_utf8_lossy(shown)
        .chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect();
    out.push_str(more);
    out
}

fn is_whitespace(byte: u8) -> bool {
    byte == b' ' || byte == b'\t'
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.input.get(self.pos).copied()
    }

    fn skip_whitespace(&mut self) {
        while self.peek().is_some_and(is_whitespace) {
            self.pos += 1;
        }
    }

    /// What is at the current position, for an error message.
    fn found(&self) -> String {
        let rest = &self.input[self.pos.min(self.input.len())..];
        if rest.is_empty() {
            return "the end of the filter string".to_owned();
        }
        format!("`{}`", snippet(rest, 16))
    }

    fn expected(&self, expected: &'static str) -> FilterError {
        FilterError::Syntax {
            position: self.pos,
            expected,
            found: self.found(),
        }
    }

    /// Whether `keyword` starts here, followed by whitespace, `(` or the end (where the
    /// missing operand is then the error); consumes it if so.
    fn keyword(&mut self, keyword: &[u8]) -> bool {
        let end = self.pos + keyword.len();
        let here = self.input.get(self.pos..end) == Some(keyword);
        let delimited = self
            .input
            .get(end)
            .is_none_or(|&next| is_whitespace(next) || next == b'(');
        if here && delimited {
            self.pos = end;
        }
        here && delimited
    }

    fn expr(&mut self, depth: usize) -> Result<Expr, FilterError> {
        let mut operands = vec![self.and(depth)?];
        loop {
            self.skip_whitespace();
            if !self.keyword(b"OR") {
                break;
            }
            operands.push(self.and(depth)?);
        }
        Ok(if operands.len() == 1 {
            operands.remove(0)
        } else {
            Expr::Or(operands)
        })
    }

    fn and(&mut self, depth: usize) -> Result<Expr, FilterError> {
        let mut operands = vec![self.unary(depth)?];
        loop {
            self.skip_whitespace();
            if !self.keyword(b"AND") {
                break;
            }
            operands.push(self.unary(depth)?);
        }
        Ok(if operands.len() == 1 {
            operands.remove(0)
        } else {
            Expr::And(operands)
        })
    }

    fn unary(&mut self, depth: usize) -> Result<Expr, FilterError> {
        self.skip_whitespace();
        if depth >= MAX_DEPTH {
            return Err(FilterError::TooDeep { position: self.pos });
        }
        if self.keyword(b"SKIP") {
            return Ok(Expr::Skip(Box::new(self.unary(depth + 1)?)));
        }
        if self.keyword(b"WHILE") {
            return Ok(Expr::While(Box::new(self.unary(depth + 1)?)));
        }
        if self.peek() == Some(b'(') {
            self.pos += 1;
            let inner = self.expr(depth + 1)?;
            self.skip_whitespace();
            if self.peek() != Some(b')') {
                return Err(self.expected("`)`, AND or OR"));
            }
            self.pos += 1;
            return Ok(inner);
        }
        self.filter()
    }

    fn filter(&mut self) -> Result<Expr, FilterError> {
        let start = self.pos;
        self.filters += 1;
        if self.filters > MAX_FILTERS {
            return Err(FilterError::TooMany {
                position: start,
                what: "filters",
                limit: MAX_FILTERS,
            });
        }
        while self
            .peek()
            .is_some_and(|byte| byte.is_ascii_alphanumeric() || byte == b'_')
        {
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.expected("a filter name, `(`, SKIP or WHILE"));
        }
        let name = &self.input[start..self.pos];
        let Some(&name) = FILTER_NAMES.iter().find(|known| known.as_bytes() == name) else {
            return Err(FilterError::UnknownFilter {
                position: start,
                name: snippet(name, 64),
            });
        };
        self.skip_whitespace();
        if self.peek() != Some(b'(') {
            return Err(self.expected("`(` and the filter's arguments"));
        }
        self.pos += 1;
        let args = self.arguments()?;
        let end = self.pos;
        let spec = build(name, start, end, args)?;
        self.regexes += spec.regexes();
        if self.regexes > MAX_REGEXES {
            return Err(FilterError::TooMany {
                position: start,
                what: "regexstring comparators",
                limit: MAX_REGEXES,
            });
        }
        Ok(Expr::Filter(spec))
    }

    /// The arguments up to and including the closing `)`.
    fn arguments(&mut self) -> Result<Vec<Arg>, FilterError> {
        let mut args = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(b')') {
            self.pos += 1;
            return Ok(args);
        }
        loop {
            self.skip_whitespace();
            args.push(self.argument()?);
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b')') => {
                    self.pos += 1;
                    return Ok(args);
                }
                _ => return Err(self.expected("`,` or `)` after an argument")),
            }
        }
    }

    fn argument(&mut self) -> Result<Arg, FilterError> {
        let position = self.pos;
        if self.peek() == Some(b'\'') {
            self.pos += 1;
            let mut text = Vec::new();
            loop {
                match self.peek() {
                    None => {
                        return Err(FilterError::Syntax {
                            position,
                            expected: "a closing `'` (a quote inside is written `''`)",
                            found: "the end of the filter string".to_owned(),
                        });
                    }
                    Some(b'\'') if self.input.get(self.pos + 1) == Some(&b'\'') => {
                        text.push(b'\'');
                        self.pos += 2;
                    }
                    Some(b'\'') => {
                        self.pos += 1;
                        return Ok(Arg {
                            position,
                            kind: ArgKind::Quoted(text),
                        });
                    }
                    Some(byte) => {
                        text.push(byte);
                        self.pos += 1;
                    }
                }
            }
        }
        while self
            .peek()
            .is_some_and(|byte| !is_whitespace(byte) && byte != b',' && byte != b')')
        {
            self.pos += 1;
        }
        if self.pos == position {
            return Err(self.expected("an argument"));
        }
        Ok(Arg {
            position,
            kind: ArgKind::Bare(self.input[position..self.pos].to_vec()),
        })
    }
}

/// Checks a filter's arguments as its `createFilterFromArguments` does.
fn build(
    name: &'static str,
    start: usize,
    end: usize,
    args: Vec<Arg>,
) -> Result<Spec, FilterError> {
    let count = |allowed: &[usize], usage: &str| -> Result<(), FilterError> {
        if allowed.contains(&args.len()) {
            Ok(())
        } else {
            Err(FilterError::Argument {
                position: start,
                filter: name,
                reason: format!("takes {usage}; got {} argument(s)", args.len()),
            })
        }
    };
    let arg = |index: usize| &args[index];
    let spec = match name {
        "KeyOnlyFilter" => {
            count(&[0, 1], "no argument or one boolean (lenAsVal)")?;
            Spec::KeyOnly {
                len_as_value: match args.first() {
                    Some(arg) => boolean(name, arg)?,
                    None => false,
                },
            }
        }
        "FirstKeyOnlyFilter" => {
            count(&[0], "no arguments")?;
            Spec::FirstKeyOnly
        }
        "PrefixFilter" => {
            count(&[1], "one quoted row prefix")?;
            Spec::Prefix(quoted(name, arg(0))?)
        }
        "ColumnPrefixFilter" => {
            count(&[1], "one quoted qualifier prefix")?;
            Spec::ColumnPrefix(quoted(name, arg(0))?)
        }
        "MultipleColumnPrefixFilter" => Spec::MultipleColumnPrefix(
            args.iter()
                .map(|arg| quoted(name, arg))
                .collect::<Result<_, _>>()?,
        ),
        "ColumnCountGetFilter" => {
            count(&[1], "one limit (an integer >= 0)")?;
            Spec::ColumnCountGet(non_negative_int(name, arg(0))?)
        }
        "ColumnPaginationFilter" => {
            count(&[2], "a limit and an offset (integers >= 0)")?;
            Spec::ColumnPagination {
                limit: non_negative_int(name, arg(0))?,
                offset: non_negative_int(name, arg(1))?,
            }
        }
        "ColumnRangeFilter" => {
            count(
                &[4],
                "'minColumn', minInclusive, 'maxColumn', maxInclusive ('' for no bound)",
            )?;
            let bound = |text: Vec<u8>| (!text.is_empty()).then_some(text);
            Spec::ColumnRange {
                min: bound(quoted(name, arg(0))?),
                min_inclusive: boolean(name, arg(1))?,
                max: bound(quoted(name, arg(2))?),
                max_inclusive: boolean(name, arg(3))?,
            }
        }
        "InclusiveStopFilter" => {
            count(&[1], "one quoted stop row")?;
            Spec::InclusiveStop(quoted(name, arg(0))?)
        }
        "PageFilter" => {
            count(&[1], "one page size (an integer >= 0)")?;
            let size = long(name, arg(0))?;
            Spec::Page(u64::try_from(size).map_err(|_| {
                argument_error(name, arg(0), "the page size must be >= 0".to_owned())
            })?)
        }
        "TimestampsFilter" => Spec::Timestamps(
            args.iter()
                .map(|arg| {
                    let timestamp = long(name, arg)?;
                    if timestamp < 0 {
                        return Err(argument_error(
                            name,
                            arg,
                            "timestamps must be >= 0".to_owned(),
                        ));
                    }
                    Ok(timestamp)
                })
                .collect::<Result<_, _>>()?,
        ),
        "RowFilter" | "FamilyFilter" | "QualifierFilter" | "ValueFilter" => {
            count(&[2], "a compare operator and a quoted comparator")?;
            let compare = compare(name, arg(0), arg(1), true)?;
            match name {
                "RowFilter" => Spec::Row(compare),
                "FamilyFilter" => Spec::Family(compare),
                "QualifierFilter" => Spec::Qualifier(compare),
                _ => Spec::Value(compare),
            }
        }
        "DependentColumnFilter" => {
            count(
                &[2, 3, 5],
                "'family', 'qualifier'[, dropDependentColumn[, op, 'comparator']]",
            )?;
            Spec::DependentColumn {
                family: quoted(name, arg(0))?,
                qualifier: quoted(name, arg(1))?,
                drop_dependent: match args.get(2) {
                    Some(arg) => boolean(name, arg)?,
                    None => false,
                },
                compare: match args.len() {
                    5 => Some(compare(name, arg(3), arg(4), false)?),
                    _ => None,
                },
            }
        }
        "SingleColumnValueFilter" | "SingleColumnValueExcludeFilter" => {
            count(
                &[4, 6],
                "'family', 'qualifier', op, 'comparator'[, filterIfMissing, latestVersionOnly]",
            )?;
            let (filter_if_missing, latest_version_only) = match args.len() {
                6 => (boolean(name, arg(4))?, boolean(name, arg(5))?),
                _ => (false, true),
            };
            Spec::SingleColumnValue {
                family: quoted(name, arg(0))?,
                qualifier: quoted(name, arg(1))?,
                compare: compare(name, arg(2), arg(3), true)?,
                filter_if_missing,
                latest_version_only,
                exclude: name == "SingleColumnValueExcludeFilter",
            }
        }
        // SkipFilter and WhileMatchFilter wrap a filter, which the language writes with the
        // SKIP and WHILE operators instead (as in HBase, whose ParseFilter can't build them by
        // name either).
        _ => {
            return Err(FilterError::Argument {
                position: start,
                filter: name,
                reason: format!(
                    "is written as an operator: `{} <filter>` (this call ends at byte {end})",
                    if name == "SkipFilter" {
                        "SKIP"
                    } else {
                        "WHILE"
                    }
                ),
            });
        }
    };
    Ok(spec)
}

fn argument_error(filter: &'static str, arg: &Arg, reason: String) -> FilterError {
    FilterError::Argument {
        position: arg.position,
        filter,
        reason,
    }
}

fn quoted(filter: &'static str, arg: &Arg) -> Result<Vec<u8>, FilterError> {
    match &arg.kind {
        ArgKind::Quoted(text) => Ok(text.clone()),
        ArgKind::Bare(text) => Err(argument_error(
            filter,
            arg,
            format!(
                "expected a quoted string ('…'), found `{}`",
                snippet(text, 32)
            ),
        )),
    }
}

fn bare<'a>(filter: &'static str, arg: &'a Arg, what: &str) -> Result<&'a [u8], FilterError> {
    match &arg.kind {
        ArgKind::Bare(text) => Ok(text),
        ArgKind::Quoted(_) => Err(argument_error(
            filter,
            arg,
            format!("expected {what} without quotes"),
        )),
    }
}

fn boolean(filter: &'static str, arg: &Arg) -> Result<bool, FilterError> {
    let text = bare(filter, arg, "true or false")?;
    if text.eq_ignore_ascii_case(b"true") {
        Ok(true)
    } else if text.eq_ignore_ascii_case(b"false") {
        Ok(false)
    } else {
        Err(argument_error(
            filter,
            arg,
            format!("expected true or false, found `{}`", snippet(text, 32)),
        ))
    }
}

/// A decimal integer with an optional `-`, as `ParseFilter.convertByteArrayToLong` reads one.
fn long(filter: &'static str, arg: &Arg) -> Result<i64, FilterError> {
    let text = bare(filter, arg, "an integer")?;
    std::str::from_utf8(text)
        .ok()
        .filter(|text| {
            let digits = text.strip_prefix('-').unwrap_or(text);
            !digits.is_empty() && digits.bytes().all(|byte| byte.is_ascii_digit())
        })
        .and_then(|text| text.parse::<i64>().ok())
        .ok_or_else(|| {
            argument_error(
                filter,
                arg,
                format!("expected an integer, found `{}`", snippet(text, 32)),
            )
        })
}

/// An `int` argument HBase requires to be >= 0.
fn non_negative_int(filter: &'static str, arg: &Arg) -> Result<u32, FilterError> {
    let value = long(filter, arg)?;
    i32::try_from(value)
        .ok()
        .and_then(|value| u32::try_from(value).ok())
        .ok_or_else(|| {
            argument_error(
                filter,
                arg,
                format!("expected an integer from 0 to {}, found {value}", i32::MAX),
            )
        })
}

fn compare(
    filter: &'static str,
    op: &Arg,
    comparator: &Arg,
    match_only_needs_equality: bool,
) -> Result<Compare, FilterError> {
    let symbol = bare(filter, op, "a compare operator")?;
    let op_value = CompareOp::from_symbol(symbol).ok_or_else(|| {
        argument_error(
            filter,
            op,
            format!(
                "expected a compare operator (<, <=, =, !=, >=, >), found `{}`",
                snippet(symbol, 32)
            ),
        )
    })?;
    let text = quoted(filter, comparator)?;
    let parsed =
        Comparator::parse(&text).map_err(|reason| argument_error(filter, comparator, reason))?;
    if match_only_needs_equality
        && parsed.is_match_only()
        && !matches!(op_value, CompareOp::Equal | CompareOp::NotEqual)
    {
        return Err(argument_error(
            filter,
            op,
            "regexstring and substring comparators can only be used with = and !=".to_owned(),
        ));
    }
    Ok(Compare {
        op: op_value,
        comparator: parsed,
    })
}
