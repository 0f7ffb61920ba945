//! Chinese characters in names: which characters are Han ideographs, and traditional characters
//! folded to their simplified forms, so that 張三 (HK/TW/overseas records) and 张三 are one name
//! to the index and to lookups ([`crate::normalize::normalize_name`]).
//!
//! The table is OpenCC's traditional-to-simplified character table as the `hanconv` crate
//! ships it (MIT; the OpenCC data is Apache-2.0). It is applied one character at a time, not
//! with hanconv's phrase-aware converter: a name is not a phrase of running text, and a
//! per-character fold keeps prefixes and substrings intact (the fold of `張三` is a prefix of
//! the fold of `張三豐`), which prefix and partial lookups and their re-check rely on.
//!
//! A traditional character that is also written as itself in simplified text (乾 → 干 or 乾,
//! 於 → 于 or 於, 藉) is kept as written: folding 乾 to 干 would merge two surnames and give
//! 乾 the wrong pinyin.

use std::sync::LazyLock;

use hanconv::RawDictionary;

/// Traditional → simplified, one character each, sorted by the traditional character.
static TO_SIMPLIFIED: LazyLock<Vec<(char, char)>> = LazyLock::new(|| {
    let mut table: Vec<(char, char)> = RawDictionary::TSCharacters
        .var_iter()
        .filter_map(|(traditional, simplified)| {
            let from = single_char(traditional)?;
            // The first candidate is the usual simplified form; a character listed among its
            // own candidates stays as written (see the module docs).
            if simplified.contains(&traditional) {
                return None;
            }
            let to = single_char(simplified.first()?)?;
            (from != to).then_some((from, to))
        })
        .collect();
    table.sort_unstable();
    table.dedup_by_key(|(from, _)| *from);
    table
});

fn single_char(text: &str) -> Option<char> {
    let mut chars = text.chars();
    let c = chars.next()?;
    chars.next().is_none().then_some(c)
}

/// Whether `c` is a Han ideograph (CJK unified ideographs and their extensions, compatibility
/// ideographs, 〇). Whitespace between two of them is not a word boundary in a name.
pub fn is_han(c: char) -> bool {
    matches!(c,
        '\u{3007}'
        | '\u{3400}'..='\u{4DBF}'
        | '\u{4E00}'..='\u{9FFF}'
        | '\u{F900}'..='\u{FAFF}'
        | '\u{20000}'..='\u{3FFFF}')
}

/// The simplified form of a traditional character, or `None` when `c` is not one (simplified,
/// shared by both scripts, or not Chinese at all).
pub fn simplified(c: char) -> Option<char> {
    if !is_han(c) {
        return None;
    }
    let table = &*TO_SIMPLIFIED;
    table
        .binary_search_by_key(&c, |(from, _)| *from)
        .ok()
        .map(|at| table[at].1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traditional_surnames_and_given_names_fold() {
        for (traditional, simple) in [
            ('張', '张'),
            ('陳', '陈'),
            ('呂', '吕'),
            ('歐', '欧'),
            ('陽', '阳'),
            ('單', '单'),
            ('區', '区'),
            ('樂', '乐'),
            ('蓋', '盖'),
            ('閭', '闾'),
            ('綠', '绿'),
            ('豐', '丰'),
        ] {
            assert_eq!(simplified(traditional), Some(simple), "{traditional}");
        }
    }

    #[test]
    fn simplified_shared_and_ambiguous_characters_stay() {
        for c in ['张', '三', '王', '李', '乾', '於', '藉', 'a', 'É', '·'] {
            assert_eq!(simplified(c), None, "{c}");
        }
    }

    #[test]
    fn han_ranges() {
        assert!(is_han('张') && is_han('〇') && is_han('\u{20000}') && is_han('\u{3400}'));
        assert!(!is_han('a') && !is_han('·') && !is_han(' ') && !is_han('ー'));
    }
}
