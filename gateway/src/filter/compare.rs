//! Compare operators and comparators: what `RowFilter(<, 'binary:r5')` and its kin test.

use std::cmp::Ordering;
use std::fmt;

use regex::{Regex, RegexBuilder};

use super::parse::snippet;

/// Upper bound of a compiled `regexstring:` pattern, and of its lazy DFA cache: the pattern is a
/// client's, and the regex crate's defaults (10 MiB, 2 MiB) are more than a filter needs.
const REGEX_SIZE_LIMIT: usize = 256 << 10;

/// `<`, `<=`, `=`, `!=`, `>=`, `>`: how the cell's bytes must relate to the comparator's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CompareOp {
    Less,
    LessOrEqual,
    Equal,
    NotEqual,
    GreaterOrEqual,
    Greater,
}

impl CompareOp {
    pub(crate) const ALL: [CompareOp; 6] = [
        CompareOp::Less,
        CompareOp::LessOrEqual,
        CompareOp::Equal,
        CompareOp::NotEqual,
        CompareOp::GreaterOrEqual,
        CompareOp::Greater,
    ];

    pub(crate) fn symbol(self) -> &'static str {
        match self {
            CompareOp::Less => "<",
            CompareOp::LessOrEqual => "<=",
            CompareOp::Equal => "=",
            CompareOp::NotEqual => "!=",
            CompareOp::GreaterOrEqual => ">=",
            CompareOp::Greater => ">",
        }
    }

    pub(crate) fn from_symbol(symbol: &[u8]) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|op| op.symbol().as_bytes() == symbol)
    }

    /// Whether a cell passes, given `comparator.compare_to(data)`: HBase compares the
    /// comparator's value with the data (not the other way round), so `<` keeps data below the
    /// value, and a regex or substring comparator answers `Equal` for a match and `Greater`
    /// otherwise.
    fn passes(self, comparator_vs_data: Ordering) -> bool {
        match self {
            CompareOp::Less => comparator_vs_data == Ordering::Greater,
            CompareOp::LessOrEqual => comparator_vs_data != Ordering::Less,
            CompareOp::Equal => comparator_vs_data == Ordering::Equal,
            CompareOp::NotEqual => comparator_vs_data != Ordering::Equal,
            CompareOp::GreaterOrEqual => comparator_vs_data != Ordering::Greater,
            CompareOp::Greater => comparator_vs_data == Ordering::Less,
        }
    }
}

/// `binary:`, `binaryprefix:`, `regexstring:` or `substring:` and its value.
#[derive(Debug, Clone)]
pub(crate) enum Comparator {
    /// Byte order against the value.
    Binary(Vec<u8>),
    /// Byte order against the value, on the data's first `value.len()` bytes.
    BinaryPrefix(Vec<u8>),
    /// A match anywhere in the data (Java's `Matcher.find()`), `.` matching newlines too
    /// (HBase adds `Pattern.DOTALL`).
    Regex(Box<Regex>),
    /// Case-insensitive containment; kept lowercased, as HBase does.
    Substring(String),
}

impl PartialEq for Comparator {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Comparator::Binary(a), Comparator::Binary(b))
            | (Comparator::BinaryPrefix(a), Comparator::BinaryPrefix(b)) => a == b,
            (Comparator::Regex(a), Comparator::Regex(b)) => a.as_str() == b.as_str(),
            (Comparator::Substring(a), Comparator::Substring(b)) => a == b,
            _ => false,
        }
    }
}

impl Comparator {
    /// The comparator of `type:value` (the argument without its quotes), or why not.
    pub(crate) fn parse(text: &[u8]) -> Result<Self, String> {
        let Some(colon) = text.iter().position(|&byte| byte == b':') else {
            return Err(
                "a comparator is `type:value` (binary, binaryprefix, regexstring or \
                        substring); this one has no `:`"
                    .to_owned(),
            );
        };
        let (kind, value) = (&text[..colon], &text[colon + 1..]);
        match kind {
            b"binary" => Ok(Comparator::Binary(value.to_vec())),
            b"binaryprefix" => Ok(Comparator::BinaryPrefix(value.to_vec())),
            b"regexstring" => {
                // HBase turns the pattern into a Java String (UTF-8), as it does the data.
                let pattern = String::from_utf8_lossy(value);
                RegexBuilder::new(&pattern)
                    .dot_matches_new_line(true)
                    .size_limit(REGEX_SIZE_LIMIT)
                    .dfa_size_limit(REGEX_SIZE_LIMIT)
                    .build()
                    .map(|regex| Comparator::Regex(Box::new(regex)))
                    .map_err(|error| {
                        // The crate's message quotes the pattern: keep it to one short line.
                        let detail = error.to_string().replace('\n', " ");
                        format!(
                            "invalid regexstring pattern: {}",
                            snippet(detail.as_bytes(), 300)
                        )
                    })
            }
            b"substring" => Ok(Comparator::Substring(
                String::from_utf8_lossy(value).to_lowercase(),
            )),
            other => Err(format!(
                "unknown comparator type `{}`; expected binary, binaryprefix, regexstring or \
                 substring",
                snippet(other, 32)
            )),
        }
    }

    /// Regex and substring comparators only say "matches" or not, so HBase allows them with
    /// `=` and `!=` only (in every filter but DependentColumnFilter).
    pub(crate) fn is_match_only(&self) -> bool {
        matches!(self, Comparator::Regex(_) | Comparator::Substring(_))
    }

    fn compare_to(&self, data: &[u8]) -> Ordering {
        let matched = |is_match: bool| {
            if is_match {
                Ordering::Equal
            } else {
                Ordering::Greater
            }
        };
        match self {
            Comparator::Binary(value) => value.as_slice().cmp(data),
            Comparator::BinaryPrefix(value) => {
                value.as_slice().cmp(&data[..value.len().min(data.len())])
            }
            // Java decodes the data as UTF-8 (invalid bytes become U+FFFD) before matching;
            // from_utf8_lossy does the same and borrows when the data is valid.
            Comparator::Regex(regex) => matched(regex.is_match(&String::from_utf8_lossy(data))),
            Comparator::Substring(needle) => matched(
                String::from_utf8_lossy(data)
                    .to_lowercase()
                    .contains(needle.as_str()),
            ),
        }
    }

    /// The argument as the filter language writes it, without quotes.
    #[cfg(test)]
    fn render(&self) -> Vec<u8> {
        let (kind, value): (&str, &[u8]) = match self {
            Comparator::Binary(value) => ("binary", value),
            Comparator::BinaryPrefix(value) => ("binaryprefix", value),
            Comparator::Regex(regex) => ("regexstring", regex.as_str().as_bytes()),
            Comparator::Substring(needle) => ("substring", needle.as_bytes()),
        };
        let mut out = kind.as_bytes().to_vec();
        out.push(b':');
        out.extend_from_slice(value);
        out
    }
}

/// A compare operator with its comparator, as the compare filters take them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Compare {
    pub(crate) op: CompareOp,
    pub(crate) comparator: Comparator,
}

impl Compare {
    /// Whether `data` passes (HBase's `CompareFilter.compare` is the negation: "filter out").
    pub(crate) fn passes(&self, data: &[u8]) -> bool {
        self.op.passes(self.comparator.compare_to(data))
    }

    /// `op, 'type:value'`, quoted as the filter language quotes.
    #[cfg(test)]
    pub(crate) fn render(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.op.symbol().as_bytes());
        out.extend_from_slice(b", ");
        quote(&self.comparator.render(), out);
    }
}

/// `'text'` with every `'` doubled, as the filter language escapes quotes.
#[cfg(test)]
pub(crate) fn quote(text: &[u8], out: &mut Vec<u8>) {
    out.push(b'\'');
    for &byte in text {
        if byte == b'\'' {
            out.push(b'\'');
        }
        out.push(byte);
    }
    out.push(b'\'');
}

impl fmt::Display for CompareOp {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.symbol())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compare(op: CompareOp, comparator: &str, data: &str) -> bool {
        Compare {
            op,
            comparator: Comparator::parse(comparator.as_bytes()).expect("comparator"),
        }
        .passes(data.as_bytes())
    }

    #[test]
    fn operators_keep_data_on_the_side_they_name() {
        use CompareOp::*;
        assert!(compare(Less, "binary:b", "a"));
        assert!(!compare(Less, "binary:b", "b"));
        assert!(compare(LessOrEqual, "binary:b", "b"));
        assert!(!compare(LessOrEqual, "binary:b", "ba"));
        assert!(compare(Equal, "binary:b", "b"));
        assert!(compare(NotEqual, "binary:b", "c"));
        assert!(compare(GreaterOrEqual, "binary:b", "b"));
        assert!(compare(Greater, "binary:b", "ba"));
        assert!(!compare(Greater, "binary:b", "a"));
    }

    #[test]
    fn binaryprefix_compares_the_datas_first_bytes() {
        assert!(compare(CompareOp::Equal, "binaryprefix:ab", "abc"));
        assert!(!compare(CompareOp::Equal, "binaryprefix:ab", "a"));
        // "a" against "ab": the data is shorter, so the prefix is greater.
        assert!(compare(CompareOp::Less, "binaryprefix:ab", "a"));
        assert!(compare(CompareOp::Equal, "binaryprefix:", "anything"));
    }

    #[test]
    fn regexstring_finds_anywhere_and_dot_matches_newlines() {
        assert!(compare(CompareOp::Equal, "regexstring:b.d", "abcde"));
        assert!(!compare(CompareOp::Equal, "regexstring:^b", "abc"));
        assert!(compare(CompareOp::NotEqual, "regexstring:^b", "abc"));
        assert!(compare(CompareOp::Equal, "regexstring:a.b", "a\nb"));
        assert!(compare(CompareOp::Equal, "regexstring:上.", "在上海"));
    }

    #[test]
    fn substring_ignores_case() {
        assert!(compare(CompareOp::Equal, "substring:BC", "abcd"));
        assert!(compare(CompareOp::Equal, "substring:bc", "ABCD"));
        assert!(!compare(CompareOp::Equal, "substring:x", "abcd"));
    }

    #[test]
    fn bad_comparators_say_why() {
        let error = Comparator::parse(b"binary").unwrap_err();
        assert!(error.contains("no `:`"), "{error}");
        let error = Comparator::parse(b"exact:a").unwrap_err();
        assert!(error.contains("unknown comparator type `exact`"), "{error}");
        let error = Comparator::parse(b"regexstring:(a").unwrap_err();
        assert!(error.contains("invalid regexstring pattern"), "{error}");
        // A pattern whose compiled form is over the bound is refused, not built.
        let error = Comparator::parse(b"regexstring:\\w{1000}\\w{1000}").unwrap_err();
        assert!(error.contains("invalid regexstring pattern"), "{error}");
    }
}
