//! How field values become index terms, and how a lookup value becomes a query.
//!
//! Index time and query time share this module so that they can never disagree, and so that the
//! query service can re-check a fetched row against the lookup with exactly the same rules
//! ([`Condition::matches`]).
//!
//! Every indexed field is a tantivy `raw` (untokenised) field: hbidx produces the terms itself.
//! - phone: only its digits reversed, in a `__tail` field. An exact lookup is that one term; a
//!   "last 4 digits" lookup is a prefix range over the reversed terms. (Indexing every suffix as
//!   its own term instead would add eight mostly-unique terms per row, which made the term
//!   dictionary, and the indexing time, several times larger. The normalised number itself was
//!   indexed too until the reversed term was found to answer exact lookups as well: one unique
//!   term less per row is ~5% less indexing CPU, since unique terms are what the term
//!   dictionary's FST build pays for.)
//! - idcard, keyword: the normalised value (exact).
//! - name: the normalised name (exact; a prefix lookup is a range over these terms); character
//!   1-grams and 2-grams in `__gram` (CJK partial match: a query of n ≥ 2 chars must contain all
//!   of its bigrams, and the fetched row is re-checked for the real substring); full pinyin and
//!   pinyin initials in `__py` (`zhangsan` and `zs` find 张三).
//!
//! A **blind** field (`blind = true`: phone, idcard, keyword) is indexed as keyed hashes
//! (HMAC-SHA-256 under the blind key, [`hbidx_schema::BlindKey`]) of the same normalised values,
//! so the index files never hold the value:
//! - its exact field gets the tag of the normalised value;
//! - a phone's `__tail` gets one tag per suffix of its digits at least `phone_suffix_min` long
//!   (a hash has no prefixes to range over), and a suffix lookup is that one tag.
//!
//! Prefix and substring lookups can't work on hashes and are refused. The row state the index
//! keeps ([`crate::state`]) holds these tags instead of the value ([`blind_state_value`]); the
//! lookup's [`Condition`] keeps the normalised plaintext in memory only, to re-check fetched
//! rows against the store's values.

use std::borrow::Cow;

use hbidx_schema::BlindKey;
use hbidx_schema::config::{FieldKind, IndexedField};
use hbidx_schema::normalize;
use pinyin::{ToPinyin, ToPinyinMulti};

/// A name yields at most this many pinyin spellings (heteronym combinations). It bounds index
/// growth for names full of polyphonic characters.
const MAX_PINYIN_VARIANTS: usize = 8;

/// Surnames whose reading differs from the character's most common reading, plus compound
/// surnames. The pinyin crate gives the most frequent reading of a character (曾 → ceng), which
/// is the known complaint about ES pinyin plugins; as the first character of a name these are
/// surnames and read this way. Compound surnames list one reading per character, separated by
/// a space, so their initials come out right (欧阳修 → `oyx`).
const SURNAME_READINGS: &[(&str, &str)] = &[
    ("欧阳", "ou yang"),
    ("司马", "si ma"),
    ("诸葛", "zhu ge"),
    ("上官", "shang guan"),
    ("尉迟", "yu chi"),
    ("万俟", "mo qi"),
    ("长孙", "zhang sun"),
    ("单于", "chan yu"),
    ("令狐", "ling hu"),
    ("皇甫", "huang fu"),
    ("澹台", "tan tai"),
    ("公孙", "gong sun"),
    ("夏侯", "xia hou"),
    ("东方", "dong fang"),
    ("慕容", "mu rong"),
    ("曾", "zeng"),
    ("单", "shan"),
    ("仇", "qiu"),
    ("解", "xie"),
    ("区", "ou"),
    ("朴", "piao"),
    ("查", "zha"),
    ("翟", "zhai"),
    ("乐", "yue"),
    ("盖", "ge"),
    ("缪", "miao"),
    ("秘", "bi"),
    ("覃", "qin"),
    ("尉", "yu"),
    ("那", "na"),
    ("任", "ren"),
    ("员", "yun"),
    ("句", "gou"),
    ("种", "chong"),
    ("召", "shao"),
    ("折", "she"),
    ("繁", "po"),
    ("纪", "ji"),
    ("燕", "yan"),
    ("都", "du"),
    ("宁", "ning"),
    ("沈", "shen"),
    ("重", "chong"),
    ("薄", "bo"),
    ("蕃", "pi"),
    ("黑", "he"),
    ("车", "che"),
    ("贾", "jia"),
    ("柏", "bai"),
    ("华", "hua"),
    ("曲", "qu"),
    ("长", "chang"),
    ("过", "guo"),
    ("隗", "wei"),
    ("阚", "kan"),
];

/// The terms a field value contributes to the index, per sub-field suffix ("" = the exact field).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FieldTerms {
    pub exact: String,
    /// Phone digits reversed, for suffix lookups.
    pub tail: Option<String>,
    pub gram: Vec<String>,
    pub pinyin: Vec<String>,
}

/// Normalises `raw` for `kind` and produces its index terms.
pub fn field_terms(kind: FieldKind, raw: &str) -> Result<FieldTerms, normalize::NormalizeError> {
    let exact = kind.normalize(raw)?;
    let mut terms = FieldTerms::default();
    match kind {
        FieldKind::Phone => {
            terms.tail = Some(reversed_digits(&exact));
        }
        FieldKind::Name => {
            terms.gram = grams(&exact);
            terms.pinyin = pinyin_spellings(&exact);
        }
        FieldKind::Idcard | FieldKind::Keyword => {}
    }
    terms.exact = exact;
    Ok(terms)
}

/// What a blind field's state holds when its value could not be hashed (it failed
/// normalisation, or the field has no key): never the value itself.
const BLIND_INVALID: &str = "!";

/// The tag of a blind field's whole normalised value (its exact term).
fn blind_exact_tag(key: &BlindKey, field: &str, normalized: &str) -> String {
    key.tag(&["exact", field, normalized])
}

/// The tag of the last digits of a blind phone field (a suffix term).
fn blind_tail_tag(key: &BlindKey, field: &str, digits: &str) -> String {
    key.tag(&["tail", field, digits])
}

/// What the index keeps of a blind field's raw value, in the row state and nowhere else: its
/// terms, space-separated (the exact tag first, then a phone's suffix tags, shortest suffix
/// first), or `!` when the value is invalid. Everything that compares or rebuilds a blind
/// column's state (the writer, drift checks) goes through here, so the store's plaintext and
/// the index's tags are compared in one form.
pub fn blind_state_value(field: &IndexedField, raw: &[u8]) -> Vec<u8> {
    let Some(key) = &field.blind_key else {
        return BLIND_INVALID.as_bytes().to_vec();
    };
    let Ok(normalized) = field.kind.normalize(&String::from_utf8_lossy(raw)) else {
        return BLIND_INVALID.as_bytes().to_vec();
    };
    let mut out = blind_exact_tag(key, &field.name, &normalized);
    if field.kind == FieldKind::Phone {
        let digits: String = normalized.chars().filter(char::is_ascii_digit).collect();
        for len in field.phone_suffix_min..=digits.len() {
            out.push(' ');
            out.push_str(&blind_tail_tag(
                key,
                &field.name,
                &digits[digits.len() - len..],
            ));
        }
    }
    out.into_bytes()
}

/// The terms of a blind field from its state value ([`blind_state_value`]): the exact tag and
/// the suffix tags. `None` for an invalid value.
pub fn blind_terms(state_value: &[u8]) -> Option<(&str, impl Iterator<Item = &str>)> {
    let text = std::str::from_utf8(state_value).ok()?;
    let mut tags = text.split(' ');
    let exact = tags
        .next()
        .filter(|tag| !tag.is_empty() && *tag != BLIND_INVALID)?;
    Some((exact, tags))
}

/// 1-grams and 2-grams over the characters of each whitespace-separated word.
fn grams(normalized: &str) -> Vec<String> {
    // Slices of the name, sorted and deduplicated before anything is copied.
    let mut slices: Vec<&str> = Vec::new();
    for word in normalized.split(' ') {
        let mut starts = word.char_indices().map(|(i, _)| i).peekable();
        while let Some(start) = starts.next() {
            let second = starts.peek().copied().unwrap_or(word.len());
            slices.push(&word[start..second]);
            if second < word.len() {
                let end = word[second..]
                    .chars()
                    .next()
                    .map_or(word.len(), |c| second + c.len_utf8());
                slices.push(&word[start..end]);
            }
        }
    }
    slices.sort_unstable();
    slices.dedup();
    slices.into_iter().map(str::to_owned).collect()
}

/// The bigrams a partial query must all hit (or its only character).
fn query_grams(normalized: &str) -> Vec<String> {
    let mut out = Vec::new();
    for word in normalized.split(' ') {
        let chars: Vec<char> = word.chars().collect();
        if chars.len() == 1 {
            out.push(word.to_string());
        }
        for pair in chars.windows(2) {
            out.push(pair.iter().collect());
        }
    }
    out.sort();
    out.dedup();
    out
}

fn is_cjk(c: char) -> bool {
    c.to_pinyin().is_some()
}

/// Pinyin spellings of a name: for each heteronym combination (capped), the full spelling
/// (`zhangsan`) and the initials (`zs`). Names with no Chinese characters yield nothing. Known
/// surnames at the start of the name use their surname reading only.
///
/// The combinations are the first [`MAX_PINYIN_VARIANTS`] in odometer order (the first position
/// varies slowest). Readings are the pinyin crate's `&'static str`s, and each combination is
/// written straight into its two output strings: this runs for every indexed name.
pub fn pinyin_spellings(normalized: &str) -> Vec<String> {
    if !normalized.chars().any(is_cjk) {
        return Vec::new();
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
    let mut out = Vec::with_capacity(2 * MAX_PINYIN_VARIANTS);
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
        out.push(full);
        out.push(initials);
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
    out.sort();
    out.dedup();
    out
}

/// How a name lookup matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchMode {
    Exact,
    Prefix,
    Partial,
    Pinyin,
}

impl MatchMode {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "exact" => Some(Self::Exact),
            "prefix" => Some(Self::Prefix),
            "partial" => Some(Self::Partial),
            "pinyin" => Some(Self::Pinyin),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Exact => "exact",
            Self::Prefix => "prefix",
            Self::Partial => "partial",
            Self::Pinyin => "pinyin",
        }
    }
}

/// What a condition asks of one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConditionOp {
    /// The normalised value equals this.
    Exact(String),
    /// The phone number ends with these digits.
    Suffix(String),
    /// The normalised name starts with this.
    Prefix(String),
    /// The normalised name contains this.
    Partial(String),
    /// One of the name's pinyin spellings (full or initials) equals this.
    Pinyin(String),
}

/// One validated lookup condition on one indexed field. Several conditions combine as AND.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// The indexed field's name in the table config.
    pub field: String,
    pub kind: FieldKind,
    /// The normalised lookup value, in plaintext even on a blind field: [`Condition::matches`]
    /// re-checks the store's rows with it. Kept in memory only.
    pub op: ConditionOp,
    /// The key of a blind field: its terms are tags of `op`'s value under it.
    pub blind: Option<BlindKey>,
}

/// The sub-field a condition is looked up in, and the terms that must all be present.
pub struct ConditionTerms {
    pub subfield_suffix: &'static str,
    pub terms: Vec<String>,
    /// The terms are prefixes: a document matches when it has any term starting with each.
    pub prefix: bool,
}

/// The digits of a phone number, last first.
fn reversed_digits(phone: &str) -> String {
    phone.chars().rev().filter(|c| c.is_ascii_digit()).collect()
}

impl Condition {
    /// Validates and normalises a lookup value. `param` is the query parameter name used in
    /// errors, so a bad request names exactly what the caller sent.
    pub fn build(
        param: &str,
        field: &hbidx_schema::config::IndexedField,
        mode: MatchMode,
        suffix: bool,
        raw: &str,
    ) -> Result<Self, crate::IndexerError> {
        let invalid = |reason: String| crate::IndexerError::InvalidCondition {
            field: param.to_string(),
            reason,
        };
        let blind = if field.blind {
            let Some(key) = &field.blind_key else {
                return Err(invalid(format!(
                    "field {:?} is blind and this server has no blind key",
                    field.name
                )));
            };
            if !suffix && mode != MatchMode::Exact {
                let allowed = if field.kind == FieldKind::Phone {
                    "exact and phone_suffix lookups"
                } else {
                    "exact lookups"
                };
                return Err(invalid(format!(
                    "match={} does not work on blind field {:?}: its index holds keyed hashes of whole values, not the values, so only {allowed} work",
                    mode.as_str(),
                    field.name
                )));
            }
            Some(key.clone())
        } else {
            None
        };
        let op = if suffix {
            if field.kind != FieldKind::Phone {
                return Err(invalid("suffix lookups are only for phone fields".into()));
            }
            let digits = raw.trim();
            if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
                return Err(invalid("a phone suffix must be digits only".into()));
            }
            if digits.len() < field.phone_suffix_min {
                return Err(invalid(format!(
                    "a phone suffix needs at least {} digits, got {}",
                    field.phone_suffix_min,
                    digits.len()
                )));
            }
            ConditionOp::Suffix(digits.to_string())
        } else {
            match (field.kind, mode) {
                (_, MatchMode::Exact) => ConditionOp::Exact(
                    field
                        .kind
                        .normalize(raw)
                        .map_err(|err| invalid(err.to_string()))?,
                ),
                (FieldKind::Name, MatchMode::Prefix) => ConditionOp::Prefix(
                    normalize::normalize_name(raw).map_err(|err| invalid(err.to_string()))?,
                ),
                (FieldKind::Name, MatchMode::Partial) => ConditionOp::Partial(
                    normalize::normalize_name(raw).map_err(|err| invalid(err.to_string()))?,
                ),
                (FieldKind::Name, MatchMode::Pinyin) => {
                    let spelled: String = raw
                        .chars()
                        .filter(|c| !c.is_whitespace() && *c != '\'')
                        .flat_map(char::to_lowercase)
                        .collect();
                    if spelled.is_empty() || !spelled.chars().all(|c| c.is_ascii_lowercase()) {
                        return Err(invalid(
                            "a pinyin lookup takes latin letters only, e.g. zhangsan or zs".into(),
                        ));
                    }
                    ConditionOp::Pinyin(spelled)
                }
                (kind, mode) => {
                    return Err(invalid(format!(
                        "match={} is not supported for {} fields (only exact)",
                        mode.as_str(),
                        kind.as_str()
                    )));
                }
            }
        };
        Ok(Self {
            field: field.name.clone(),
            kind: field.kind,
            op,
            blind,
        })
    }

    /// The index terms that must all be present for a document to be a candidate.
    pub fn terms(&self) -> ConditionTerms {
        if let Some(key) = &self.blind {
            return match &self.op {
                ConditionOp::Exact(value) => ConditionTerms {
                    subfield_suffix: "",
                    terms: vec![blind_exact_tag(key, &self.field, value)],
                    prefix: false,
                },
                ConditionOp::Suffix(digits) => ConditionTerms {
                    subfield_suffix: TAIL,
                    terms: vec![blind_tail_tag(key, &self.field, digits)],
                    prefix: false,
                },
                // `build` refuses every other match on a blind field; a term no document has
                // keeps a condition made by hand from matching everything.
                _ => ConditionTerms {
                    subfield_suffix: "",
                    terms: vec![BLIND_INVALID.to_string()],
                    prefix: false,
                },
            };
        }
        match &self.op {
            // A phone number is indexed only reversed (see the module docs).
            ConditionOp::Exact(value) if self.kind == FieldKind::Phone => ConditionTerms {
                subfield_suffix: TAIL,
                terms: vec![reversed_digits(value)],
                prefix: false,
            },
            ConditionOp::Exact(value) => ConditionTerms {
                subfield_suffix: "",
                terms: vec![value.clone()],
                prefix: false,
            },
            ConditionOp::Suffix(digits) => ConditionTerms {
                subfield_suffix: TAIL,
                terms: vec![reversed_digits(digits)],
                prefix: true,
            },
            ConditionOp::Prefix(prefix) => ConditionTerms {
                subfield_suffix: "",
                terms: vec![prefix.clone()],
                prefix: true,
            },
            ConditionOp::Partial(part) => ConditionTerms {
                subfield_suffix: GRAM,
                terms: query_grams(part),
                prefix: false,
            },
            ConditionOp::Pinyin(spelled) => ConditionTerms {
                subfield_suffix: PINYIN,
                terms: vec![spelled.clone()],
                prefix: false,
            },
        }
    }

    /// Whether a row's current raw value satisfies this condition. The query service calls it on
    /// every fetched row, so an index entry that has gone stale never reaches the caller.
    pub fn matches(&self, raw: &str) -> bool {
        let Ok(normalized) = self.kind.normalize(raw) else {
            return false;
        };
        match &self.op {
            ConditionOp::Exact(value) => normalized == *value,
            ConditionOp::Suffix(digits) => normalized.ends_with(digits.as_str()),
            ConditionOp::Prefix(prefix) => normalized.starts_with(prefix.as_str()),
            ConditionOp::Partial(part) => normalized.contains(part.as_str()),
            ConditionOp::Pinyin(spelled) => pinyin_spellings(&normalized).contains(spelled),
        }
    }
}

/// Sub-field name suffixes. Field names in the config are `[a-z][a-z0-9_]*`, and these use a
/// double underscore so they can't collide with a configured field.
pub const TAIL: &str = "__tail";
pub const GRAM: &str = "__gram";
pub const PINYIN: &str = "__py";

#[cfg(test)]
mod tests {
    use super::*;

    /// The straightforward versions the optimised [`grams`] and [`pinyin_spellings`] replaced;
    /// the tests below pin that both give exactly the same terms.
    fn reference_grams(normalized: &str) -> Vec<String> {
        let mut out = Vec::new();
        for word in normalized.split(' ') {
            let chars: Vec<char> = word.chars().collect();
            for (i, c) in chars.iter().enumerate() {
                out.push(c.to_string());
                if let Some(next) = chars.get(i + 1) {
                    out.push([*c, *next].iter().collect());
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }

    fn reference_pinyin_spellings(normalized: &str) -> Vec<String> {
        if !normalized.chars().any(is_cjk) {
            return Vec::new();
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
        let mut out = Vec::new();
        for combo in combos {
            out.push(combo.concat());
            out.push(combo.iter().filter_map(|s| s.get(..1)).collect::<String>());
        }
        out.sort();
        out.dedup();
        out
    }

    #[test]
    fn grams_and_pinyin_match_the_reference_on_examples() {
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
        ] {
            assert_eq!(grams(name), reference_grams(name), "{name}");
            assert_eq!(
                pinyin_spellings(name),
                reference_pinyin_spellings(name),
                "{name}"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn grams_and_pinyin_match_the_reference(
            name in "(欧阳|单于|长孙|曾|单|乐)?[张三李四行长重乐会朝传觉和ab1é ]{0,9}"
        ) {
            proptest::prop_assert_eq!(grams(&name), reference_grams(&name));
            proptest::prop_assert_eq!(pinyin_spellings(&name), reference_pinyin_spellings(&name));
        }
    }

    #[test]
    fn pinyin_full_and_initials() {
        let spellings = pinyin_spellings("张三");
        assert!(spellings.contains(&"zhangsan".to_string()), "{spellings:?}");
        assert!(spellings.contains(&"zs".to_string()), "{spellings:?}");
    }

    #[test]
    fn polyphonic_surnames_use_surname_reading() {
        for (name, full, wrong) in [
            ("曾小贤", "zengxiaoxian", "cengxiaoxian"),
            ("单田芳", "shantianfang", "dantianfang"),
            ("仇英", "qiuying", "chouying"),
            ("解缙", "xiejin", "jiejin"),
            ("区志", "ouzhi", "quzhi"),
        ] {
            let spellings = pinyin_spellings(name);
            assert!(
                spellings.contains(&full.to_string()),
                "{name}: {spellings:?}"
            );
            assert!(
                !spellings.contains(&wrong.to_string()),
                "{name}: {spellings:?}"
            );
        }
        let compound = pinyin_spellings("欧阳修");
        assert!(compound.contains(&"ouyangxiu".to_string()), "{compound:?}");
        assert!(compound.contains(&"oyx".to_string()), "{compound:?}");
    }

    #[test]
    fn latin_names_have_no_pinyin() {
        assert!(pinyin_spellings("john smith").is_empty());
    }

    #[test]
    fn phone_tail_terms() {
        let terms = field_terms(FieldKind::Phone, "138-0013-8000").unwrap();
        assert_eq!(terms.exact, "13800138000");
        assert_eq!(terms.tail.as_deref(), Some("00083100831"));
        // A suffix lookup becomes a prefix of the reversed digits.
        let field = hbidx_schema::config::IndexedField {
            name: "phone".into(),
            kind: FieldKind::Phone,
            column: "info:phone".into(),
            phone_suffix_min: 4,
            blind: false,
            blind_key: None,
        };
        let condition = Condition::build("phone_suffix", &field, MatchMode::Exact, true, "8000")
            .unwrap()
            .terms();
        assert_eq!(condition.subfield_suffix, TAIL);
        assert_eq!(condition.terms, vec!["0008"]);
        assert!(condition.prefix);
        assert!("00083100831".starts_with(&condition.terms[0]));
        // An exact lookup is the whole reversed number, as one term (the index writes no other
        // phone term).
        let exact = Condition::build(
            "phone",
            &field,
            MatchMode::Exact,
            false,
            "+86 138 0013 8000",
        )
        .unwrap()
        .terms();
        assert_eq!(exact.subfield_suffix, TAIL);
        assert_eq!(exact.terms, vec!["00083100831"]);
        assert!(!exact.prefix);
    }

    #[test]
    fn partial_grams_cover_substrings() {
        let terms = field_terms(FieldKind::Name, "张三丰").unwrap();
        for gram in query_grams("三丰") {
            assert!(terms.gram.contains(&gram));
        }
    }

    fn blind_field(kind: FieldKind, name: &str) -> IndexedField {
        IndexedField {
            name: name.into(),
            kind,
            column: format!("info:{name}"),
            phone_suffix_min: 4,
            blind: true,
            blind_key: Some(BlindKey::new("0123456789abcdef0123456789abcdef").unwrap()),
        }
    }

    #[test]
    fn blind_phone_state_holds_tags_that_lookups_find() {
        let field = blind_field(FieldKind::Phone, "phone");
        let state = blind_state_value(&field, "+86 138-0013-8000".as_bytes());
        let text = String::from_utf8(state.clone()).unwrap();
        for plain in ["13800138000", "8000", "00138000", "0083100831"] {
            assert!(!text.contains(plain), "{text}");
        }
        // The same number written another way has the same state.
        assert_eq!(state, blind_state_value(&field, b"13800138000"));
        let (exact, tails) = blind_terms(&state).unwrap();
        let tails: Vec<&str> = tails.collect();
        // Suffixes of 4..=11 digits.
        assert_eq!(tails.len(), 8);

        let lookup = |suffix: bool, mode: MatchMode, raw: &str| {
            Condition::build("phone", &field, mode, suffix, raw).map(|c| c.terms())
        };
        let terms = lookup(false, MatchMode::Exact, "138 0013 8000").unwrap();
        assert_eq!(terms.subfield_suffix, "");
        assert_eq!(terms.terms, vec![exact.to_string()]);
        assert!(!terms.prefix);
        for suffix in ["8000", "38000", "13800138000"] {
            let terms = lookup(true, MatchMode::Exact, suffix).unwrap();
            assert_eq!(terms.subfield_suffix, TAIL);
            assert!(!terms.prefix, "a hash has no prefixes");
            assert!(tails.contains(&terms.terms[0].as_str()), "{suffix}");
        }
        let other = lookup(true, MatchMode::Exact, "9000").unwrap();
        assert!(!tails.contains(&other.terms[0].as_str()));

        // The re-check still compares plaintext (the store's row).
        let condition =
            Condition::build("phone_suffix", &field, MatchMode::Exact, true, "8000").unwrap();
        assert!(condition.matches("13800138000"));
        assert!(!condition.matches("13800139000"));
    }

    #[test]
    fn blind_fields_refuse_prefix_and_partial_naming_the_field() {
        let field = blind_field(FieldKind::Idcard, "idcard");
        for mode in [MatchMode::Prefix, MatchMode::Partial] {
            let err = Condition::build("idcard", &field, mode, false, "110101")
                .unwrap_err()
                .to_string();
            assert!(err.contains("blind field \"idcard\""), "{err}");
            assert!(err.contains("only exact lookups"), "{err}");
        }
        let keyless = IndexedField {
            blind_key: None,
            ..field.clone()
        };
        assert!(Condition::build("idcard", &keyless, MatchMode::Exact, false, "x").is_err());
        assert_eq!(blind_state_value(&keyless, b"11010519491231002X"), b"!");
    }

    #[test]
    fn blind_invalid_values_keep_no_plaintext() {
        let field = blind_field(FieldKind::Idcard, "idcard");
        assert_eq!(blind_state_value(&field, b"110105194912310021"), b"!");
        assert!(blind_terms(b"!").is_none());
        let valid = blind_state_value(&field, b"11010519491231002x");
        let (exact, mut tails) = blind_terms(&valid).unwrap();
        assert_eq!(exact.len(), 32);
        assert!(tails.next().is_none(), "only phones have suffix tags");
        let condition = Condition::build(
            "idcard",
            &field,
            MatchMode::Exact,
            false,
            "11010519491231002X",
        )
        .unwrap();
        assert_eq!(condition.terms().terms, vec![exact.to_string()]);
    }
}
