//! HBase shell DDL: the `create` statement seed 000 writes by hand, generated from the config.
//!
//! Split keys are written as single-quoted Ruby strings in `Bytes.toStringBinary` form, e.g.
//! `'\x00\x01abc'`. That is deliberate. The shell passes every split through
//! `Bytes.toBytesBinary`, which decodes the *text* `\xNN`. In a single-quoted Ruby string `\x` is
//! literal text, so the escape reaches `toBytesBinary` intact. A double-quoted `"\xFF"` would make
//! Ruby produce the raw byte first, and JRuby then decodes it as UTF-8 into a Java `String`
//! (a replacement character) before `toBytesBinary` narrows each char to a byte, so every byte
//! from 0x80 up would come out wrong.

use std::fmt::Write as _;

use crate::codec::printable;
use crate::config::{FamilyConfig, TableConfig, Ttl};

/// A single-quoted Ruby string literal holding `text`; only `\` and `'` need escaping there.
fn ruby_quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for ch in text.chars() {
        if ch == '\'' || ch == '\\' {
            out.push('\\');
        }
        out.push(ch);
    }
    out.push('\'');
    out
}

/// A split key as the shell's `toBytesBinary` will read it back.
fn split_literal(key: &[u8]) -> String {
    // `printable` only ever emits a backslash as the start of `\xNN`, which single quotes keep as
    // is; a quote is the one character that must be escaped.
    let mut out = String::with_capacity(key.len() + 2);
    out.push('\'');
    for ch in printable(key).chars() {
        if ch == '\'' {
            out.push('\\');
        }
        out.push(ch);
    }
    out.push('\'');
    out
}

fn family_spec(family: &FamilyConfig) -> String {
    let mut spec = format!("{{NAME => {}", ruby_quote(&family.name));
    let mut property = |key: &str, value: String| {
        let _ = write!(spec, ", {key} => {}", ruby_quote(&value));
    };
    property("VERSIONS", family.versions.to_string());
    if let Some(ttl) = family.ttl {
        property(
            "TTL",
            match ttl {
                Ttl::Seconds(seconds) => seconds.to_string(),
                Ttl::Forever => "FOREVER".to_owned(),
            },
        );
    }
    if let Some(compression) = family.compression {
        property("COMPRESSION", compression.as_str().to_owned());
    }
    if let Some(bloomfilter) = family.bloomfilter {
        property("BLOOMFILTER", bloomfilter.as_str().to_owned());
    }
    if let Some(blocksize) = family.blocksize {
        property("BLOCKSIZE", blocksize.to_string());
    }
    if let Some(encoding) = family.data_block_encoding {
        property("DATA_BLOCK_ENCODING", encoding.as_str().to_owned());
    }
    if let Some(length) = family.bloom_prefix_length {
        let _ = write!(
            spec,
            ", CONFIGURATION => {{'RowPrefixBloomFilter.prefix_length' => '{length}'}}"
        );
    }
    spec.push('}');
    spec
}

/// `create 'ns:table', {NAME => 'info', VERSIONS => '1', ...}, {SPLITS => ['11111111', ...]}`.
///
/// Only the family properties set in the config are written, except `VERSIONS`, which is always
/// set (default 1). Without splits the `SPLITS` hash is left out and HBase creates one region.
/// Values are quoted strings, as `describe` prints them and the shell accepts.
pub fn create_statement(table: &TableConfig, splits: &[Vec<u8>]) -> String {
    let mut statement = format!("create {}", ruby_quote(&table.full_name()));
    for family in &table.families {
        statement.push_str(", ");
        statement.push_str(&family_spec(family));
    }
    if !splits.is_empty() {
        let keys: Vec<String> = splits.iter().map(|key| split_literal(key)).collect();
        let _ = write!(statement, ", {{SPLITS => [{}]}}", keys.join(", "));
    }
    statement
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_config;

    fn table(extra_family: &str) -> TableConfig {
        let text = format!(
            r#"
[[tables]]
name = "user"
namespace = "{}"

[[tables.families]]
name = "info"
versions = 1
ttl = 15552000
compression = "snappy"
bloomfilter = "row"
blocksize = 65536
data_block_encoding = "FAST_DIFF"
{extra_family}
[tables.rowkey]
parts = [ {{ kind = "key" }} ]
"#,
            if extra_family.is_empty() {
                "default"
            } else {
                "crm"
            }
        );
        parse_config(&text).unwrap().tables.remove(0)
    }

    #[test]
    fn create_with_hex_splits_like_seed_000() {
        let splits = crate::split::hex_string_split(4).unwrap();
        assert_eq!(
            create_statement(&table(""), &splits),
            "create 'user', {NAME => 'info', VERSIONS => '1', TTL => '15552000', COMPRESSION => 'SNAPPY', \
             BLOOMFILTER => 'ROW', BLOCKSIZE => '65536', DATA_BLOCK_ENCODING => 'FAST_DIFF'}, \
             {SPLITS => ['40000000', '80000000', 'c0000000']}"
        );
    }

    #[test]
    fn only_set_properties_and_namespaces() {
        let extra = "\n[[tables.families]]\nname = \"raw\"\nttl = \"FOREVER\"\nbloomfilter = \"ROWPREFIX_FIXED_LENGTH\"\nbloom_prefix_length = 6\n";
        let statement = create_statement(&table(extra), &[]);
        assert!(
            statement.starts_with("create 'crm:user', {NAME => 'info', "),
            "{statement}"
        );
        assert!(
            statement.ends_with(
                ", {NAME => 'raw', VERSIONS => '1', TTL => 'FOREVER', BLOOMFILTER => 'ROWPREFIX_FIXED_LENGTH', \
                 CONFIGURATION => {'RowPrefixBloomFilter.prefix_length' => '6'}}"
            ),
            "{statement}"
        );
        assert!(!statement.contains("SPLITS"));
    }

    #[test]
    fn binary_split_keys_use_to_bytes_binary_escapes() {
        let splits = vec![vec![0x00, 0x01], b"it's".to_vec(), vec![0x80, b'\\', 0xFF]];
        let statement = create_statement(&table(""), &splits);
        assert!(
            statement.ends_with(r"{SPLITS => ['\x00\x01', 'it\'s', '\x80\x5C\xFF']}"),
            "{statement}"
        );
        // What the shell's Bytes.toBytesBinary makes of the text between the quotes.
        assert_eq!(
            crate::codec::parse_printable(r"\x80\x5C\xFF").unwrap(),
            vec![0x80, b'\\', 0xFF]
        );
    }
}
