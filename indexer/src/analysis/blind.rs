//! Blind fields (`blind = true`: phone, idcard, keyword): indexed as keyed hashes (HMAC-SHA-256
//! under the blind key, [`hbidx_schema::BlindKey`]) of the normalised values, so the index files
//! never hold the value:
//! - its exact field gets the tag of the normalised value;
//! - a phone's `__tail` gets one tag per suffix of its digits at least `phone_suffix_min` long
//!   (a hash has no prefixes to range over), and a suffix lookup is that one tag.
//!
//! Prefix and substring lookups can't work on hashes and are refused
//! ([`super::Condition::build`]). The row state the index keeps ([`crate::state`]) holds these
//! tags instead of the value ([`blind_state_value`]); the lookup's [`super::Condition`] keeps
//! the normalised plaintext in memory only, to re-check fetched rows against the store's values.

use hbidx_schema::BlindKey;
use hbidx_schema::config::{FieldKind, IndexedField};

/// What a blind field's state holds when its value could not be hashed (it failed
/// normalisation, or the field has no key): never the value itself.
pub(super) const BLIND_INVALID: &str = "!";

/// The tag of a blind field's whole normalised value (its exact term).
pub(super) fn blind_exact_tag(key: &BlindKey, field: &str, normalized: &str) -> String {
    key.tag(&["exact", field, normalized])
}

/// The tag of the last digits of a blind phone field (a suffix term).
pub(super) fn blind_tail_tag(key: &BlindKey, field: &str, digits: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{Condition, MatchMode, TAIL};

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
            Condition::build("phone", &field, mode, suffix, raw).map(|c| c.terms().remove(0))
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
        assert_eq!(condition.terms()[0].terms, vec![exact.to_string()]);
    }
}
