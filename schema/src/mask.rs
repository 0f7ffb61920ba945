//! Masks for personal data in logs: a phone or idcard number shown as `138****8000`, and a last
//! line of defence that masks such numbers anywhere in a log line ([`mask_pii_in_text`]).
//!
//! Code never logs values (errors say what is wrong, not which value: [`crate::NormalizeError`]);
//! these are for the few lines that must say which value they were about, and for the log
//! writer, which passes every line through [`mask_pii_in_text`].

use std::borrow::Cow;

/// Keeps the first 3 and last 4 characters and stars the rest; values shorter than 8
/// characters are starred entirely, since 7 revealed characters would be most of them.
fn mask_middle(value: &str) -> String {
    let chars: Vec<char> = value.chars().collect();
    if chars.len() < 8 {
        return "*".repeat(chars.len());
    }
    let mut out: String = chars[..3].iter().collect();
    out.push_str(&"*".repeat(chars.len() - 7));
    out.extend(&chars[chars.len() - 4..]);
    out
}

/// A phone number for logs: `13800138000` → `138****8000`.
pub fn mask_phone(phone: &str) -> String {
    mask_middle(phone)
}

/// An idcard number for logs: `110101199003071234` → `110***********1234`.
pub fn mask_idcard(idcard: &str) -> String {
    mask_middle(idcard)
}

/// What a maximal run of ASCII digits is, if it looks like personal data, masked.
fn mask_digit_run(run: &str) -> Option<String> {
    match run.len() {
        // A mainland mobile (and any 11 digits starting with 1: over-masking a counter is
        // harmless, leaking a phone is not).
        11 if run.starts_with('1') => Some(mask_phone(run)),
        // The same with the country code written as digits: 86…, 0086….
        13 if run.starts_with("861") => Some(format!("86{}", mask_phone(&run[2..]))),
        15 if run.starts_with("00861") => Some(format!("0086{}", mask_phone(&run[4..]))),
        // Legacy 15-digit and 18-character idcards (the last may be X).
        15 | 18 => Some(mask_idcard(run)),
        _ => None,
    }
}

fn is_text_separator(byte: u8) -> bool {
    matches!(byte, b' ' | b'-' | b'.')
}

/// Masks phone and idcard numbers found anywhere in `text`, for log output: a last line of
/// defence behind the rule that code never logs values. Two passes: maximal digit runs
/// (`13800138000`, `+8613800138000`, `11010119900307123X`), then mobiles written in groups
/// (`138-0013-8000`, `+86 138 0013 8000`). Runs of other lengths (timestamps, offsets, counts)
/// are left alone. Full-width digits are not recognised.
pub fn mask_pii_in_text(text: &str) -> Cow<'_, str> {
    if !text.bytes().any(|b| b.is_ascii_digit()) {
        return Cow::Borrowed(text);
    }
    let runs = mask_runs(text);
    let grouped = mask_grouped_mobiles(runs.as_deref().unwrap_or(text));
    match (grouped, runs) {
        (Some(text), _) | (None, Some(text)) => Cow::Owned(text),
        (None, None) => Cow::Borrowed(text),
    }
}

/// Pass 1: maximal digit runs. ASCII digits are single bytes in UTF-8 and never part of a
/// multi-byte character, so byte offsets at digit boundaries are char boundaries.
fn mask_runs(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = String::new();
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if i - start == 17 && matches!(bytes.get(i), Some(b'X' | b'x')) {
            i += 1;
        }
        if let Some(masked) = mask_digit_run(&text[start..i]) {
            out.push_str(&text[copied..start]);
            out.push_str(&masked);
            copied = i;
        }
    }
    if copied == 0 {
        return None;
    }
    out.push_str(&text[copied..]);
    Some(out)
}

/// Pass 2: digit groups joined by single spaces, dashes or dots whose digits make a mobile
/// (11 digits starting with 1, optionally after 86).
fn mask_grouped_mobiles(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = String::new();
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        let mut digits = String::new();
        let mut grouped = false;
        loop {
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                digits.push(bytes[i] as char);
                i += 1;
            }
            if i + 1 < bytes.len() && is_text_separator(bytes[i]) && bytes[i + 1].is_ascii_digit() {
                grouped = true;
                i += 1;
            } else {
                break;
            }
        }
        let mobile = match digits.len() {
            13 if digits.starts_with("861") => Some(format!("86{}", mask_phone(&digits[2..]))),
            11 if digits.starts_with('1') => Some(mask_phone(&digits)),
            _ => None,
        };
        if let (true, Some(masked)) = (grouped, mobile) {
            out.push_str(&text[copied..start]);
            out.push_str(&masked);
            copied = i;
        }
    }
    if copied == 0 {
        return None;
    }
    out.push_str(&text[copied..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks() {
        assert_eq!(mask_phone("13800138000"), "138****8000");
        assert_eq!(mask_idcard("110101199003071234"), "110***********1234");
        assert_eq!(mask_phone("+16502530000"), "+16*****0000");
        assert_eq!(mask_phone("1234567"), "*******");
        assert_eq!(mask_phone(""), "");
    }

    #[test]
    fn masks_values_inside_log_text() {
        for (text, expected) in [
            ("phone=13800138000 ok", "phone=138****8000 ok"),
            ("\"v\":\"+8613800138000\"", "\"v\":\"+86138****8000\""),
            ("008613800138000", "0086138****8000"),
            ("id 11010119900307123X.", "id 110***********123X."),
            ("id 110101199003071234", "id 110***********1234"),
            ("legacy 110101900307123", "legacy 110********7123"),
            ("tel 138-0013-8000!", "tel 138****8000!"),
            ("tel +86 138 0013 8000", "tel +86138****8000"),
            ("tel 138.0013.8000", "tel 138****8000"),
            ("张三 13800138000 北京", "张三 138****8000 北京"),
        ] {
            assert_eq!(mask_pii_in_text(text), expected, "{text}");
        }
        // Timestamps, offsets, dates and short numbers stay.
        for text in [
            "2026-11-21T03:54:41.123456Z took 12 ms offset 1763712345678",
            "seq 42, 10 docs, 3 segments",
            "",
            "no digits at all",
        ] {
            assert!(
                matches!(mask_pii_in_text(text), std::borrow::Cow::Borrowed(_)),
                "{text}"
            );
        }
    }
}
