//! Normalisers for the indexed field kinds: phone, PRC resident idcard, person name, keyword.
//!
//! The index stores the normalised form and lookups normalise the query the same way, so
//! `+86 138-0013-8000`, `１３８００１３８０００` and `008613800138000` all find the same row.
//!
//! Phone numbers and idcard numbers are personal data. [`NormalizeError`] says what is wrong
//! (a digit count, a bad check digit) but never carries the value, so errors can be logged and
//! returned to API callers as they are. When a log line needs to show which value it was about,
//! [`crate::mask`] masks it.

use std::borrow::Cow;

use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfkc_quick};

use crate::hanzi;

/// Longest normalised name, in characters. Longer input is a paste error, not a name.
pub const MAX_NAME_CHARS: usize = 64;

/// Why a value could not be normalised. Messages are lowercase and never contain the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NormalizeError {
    /// Nothing left after trimming.
    #[error("{field} is empty")]
    Empty { field: &'static str },
    /// A phone contains something other than digits, a leading `+` and separators.
    #[error(
        "phone contains {found} at character {position}; only digits, a leading '+', spaces, dashes, dots and parentheses are allowed"
    )]
    PhoneBadCharacter {
        /// A description of the character (`a letter`, `'+' after the start`, ...).
        found: &'static str,
        position: usize,
    },
    /// A domestic number with the wrong digit count.
    #[error("phone has {digits} digits, expected 11 for a mainland mobile")]
    PhoneLength { digits: usize },
    /// Eleven digits that are not a mainland mobile (which start with 13 to 19).
    #[error(
        "phone has 11 digits but does not start with 13 to 19, so it is not a mainland mobile; write other numbers with +<country code>"
    )]
    PhoneNotMobile,
    /// An international number outside E.164's length.
    #[error("international phone has {digits} digits, e.164 allows 8 to 15")]
    PhoneE164Length { digits: usize },
    /// An international number whose country code starts with 0.
    #[error("international phone starts with 0 after the '+' or '00', which no country code does")]
    PhoneE164LeadingZero,
    /// An idcard of a length other than 18 (current) or 15 (legacy).
    #[error("idcard has {chars} characters, expected 18 (or 15 for a legacy card)")]
    IdcardLength { chars: usize },
    /// An idcard with a non-digit where a digit must be.
    #[error("idcard character {position} is not a digit; only the 18th character may be x or X")]
    IdcardNotDigit { position: usize },
    /// The 18th character disagrees with the ISO 7064 MOD 11-2 check digit of the first 17.
    #[error("idcard check digit does not match the first 17 digits (iso 7064 mod 11-2)")]
    IdcardCheckDigit,
    /// Characters 7 to 14 are not a real birth date.
    #[error("idcard birth date is invalid: {reason}")]
    IdcardBirthDate { reason: &'static str },
    /// A name longer than [`MAX_NAME_CHARS`] after normalisation.
    #[error("name has {chars} characters after normalisation, at most 64 are allowed")]
    NameTooLong { chars: usize },
    /// A control character (other than whitespace, which is collapsed).
    #[error("{field} contains a control character at character {position}")]
    ControlCharacter {
        field: &'static str,
        position: usize,
    },
}

/// NFKC turns full-width digits, `＋`, `（` and ideographic spaces into their ASCII forms.
///
/// Most values are already in NFKC (ASCII phones and idcards, names in common CJK characters),
/// and normalising them is an identity that still decodes, reorders and recomposes every
/// character into a new string: it was the largest cost of indexing a value. ASCII is NFKC by
/// construction, and the quick check answers `Yes` only for text that NFKC leaves unchanged, so
/// both shortcuts return exactly what the full normalisation would.
fn nfkc(raw: &str) -> Cow<'_, str> {
    if raw.is_ascii() || is_nfkc_quick(raw.chars()) == IsNormalized::Yes {
        Cow::Borrowed(raw)
    } else {
        Cow::Owned(raw.nfkc().collect())
    }
}

fn is_phone_separator(ch: char) -> bool {
    ch.is_whitespace() || matches!(ch, '-' | '.' | '(' | ')' | '\u{2010}'..='\u{2015}')
}

fn is_mainland_mobile(digits: &str) -> bool {
    let bytes = digits.as_bytes();
    bytes.len() == 11 && bytes[0] == b'1' && (b'3'..=b'9').contains(&bytes[1])
}

/// Normalises a phone number.
///
/// - Mainland mobiles (11 digits starting 13 to 19, optionally with `+86`, `0086` or `86`)
///   become the 11 digits: `+86 138-0013-8000` → `13800138000`.
/// - Anything else written with a leading `+` or `00` becomes E.164 `+<digits>` (8 to 15
///   digits): `+1 (650) 253-0000` → `+16502530000`.
/// - Everything else is an error: a domestic landline without its country code is ambiguous.
pub fn normalize_phone(raw: &str) -> Result<String, NormalizeError> {
    let text = nfkc(raw);
    let mut digits = String::with_capacity(text.len());
    let mut plus = false;
    for (position, ch) in text.chars().enumerate() {
        match ch {
            '0'..='9' => digits.push(ch),
            '+' if digits.is_empty() && !plus => plus = true,
            '+' => {
                return Err(NormalizeError::PhoneBadCharacter {
                    found: "'+' after the start",
                    position,
                });
            }
            _ if is_phone_separator(ch) => {}
            _ => {
                let found = if ch.is_alphabetic() {
                    "a letter"
                } else if ch.is_control() {
                    "a control character"
                } else {
                    "a symbol"
                };
                return Err(NormalizeError::PhoneBadCharacter { found, position });
            }
        }
    }
    if digits.is_empty() {
        return Err(NormalizeError::Empty { field: "phone" });
    }
    let international = if plus {
        Some(digits.as_str())
    } else {
        digits.strip_prefix("00")
    };
    if let Some(number) = international {
        if let Some(national) = number.strip_prefix("86").filter(|n| is_mainland_mobile(n)) {
            return Ok(national.to_owned());
        }
        if number.starts_with('0') {
            return Err(NormalizeError::PhoneE164LeadingZero);
        }
        if !(8..=15).contains(&number.len()) {
            return Err(NormalizeError::PhoneE164Length {
                digits: number.len(),
            });
        }
        return Ok(format!("+{number}"));
    }
    if let Some(national) = digits.strip_prefix("86").filter(|n| is_mainland_mobile(n)) {
        return Ok(national.to_owned());
    }
    if digits.len() != 11 {
        return Err(NormalizeError::PhoneLength {
            digits: digits.len(),
        });
    }
    if !is_mainland_mobile(&digits) {
        return Err(NormalizeError::PhoneNotMobile);
    }
    Ok(digits)
}

/// ISO 7064 MOD 11-2 weights for the first 17 digits of a PRC idcard (GB 11643-1999).
const IDCARD_WEIGHTS: [u32; 17] = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2];

/// Check digit for each `sum mod 11`.
const IDCARD_CHECK: [char; 11] = ['1', '0', 'X', '9', '8', '7', '6', '5', '4', '3', '2'];

/// The check digit (`0`-`9` or `X`) for the first 17 digits of an idcard, or `None` if
/// `first17` is not exactly 17 ASCII digits.
pub fn idcard_check_digit(first17: &str) -> Option<char> {
    if first17.len() != 17 || !first17.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let sum: u32 = first17
        .bytes()
        .zip(IDCARD_WEIGHTS)
        .map(|(digit, weight)| u32::from(digit - b'0') * weight)
        .sum();
    IDCARD_CHECK.get((sum % 11) as usize).copied()
}

fn is_leap_year(year: u32) -> bool {
    // Gregorian: every 4th year, except centuries, except every 4th century.
    match (year % 400, year % 100, year % 4) {
        (0, _, _) => true,
        (_, 0, _) => false,
        (_, _, 0) => true,
        _ => false,
    }
}

/// Checks an 8-digit `YYYYMMDD`; the caller has already checked they are digits.
fn check_birth_date(yyyymmdd: &str) -> Result<(), NormalizeError> {
    let invalid = |reason| NormalizeError::IdcardBirthDate { reason };
    let number = |range: std::ops::Range<usize>| {
        yyyymmdd
            .get(range)
            .and_then(|s| s.parse::<u32>().ok())
            .ok_or(invalid("not 8 digits"))
    };
    let (year, month, day) = (number(0..4)?, number(4..6)?, number(6..8)?);
    if !(1800..=2100).contains(&year) {
        return Err(invalid("year is before 1800 or after 2100"));
    }
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap_year(year) => 29,
        2 => 28,
        _ => return Err(invalid("month is not 01 to 12")),
    };
    if day == 29 && month == 2 && days_in_month == 28 {
        return Err(invalid("february 29 in a year that is not a leap year"));
    }
    if day == 0 || day > days_in_month {
        return Err(invalid("day does not exist in that month"));
    }
    Ok(())
}

/// Normalises a PRC resident idcard number to its 18-character form with an uppercase `X`.
///
/// Full-width characters and spaces are accepted; 15-digit legacy numbers are converted (`19` is
/// inserted before the two-digit birth year and the check digit computed). The check digit and
/// the birth date (a real calendar date, years 1800 to 2100) are verified.
pub fn normalize_idcard(raw: &str) -> Result<String, NormalizeError> {
    let text: String = nfkc(raw).chars().filter(|c| !c.is_whitespace()).collect();
    if text.is_empty() {
        return Err(NormalizeError::Empty { field: "idcard" });
    }
    let chars: Vec<char> = text.chars().collect();
    let first17 = match chars.len() {
        18 => {
            if let Some(position) = chars[..17].iter().position(|c| !c.is_ascii_digit()) {
                return Err(NormalizeError::IdcardNotDigit {
                    position: position + 1,
                });
            }
            chars[..17].iter().collect::<String>()
        }
        15 => {
            if let Some(position) = chars.iter().position(|c| !c.is_ascii_digit()) {
                return Err(NormalizeError::IdcardNotDigit {
                    position: position + 1,
                });
            }
            let legacy: String = chars.iter().collect();
            format!("{}19{}", &legacy[..6], &legacy[6..])
        }
        other => return Err(NormalizeError::IdcardLength { chars: other }),
    };
    check_birth_date(&first17[6..14])?;
    let check = idcard_check_digit(&first17).ok_or(NormalizeError::IdcardLength {
        chars: first17.chars().count(),
    })?;
    if chars.len() == 18 {
        let given = chars[17].to_ascii_uppercase();
        if !given.is_ascii_digit() && given != 'X' {
            return Err(NormalizeError::IdcardNotDigit { position: 18 });
        }
        if given != check {
            return Err(NormalizeError::IdcardCheckDigit);
        }
    }
    Ok(format!("{first17}{check}"))
}

/// Normalises a person's name: NFKC (full-width Latin becomes ASCII), trimmed, whitespace runs
/// collapsed to one space, lowercased (`John  SMITH` → `john smith`). Chinese names are folded
/// further, as people type them: whitespace between two Han characters is dropped (`张 三` →
/// `张三`; Chinese has no spaces between words, so it is a typing habit, not a boundary) and
/// traditional characters become simplified (`張三` → `张三`, [`crate::hanzi`]). Empty names,
/// names over 64 characters and control characters are errors.
pub fn normalize_name(raw: &str) -> Result<String, NormalizeError> {
    let text = nfkc(raw);
    if let Some(position) = text
        .chars()
        .position(|c| c.is_control() && !c.is_whitespace())
    {
        return Err(NormalizeError::ControlCharacter {
            field: "name",
            position,
        });
    }
    let mut name = String::with_capacity(text.len());
    let mut chars = 0usize;
    let mut last: Option<char> = None;
    for word in text.split_whitespace() {
        if let (Some(before), Some(first)) = (last, word.chars().next())
            && !(hanzi::is_han(before) && hanzi::is_han(first))
        {
            name.push(' ');
            chars += 1;
        }
        for c in word.chars() {
            if c.is_ascii() {
                name.push(c.to_ascii_lowercase());
                chars += 1;
            } else if let Some(simple) = hanzi::simplified(c) {
                name.push(simple);
                chars += 1;
            } else {
                for lower in c.to_lowercase() {
                    name.push(lower);
                    chars += 1;
                }
            }
        }
        last = word.chars().next_back();
    }
    if name.is_empty() {
        return Err(NormalizeError::Empty { field: "name" });
    }
    if chars > MAX_NAME_CHARS {
        return Err(NormalizeError::NameTooLong { chars });
    }
    Ok(name)
}

/// Normalises a free keyword: NFKC and trimmed; empty is an error. Case is kept, because
/// keywords are often codes where case matters.
pub fn normalize_keyword(raw: &str) -> Result<String, NormalizeError> {
    let text = nfkc(raw);
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(NormalizeError::Empty { field: "keyword" });
    }
    Ok(trimmed.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full_nfkc(raw: &str) -> String {
        raw.nfkc().collect()
    }

    #[test]
    fn nfkc_shortcut_gives_the_full_normalisation() {
        for raw in [
            "13800138000",
            "  John  SMITH ",
            "张三",
            "欧阳修",
            "１３８００１３８０００",
            "＋86 (138)",
            "Ａｂｃ",
            "e\u{301}",
            "\u{f900}\u{f901}",
            "ｶﾞｷﾞ",
            "a\u{300}\u{316}",
            "\u{3000}张 三",
            "\u{212b}",
            "ﬁ",
            "",
        ] {
            assert_eq!(nfkc(raw), full_nfkc(raw), "{raw:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn nfkc_shortcut_agrees_on_any_text(raw in proptest::prelude::any::<String>()) {
            proptest::prop_assert_eq!(nfkc(&raw), full_nfkc(&raw));
        }

        #[test]
        fn nfkc_shortcut_agrees_on_cjk_and_marks(raw in "[a-zA-Z0-9 张三李四曾\u{f900}-\u{f90f}\u{300}-\u{316}\u{ff10}-\u{ff5a}\u{ff61}-\u{ff9f}\u{3000}]{0,12}") {
            proptest::prop_assert_eq!(nfkc(&raw), full_nfkc(&raw));
        }
    }

    #[test]
    fn phone_forms_of_one_mobile_agree() {
        for raw in [
            "13800138000",
            "138 0013 8000",
            "138-0013-8000",
            "138.0013.8000",
            "+86 138 0013 8000",
            "+86-13800138000",
            "(+86) 138-0013-8000",
            "0086 13800138000",
            "8613800138000",
            "１３８００１３８０００",
            "＋８６ １３８ ００１３ ８０００",
            "\u{3000}13800138000\u{3000}",
        ] {
            assert_eq!(normalize_phone(raw).as_deref(), Ok("13800138000"), "{raw}");
        }
    }

    #[test]
    fn phone_international_becomes_e164() {
        assert_eq!(
            normalize_phone("+1 (650) 253-0000").unwrap(),
            "+16502530000"
        );
        assert_eq!(
            normalize_phone("0044 20 7946 0958").unwrap(),
            "+442079460958"
        );
        // A Beijing landline with its country code is fine as E.164.
        assert_eq!(
            normalize_phone("+86 10 6552 9988").unwrap(),
            "+861065529988"
        );
    }

    #[test]
    fn phone_errors_say_why_without_the_number() {
        let err = normalize_phone("1380013800").unwrap_err();
        assert_eq!(
            err.to_string(),
            "phone has 10 digits, expected 11 for a mainland mobile"
        );
        assert_eq!(
            normalize_phone("12800138000"),
            Err(NormalizeError::PhoneNotMobile)
        );
        assert_eq!(
            normalize_phone("+1234567"),
            Err(NormalizeError::PhoneE164Length { digits: 7 })
        );
        assert_eq!(
            normalize_phone("+1234567890123456"),
            Err(NormalizeError::PhoneE164Length { digits: 16 })
        );
        assert_eq!(
            normalize_phone("+0123456789"),
            Err(NormalizeError::PhoneE164LeadingZero)
        );
        assert_eq!(
            normalize_phone(" - "),
            Err(NormalizeError::Empty { field: "phone" })
        );
        let err = normalize_phone("138001380OO").unwrap_err();
        assert_eq!(
            err,
            NormalizeError::PhoneBadCharacter {
                found: "a letter",
                position: 9
            }
        );
        assert!(normalize_phone("138+00138000").is_err());
        for raw in [
            "1380013800",
            "12800138000",
            "138001380OO",
            "+1234567890123456",
        ] {
            let message = normalize_phone(raw).unwrap_err().to_string();
            assert!(!message.contains(raw), "{message}");
        }
    }

    #[test]
    fn idcard_check_digit_examples() {
        // GB 11643-1999's worked example.
        assert_eq!(idcard_check_digit("11010519491231002"), Some('X'));
        assert_eq!(idcard_check_digit("44052418800101001"), Some('4'));
        assert_eq!(idcard_check_digit("1101051949123100"), None);
        assert_eq!(idcard_check_digit("1101051949123100a"), None);
    }

    #[test]
    fn idcard_normalises_case_width_and_legacy() {
        assert_eq!(
            normalize_idcard("11010519491231002x").unwrap(),
            "11010519491231002X"
        );
        assert_eq!(
            normalize_idcard("１１０１０５１９４９１２３１００２Ｘ").unwrap(),
            "11010519491231002X"
        );
        assert_eq!(
            normalize_idcard(" 110105 19491231 002X ").unwrap(),
            "11010519491231002X"
        );
        // 15-digit legacy: 110105 491231 002 -> 110105 19 491231 002 + check digit.
        assert_eq!(
            normalize_idcard("110105491231002").unwrap(),
            "11010519491231002X"
        );
    }

    #[test]
    fn idcard_errors() {
        assert_eq!(
            normalize_idcard("110105194912310021"),
            Err(NormalizeError::IdcardCheckDigit)
        );
        assert_eq!(
            normalize_idcard("1101051949123100"),
            Err(NormalizeError::IdcardLength { chars: 16 })
        );
        assert_eq!(
            normalize_idcard("11010519491231A02X"),
            Err(NormalizeError::IdcardNotDigit { position: 15 })
        );
        // Feb 29 in 1990 (not a leap year), with a correct check digit so the date is what fails.
        let first17 = "11010519900229001";
        let id = format!("{first17}{}", idcard_check_digit(first17).unwrap());
        let err = normalize_idcard(&id).unwrap_err();
        assert_eq!(
            err.to_string(),
            "idcard birth date is invalid: february 29 in a year that is not a leap year"
        );
        assert!(!err.to_string().contains(&id));
        // Feb 29 2000 is a leap day (divisible by 400); 1900 is not (divisible by 100).
        let leap = "11010520000229001";
        assert!(normalize_idcard(&format!("{leap}{}", idcard_check_digit(leap).unwrap())).is_ok());
        let not_leap = "11010519000229001";
        assert!(
            normalize_idcard(&format!(
                "{not_leap}{}",
                idcard_check_digit(not_leap).unwrap()
            ))
            .is_err()
        );
        for (date, reason) in [
            ("17991231", "year is before 1800 or after 2100"),
            ("21010101", "year is before 1800 or after 2100"),
            ("19901301", "month is not 01 to 12"),
            ("19900431", "day does not exist in that month"),
            ("19900100", "day does not exist in that month"),
        ] {
            let first17 = format!("110105{date}001");
            let id = format!("{first17}{}", idcard_check_digit(&first17).unwrap());
            assert_eq!(
                normalize_idcard(&id),
                Err(NormalizeError::IdcardBirthDate { reason })
            );
        }
    }

    #[test]
    fn names() {
        assert_eq!(normalize_name("John  SMITH").unwrap(), "john smith");
        assert_eq!(
            normalize_name("  Ｊｏｈｎ\u{3000}Ｓｍｉｔｈ ").unwrap(),
            "john smith"
        );
        // Spaces between Chinese characters are typing habits; between words they stay.
        assert_eq!(normalize_name("张 三").unwrap(), "张三");
        assert_eq!(normalize_name(" 欧阳\u{3000} 修 ").unwrap(), "欧阳修");
        assert_eq!(normalize_name("张 John").unwrap(), "张 john");
        assert_eq!(normalize_name("Li 三").unwrap(), "li 三");
        // Traditional characters fold to simplified.
        assert_eq!(normalize_name("張三豐").unwrap(), "张三丰");
        assert_eq!(normalize_name("歐陽 修").unwrap(), "欧阳修");
        assert_eq!(normalize_name("ÉLODIE Ünal").unwrap(), "élodie ünal");
        assert_eq!(normalize_name("阿卜杜·热合曼").unwrap(), "阿卜杜·热合曼");
        assert_eq!(normalize_name("Li\tLei\n").unwrap(), "li lei");
        assert_eq!(
            normalize_name("   "),
            Err(NormalizeError::Empty { field: "name" })
        );
        assert_eq!(
            normalize_name("a\u{7}b"),
            Err(NormalizeError::ControlCharacter {
                field: "name",
                position: 1
            })
        );
        assert_eq!(
            normalize_name(&"x".repeat(65)),
            Err(NormalizeError::NameTooLong { chars: 65 })
        );
        assert!(normalize_name(&"x".repeat(64)).is_ok());
    }

    #[test]
    fn keywords() {
        assert_eq!(normalize_keyword("  ＶＩＰ－1 ").unwrap(), "VIP-1");
        assert_eq!(
            normalize_keyword(" \t"),
            Err(NormalizeError::Empty { field: "keyword" })
        );
    }
}
