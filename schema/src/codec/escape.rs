//! HBase's `Bytes.toStringBinary` escaping, in both directions: how rowkeys are shown in
//! errors and logs and typed back in (split files, the API). It knows nothing of designs.

use super::CodecError;

/// Renders bytes the way HBase's `Bytes.toStringBinary` does: printable ASCII (space to `~`)
/// as is, except `\`, and everything else as `\xNN` with uppercase hex.
pub fn printable(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &byte in bytes {
        if (b' '..=b'~').contains(&byte) && byte != b'\\' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("\\x{byte:02X}"));
        }
    }
    out
}

/// Inverse of [`printable`], i.e. HBase's `Bytes.toBytesBinary`, but strict where HBase is
/// silently lossy:
/// - `\xNN` needs two uppercase hex digits. HBase drops the backslash of a malformed escape
///   (so `\xff` becomes the text `xff`); here it is an error, since it is almost always a typo.
/// - A backslash not followed by `x` is kept as a literal byte, as HBase does.
/// - Non-ASCII characters are written as UTF-8. HBase truncates each UTF-16 unit to its low
///   byte, which never gives the bytes a user meant; [`printable`] never produces them anyway.
pub fn parse_printable(text: &str) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::with_capacity(text.len());
    let chars: Vec<char> = text.chars().collect();
    let mut index = 0;
    while let Some(&ch) = chars.get(index) {
        if ch == '\\' && chars.get(index + 1) == Some(&'x') {
            let hex_value = |c: Option<&char>| match c {
                Some(c @ '0'..='9') => Some(*c as u8 - b'0'),
                Some(c @ 'A'..='F') => Some(*c as u8 - b'A' + 10),
                _ => None,
            };
            let high = chars.get(index + 2);
            let low = chars.get(index + 3);
            match (hex_value(high), hex_value(low)) {
                (Some(h), Some(l)) => out.push(h << 4 | l),
                _ => {
                    let reason = if high.is_none() || low.is_none() {
                        "\\x escape needs two hex digits but the text ends"
                    } else if high.is_some_and(|c| c.is_ascii_hexdigit())
                        && low.is_some_and(|c| c.is_ascii_hexdigit())
                    {
                        "\\x escape uses lowercase hex; hbase only decodes uppercase (\\xAB)"
                    } else {
                        "\\x escape is not followed by two hex digits"
                    };
                    return Err(CodecError::BadEscape {
                        position: index,
                        reason,
                    });
                }
            }
            index += 4;
        } else {
            let mut buf = [0u8; 4];
            out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
            index += 1;
        }
    }
    Ok(out)
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_matches_hbase_to_string_binary() {
        assert_eq!(printable(b"abc"), "abc");
        assert_eq!(
            printable(&[0x00, 0x7f, 0xff, b'\\', b' ', b'~']),
            "\\x00\\x7F\\xFF\\x5C ~"
        );
        assert_eq!(
            parse_printable("\\x00\\x7F\\xFFa\\x5C").unwrap(),
            vec![0, 0x7f, 0xff, b'a', b'\\']
        );
        // A backslash without x is literal, like HBase.
        assert_eq!(parse_printable("a\\b").unwrap(), b"a\\b");
        assert_eq!(parse_printable("中").unwrap(), "中".as_bytes());
        for bad in ["\\x", "\\xA", "\\xzz", "\\xff"] {
            assert!(parse_printable(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_printable("ab\\xff").unwrap_err().to_string(),
            "escaped bytes: character 2: \\x escape uses lowercase hex; hbase only decodes uppercase (\\xAB)"
        );
    }
}
