//! Pinyin: the spellings a Chinese name is indexed under, and a typed pinyin lookup as people
//! type it.
//!
//! Index side ([`pinyin_spellings`]): for each combination of the characters' readings (capped
//! at [`MAX_PINYIN_VARIANTS`]), the full spelling (`zhangsan`, in the `__py` sub-field) and the
//! initials (`zs`, in `__ini`). Known surnames at the start of a name are read as surnames
//! ([`super::surnames`]). A reading with ü is spelled with `ü` as the pinyin crate gives it
//! (`lüzhong`), and once more with a plain `u` (`luzhong`): nobody types the diacritic, and in
//! toneless pinyin ü only appears after `l` and `n` (after `j`, `q`, `x`, `y` it is written `u`
//! anyway), so `lu` finds 路 and 吕 alike.
//!
//! Query side ([`typed_pinyin`]): case, spaces, apostrophes, tone marks (`zhāng`) and tone
//! numbers (`zhang1`) are dropped; `v`, `ü` and `u:` all mean ü (`lvzhong` finds 吕中, and
//! only ü readings). `match=pinyin` finds the names with a full or initials spelling equal to
//! the typed letters (an exact term in `__py` or `__ini`); `match=pinyin_prefix` the names with
//! a full spelling starting with them (`zhang`, `zhangs`, `zhangsa` all find 张三): a prefix
//! range over `__py`, the same index walk as a name prefix lookup, and never over initials.

use std::borrow::Cow;

use pinyin::{ToPinyin, ToPinyinMulti};
use unicode_normalization::UnicodeNormalization;

use super::surnames::SURNAME_READINGS;

/// A name yields at most this many pinyin spellings (heteronym combinations). It bounds index
/// growth for names full of polyphonic characters.
pub(super) const MAX_PINYIN_VARIANTS: usize = 8;

/// The pinyin terms of a name, each list sorted and without duplicates.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PinyinSpellings {
    /// Whole spellings (`zhangsan`), and the `u` spelling of each with ü (`lüzhong`,
    /// `luzhong`).
    pub full: Vec<String>,
    /// Initials (`zs`).
    pub initials: Vec<String>,
}

impl PinyinSpellings {
    /// Whether typed pinyin ([`typed_pinyin`]) is one of these spellings, full or initials
    /// (`match=pinyin`).
    pub fn matches(&self, typed: &str) -> bool {
        self.full
            .iter()
            .chain(&self.initials)
            .any(|spelling| spelling == typed)
    }

    /// Whether typed pinyin starts one of the full spellings (`match=pinyin_prefix`).
    pub fn start_with(&self, typed: &str) -> bool {
        self.full.iter().any(|full| full.starts_with(typed))
    }
}

pub(super) fn is_cjk(c: char) -> bool {
    c.to_pinyin().is_some()
}

/// Pinyin spellings of a normalised name: for each heteronym combination (capped), the full
/// spelling and the initials (see the module docs). Names with no Chinese characters yield
/// nothing.
///
/// The combinations are the first [`MAX_PINYIN_VARIANTS`] in odometer order (the first position
/// varies slowest). Readings are the pinyin crate's `&'static str`s, and each combination is
/// written straight into its two output strings: this runs for every indexed name.
pub fn pinyin_spellings(normalized: &str) -> PinyinSpellings {
    if !normalized.chars().any(is_cjk) {
        return PinyinSpellings::default();
    }
    // The candidate readings of every position, flattened: position `i` owns
    // `readings[bounds[i]..bounds[i + 1]]`.
    let mut readings: Vec<Cow<'static, str>> = Vec::new();
    let mut bounds: Vec<usize> = vec![0];
    let mut rest = normalized;
    if let Some((surname, reading)) = SURNAME_READINGS
        .iter()
        .find(|(surname, _)| normalized.starts_with(surname))
    {
        for syllable in reading.split(' ') {
            readings.push(Cow::Borrowed(syllable));
            bounds.push(readings.len());
        }
        rest = &normalized[surname.len()..];
    }
    for c in rest.chars() {
        if c == ' ' {
            continue;
        }
        let first = readings.len();
        if let Some(multi) = c.to_pinyin_multi() {
            for reading in multi {
                let plain = reading.plain();
                if !readings[first..].iter().any(|seen| seen == plain) {
                    readings.push(Cow::Borrowed(plain));
                }
            }
        }
        if readings.len() == first {
            // Latin letters or digits mixed into a Chinese name: keep them as they are.
            readings.push(Cow::Owned(c.to_lowercase().collect()));
        }
        bounds.push(readings.len());
    }
    let positions = bounds.len() - 1;
    // Odometer over the positions' readings, last position fastest.
    let mut choice = vec![0usize; positions];
    let mut out = PinyinSpellings {
        full: Vec::with_capacity(MAX_PINYIN_VARIANTS),
        initials: Vec::with_capacity(MAX_PINYIN_VARIANTS),
    };
    for _ in 0..MAX_PINYIN_VARIANTS {
        let mut full = String::new();
        let mut initials = String::new();
        for (position, &chosen) in choice.iter().enumerate() {
            let reading = &readings[bounds[position] + chosen];
            full.push_str(reading);
            if let Some(initial) = reading.get(..1) {
                initials.push_str(initial);
            }
        }
        if full.contains('ü') {
            out.full.push(full.replace('ü', "u"));
        }
        out.full.push(full);
        out.initials.push(initials);
        let mut position = positions;
        let advanced = loop {
            if position == 0 {
                break false;
            }
            position -= 1;
            choice[position] += 1;
            if bounds[position] + choice[position] < bounds[position + 1] {
                break true;
            }
            choice[position] = 0;
        };
        if !advanced {
            break;
        }
    }
    for list in [&mut out.full, &mut out.initials] {
        list.sort_unstable();
        list.dedup();
    }
    out
}

/// Combining marks of the four tones (NFD): ā á ǎ à.
fn is_tone_mark(c: char) -> bool {
    matches!(c, '\u{0304}' | '\u{0301}' | '\u{030C}' | '\u{0300}')
}

/// A typed pinyin lookup in the form the index spells pinyin: lowercase letters and `ü`, with
/// case, whitespace, apostrophes (`xi'an`), tone marks and tone numbers dropped, and `v`, `ü`
/// and `u:` written `ü`. `None` when anything else is left (Chinese characters, other digits,
/// punctuation) or nothing is.
pub fn typed_pinyin(raw: &str) -> Option<String> {
    let mut out = String::with_capacity(raw.len());
    // NFD splits ǚ into u, the diaeresis and the tone mark, so each is handled on its own.
    for c in raw.nfd().flat_map(char::to_lowercase) {
        match c {
            'a'..='u' | 'w'..='z' => out.push(c),
            'v' => out.push('ü'),
            '\u{0308}' | ':' if out.ends_with('u') => {
                out.pop();
                out.push('ü');
            }
            // Tone numbers follow their syllable.
            '1'..='5' if out.ends_with(|last: char| last.is_ascii_lowercase() || last == 'ü') => {}
            c if is_tone_mark(c) && !out.is_empty() => {}
            c if c.is_whitespace() || c == '\'' || c == '’' => {}
            _ => return None,
        }
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The straightforward version the optimised [`pinyin_spellings`] replaced; the tests below
    /// pin that both give exactly the same terms.
    fn reference_pinyin_spellings(normalized: &str) -> PinyinSpellings {
        if !normalized.chars().any(is_cjk) {
            return PinyinSpellings::default();
        }
        let mut positions: Vec<Vec<String>> = Vec::new();
        let mut rest = normalized;
        if let Some((surname, reading)) = SURNAME_READINGS
            .iter()
            .find(|(surname, _)| normalized.starts_with(surname))
        {
            for syllable in reading.split(' ') {
                positions.push(vec![syllable.to_string()]);
            }
            rest = &normalized[surname.len()..];
        }
        for c in rest.chars() {
            if c == ' ' {
                continue;
            }
            let mut readings: Vec<String> = Vec::new();
            if let Some(multi) = c.to_pinyin_multi() {
                for reading in multi {
                    let plain = reading.plain().to_string();
                    if !readings.contains(&plain) {
                        readings.push(plain);
                    }
                }
            }
            if readings.is_empty() {
                readings.push(c.to_lowercase().collect());
            }
            positions.push(readings);
        }
        let mut combos: Vec<Vec<&str>> = vec![Vec::new()];
        for readings in &positions {
            let mut next = Vec::new();
            for combo in &combos {
                for reading in readings {
                    if next.len() >= MAX_PINYIN_VARIANTS {
                        break;
                    }
                    let mut extended = combo.clone();
                    extended.push(reading.as_str());
                    next.push(extended);
                }
            }
            combos = next;
        }
        let mut out = PinyinSpellings::default();
        for combo in combos {
            let full = combo.concat();
            out.full.push(full.replace('ü', "u"));
            out.full.push(full);
            out.initials
                .push(combo.iter().filter_map(|s| s.get(..1)).collect::<String>());
        }
        for list in [&mut out.full, &mut out.initials] {
            list.sort();
            list.dedup();
        }
        out
    }

    #[test]
    fn pinyin_matches_the_reference_on_examples() {
        for name in [
            "张三",
            "曾小贤",
            "欧阳修",
            "单于长乐",
            "重庆长安行",
            "乐乐乐乐乐乐",
            "张 三丰",
            "李a明",
            "王é",
            "john smith",
            "a",
            "中",
            "行长行长行长行长",
            "吕中",
            "女娲",
            "律绿驴",
        ] {
            assert_eq!(
                pinyin_spellings(name),
                reference_pinyin_spellings(name),
                "{name}"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn pinyin_matches_the_reference(
            name in "(欧阳|单于|长孙|曾|单|乐|吕|女)?[张三李四行长重乐会朝传觉和吕律绿ab1é ]{0,9}"
        ) {
            proptest::prop_assert_eq!(pinyin_spellings(&name), reference_pinyin_spellings(&name));
        }

        /// No typed text panics, and what it yields is what the index spells.
        #[test]
        fn typed_pinyin_yields_index_letters(raw in "\\PC{0,16}") {
            if let Some(typed) = typed_pinyin(&raw) {
                proptest::prop_assert!(typed.chars().all(|c| c.is_ascii_lowercase() || c == 'ü'));
            }
        }
    }

    #[test]
    fn full_and_initials() {
        let spellings = pinyin_spellings("张三");
        assert_eq!(spellings.full, vec!["zhangsan"]);
        assert_eq!(spellings.initials, vec!["zs"]);
        for typed in ["zhangsan", "zs"] {
            assert!(spellings.matches(typed), "{typed}");
        }
        for typed in ["zhang", "zhangsa", "z", "zhangsans", "zsan", "san"] {
            assert!(!spellings.matches(typed), "{typed}");
        }
        for typed in ["zhangsan", "zhang", "zhangs", "zhangsa", "z", "zh"] {
            assert!(spellings.start_with(typed), "{typed}");
        }
        for typed in ["zs", "zhangsans", "hang", "san", "zhangshan"] {
            assert!(!spellings.start_with(typed), "{typed}");
        }
    }

    #[test]
    fn polyphonic_surnames_use_surname_reading() {
        for (name, full, wrong) in [
            ("曾小贤", "zengxiaoxian", "cengxiaoxian"),
            ("单田芳", "shantianfang", "dantianfang"),
            ("仇英", "qiuying", "chouying"),
            ("解缙", "xiejin", "jiejin"),
            ("区志", "ouzhi", "quzhi"),
            ("女娲", "nüwa", "ruwa"),
        ] {
            let spellings = pinyin_spellings(name);
            assert!(
                spellings.full.contains(&full.to_string()),
                "{name}: {spellings:?}"
            );
            assert!(
                !spellings.full.contains(&wrong.to_string()),
                "{name}: {spellings:?}"
            );
        }
        let compound = pinyin_spellings("欧阳修");
        assert!(
            compound.full.contains(&"ouyangxiu".to_string()),
            "{compound:?}"
        );
        assert!(
            compound.initials.contains(&"oyx".to_string()),
            "{compound:?}"
        );
    }

    #[test]
    fn u_umlaut_is_spelled_both_ways_and_typed_any_way() {
        let lv = pinyin_spellings("吕中");
        assert_eq!(lv.full, vec!["luzhong", "lüzhong"]);
        assert_eq!(lv.initials, vec!["lz"]);
        let lu = pinyin_spellings("路中");
        for typed in [
            "lvzhong",
            "lüzhong",
            "LÜ ZHONG",
            "lu:zhong",
            "lǚzhōng",
            "lv3zhong1",
            "lv",
        ] {
            let typed = typed_pinyin(typed).unwrap();
            assert!(typed.starts_with("lü"), "{typed}");
            assert!(lv.start_with(&typed), "{typed}");
            assert!(!lu.start_with(&typed), "{typed}: only ü readings");
        }
        let whole = typed_pinyin("lvzhong").unwrap();
        assert!(lv.matches(&whole) && !lu.matches(&whole));
        let plain = typed_pinyin("luzhong").unwrap();
        assert!(lv.matches(&plain) && lu.matches(&plain));
        let start = typed_pinyin("lu").unwrap();
        assert!(lv.start_with(&start) && lu.start_with(&start));
        assert!(lv.matches("lz"), "initials unaffected");
    }

    #[test]
    fn typed_forms() {
        for (raw, typed) in [
            ("zhangsan", "zhangsan"),
            ("Zhang San", "zhangsan"),
            ("ZHANGSAN", "zhangsan"),
            ("zhāng sān", "zhangsan"),
            ("Zhāng Sān", "zhangsan"),
            ("zhang1san1", "zhangsan"),
            ("xi'an", "xian"),
            ("nǚ", "nü"),
            ("nu:3", "nü"),
            ("NV", "nü"),
            ("ZS", "zs"),
        ] {
            assert_eq!(typed_pinyin(raw).as_deref(), Some(typed), "{raw}");
        }
        for raw in [
            "",
            "  ",
            "张三",
            "zhang-san",
            "13800138000",
            "6zhang",
            "a:b",
            "zhang9",
        ] {
            assert_eq!(typed_pinyin(raw), None, "{raw}");
        }
    }

    #[test]
    fn latin_names_have_no_pinyin() {
        assert_eq!(pinyin_spellings("john smith"), PinyinSpellings::default());
    }
}
