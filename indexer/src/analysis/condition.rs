//! A lookup condition: [`Condition::build`] validates and normalises what the caller sent,
//! [`Condition::terms`] says which index terms answer it, and [`Condition::matches`] re-checks a
//! fetched row with the same rules, so a stale index entry never reaches the caller.

use hbidx_schema::BlindKey;
use hbidx_schema::config::FieldKind;
use hbidx_schema::normalize;

use super::blind::{BLIND_INVALID, blind_exact_tag, blind_tail_tag};
use super::grams::query_grams;
use super::pinyin::{pinyin_spellings, typed_pinyin};
use super::{GRAM, INITIALS, PINYIN, TAIL, reversed_digits};

/// How a name lookup matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchMode {
    Exact,
    Prefix,
    Partial,
    Pinyin,
    PinyinPrefix,
}

impl MatchMode {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "exact" => Some(Self::Exact),
            "prefix" => Some(Self::Prefix),
            "partial" => Some(Self::Partial),
            "pinyin" => Some(Self::Pinyin),
            "pinyin_prefix" => Some(Self::PinyinPrefix),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Exact => "exact",
            Self::Prefix => "prefix",
            Self::Partial => "partial",
            Self::Pinyin => "pinyin",
            Self::PinyinPrefix => "pinyin_prefix",
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
    /// Typed pinyin ([`super::pinyin::typed_pinyin`]: lowercase letters and `ü`): one of the
    /// name's full or initials spellings equals it.
    Pinyin(String),
    /// Typed pinyin: one of the name's full spellings starts with it.
    PinyinPrefix(String),
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionTerms {
    pub subfield_suffix: &'static str,
    pub terms: Vec<String>,
    /// The terms are prefixes: a document matches when it has any term starting with each.
    pub prefix: bool,
}

impl ConditionTerms {
    fn one(subfield_suffix: &'static str, term: String, prefix: bool) -> Vec<Self> {
        vec![Self {
            subfield_suffix,
            terms: vec![term],
            prefix,
        }]
    }
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
                (FieldKind::Name, MatchMode::Pinyin | MatchMode::PinyinPrefix) => {
                    let typed = typed_pinyin(raw).ok_or_else(|| {
                        invalid(
                            "a pinyin lookup takes pinyin letters only (tone marks or numbers, \
                             and v or ü for ü, allowed), e.g. zhangsan, lvzhong or zs"
                                .into(),
                        )
                    })?;
                    if mode == MatchMode::Pinyin {
                        ConditionOp::Pinyin(typed)
                    } else {
                        ConditionOp::PinyinPrefix(typed)
                    }
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

    /// The index terms of the lookup: a document is a candidate when it has every term of one
    /// of these alternatives. Only a pinyin lookup has two (an initials spelling or a full
    /// spelling equal to it); the others have one.
    pub fn terms(&self) -> Vec<ConditionTerms> {
        if let Some(key) = &self.blind {
            return match &self.op {
                ConditionOp::Exact(value) => {
                    ConditionTerms::one("", blind_exact_tag(key, &self.field, value), false)
                }
                ConditionOp::Suffix(digits) => {
                    ConditionTerms::one(TAIL, blind_tail_tag(key, &self.field, digits), false)
                }
                // `build` refuses every other match on a blind field; a term no document has
                // keeps a condition made by hand from matching everything.
                _ => ConditionTerms::one("", BLIND_INVALID.to_string(), false),
            };
        }
        match &self.op {
            // A phone number is indexed only reversed (see the module docs).
            ConditionOp::Exact(value) if self.kind == FieldKind::Phone => {
                ConditionTerms::one(TAIL, reversed_digits(value), false)
            }
            ConditionOp::Exact(value) => ConditionTerms::one("", value.clone(), false),
            ConditionOp::Suffix(digits) => ConditionTerms::one(TAIL, reversed_digits(digits), true),
            // A short prefix is the name itself or one `__head` term (see the module docs).
            ConditionOp::Prefix(prefix) if prefix.chars().count() <= super::HEAD_CHARS => vec![
                ConditionTerms {
                    subfield_suffix: "",
                    terms: vec![prefix.clone()],
                    prefix: false,
                },
                ConditionTerms {
                    subfield_suffix: super::HEAD,
                    terms: vec![prefix.clone()],
                    prefix: false,
                },
            ],
            ConditionOp::Prefix(prefix) => ConditionTerms::one("", prefix.clone(), true),
            ConditionOp::Partial(part) => vec![ConditionTerms {
                subfield_suffix: GRAM,
                terms: query_grams(part),
                prefix: false,
            }],
            ConditionOp::Pinyin(typed) => vec![
                ConditionTerms {
                    subfield_suffix: INITIALS,
                    terms: vec![typed.clone()],
                    prefix: false,
                },
                ConditionTerms {
                    subfield_suffix: PINYIN,
                    terms: vec![typed.clone()],
                    prefix: false,
                },
            ],
            // The same index walk as a name prefix lookup: one prefix range of terms.
            ConditionOp::PinyinPrefix(typed) => ConditionTerms::one(PINYIN, typed.clone(), true),
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
            ConditionOp::Pinyin(typed) => pinyin_spellings(&normalized).matches(typed),
            ConditionOp::PinyinPrefix(typed) => pinyin_spellings(&normalized).start_with(typed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phone_tail_terms() {
        let terms = super::super::field_terms(FieldKind::Phone, "138-0013-8000").unwrap();
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
            .terms()
            .remove(0);
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
        .terms()
        .remove(0);
        assert_eq!(exact.subfield_suffix, TAIL);
        assert_eq!(exact.terms, vec!["00083100831"]);
        assert!(!exact.prefix);
    }

    fn name_field() -> hbidx_schema::config::IndexedField {
        hbidx_schema::config::IndexedField {
            name: "name".into(),
            kind: FieldKind::Name,
            column: "info:name".into(),
            phone_suffix_min: 4,
            blind: false,
            blind_key: None,
        }
    }

    #[test]
    fn pinyin_lookups_are_a_whole_spelling_or_a_full_spelling_prefix() {
        let field = name_field();
        let condition =
            Condition::build("name", &field, MatchMode::Pinyin, false, "Lv Zhong").unwrap();
        assert_eq!(condition.op, ConditionOp::Pinyin("lüzhong".into()));
        let terms = condition.terms();
        assert_eq!(terms.len(), 2);
        assert_eq!(
            (terms[0].subfield_suffix, terms[0].prefix),
            (INITIALS, false)
        );
        assert_eq!((terms[1].subfield_suffix, terms[1].prefix), (PINYIN, false));
        assert!(condition.matches("吕中"));
        assert!(condition.matches("呂中"), "traditional characters fold");
        assert!(!condition.matches("路中") && !condition.matches("吕中华"));
        let zhan =
            Condition::build("name", &field, MatchMode::PinyinPrefix, false, "zhan").unwrap();
        let terms = zhan.terms();
        assert_eq!(terms.len(), 1);
        assert_eq!((terms[0].subfield_suffix, terms[0].prefix), (PINYIN, true));
        for name in ["张三", "詹天佑", "湛若水", "張 三"] {
            assert!(zhan.matches(name), "{name}");
        }
        assert!(!zhan.matches("赵四"));
        for mode in [MatchMode::Pinyin, MatchMode::PinyinPrefix] {
            let err = Condition::build("name", &field, mode, false, "张三")
                .unwrap_err()
                .to_string();
            assert!(err.contains("pinyin letters only"), "{err}");
        }
    }

    #[test]
    fn name_lookups_fold_traditional_characters_and_spaces() {
        let field = name_field();
        for typed in ["張三", "张 三", "張 三"] {
            let condition =
                Condition::build("name", &field, MatchMode::Exact, false, typed).unwrap();
            assert_eq!(condition.op, ConditionOp::Exact("张三".into()), "{typed}");
            assert!(
                condition.matches("张三") && condition.matches("張三"),
                "{typed}"
            );
        }
    }
}
