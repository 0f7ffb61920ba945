//! How field values become index terms, and how a lookup value becomes a query.
//!
//! Index time and query time share this module so that they can never disagree, and so that the
//! query service can re-check a fetched row against the lookup with exactly the same rules
//! ([`Condition::matches`]). Where each concern lives:
//! - [`condition`]: match modes, the lookup [`Condition`] (validation, its index terms, the
//!   re-check of fetched rows);
//! - [`pinyin`]: a name's pinyin spellings, and typed pinyin (ü as `v`, tones, prefixes), with
//!   the surname reading table in [`surnames`];
//! - [`grams`]: character n-grams for partial lookups;
//! - [`blind`]: keyed-hash tags of blind fields;
//! - names themselves are normalised (case, traditional → simplified, spaces between Chinese
//!   characters) by [`hbidx_schema::normalize::normalize_name`], for index and query alike.
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
//! - name: the normalised name (exact; a prefix lookup is a range over these terms); its first
//!   character in `__head` when the name is longer (so a one-character prefix, a surname, the
//!   broadest lookup there is, reads one term's postings instead of a range over every distinct
//!   name that starts with it; a term for the first two characters too would cost ~12% more
//!   indexing CPU, being nearly as distinct as the names); character 1-grams and 2-grams in `__gram`; full pinyin spellings in `__py` and pinyin initials in
//!   `__ini` (`zhangsan` and `zs` find 张三 with `match=pinyin`, `zhang` with
//!   `match=pinyin_prefix`: a prefix range over the full spellings).
//!
//! A **blind** field (`blind = true`: phone, idcard, keyword) is indexed as keyed hashes
//! instead ([`blind`]).

use hbidx_schema::config::FieldKind;
use hbidx_schema::normalize;

mod blind;
mod condition;
mod grams;
mod pinyin;
mod surnames;

pub use blind::{blind_state_value, blind_terms};
pub use condition::{Condition, ConditionOp, MatchMode};

use self::grams::grams;
use self::pinyin::pinyin_spellings;

/// Sub-field name suffixes. Field names in the config are `[a-z][a-z0-9_]*`, and these use a
/// double underscore so they can't collide with a configured field.
pub const TAIL: &str = "__tail";
pub const GRAM: &str = "__gram";
/// Full pinyin spellings: a pinyin prefix lookup walks a prefix range of these.
pub const PINYIN: &str = "__py";
/// A name's first [`HEAD_CHARS`] characters, when the name is longer: a prefix lookup of that
/// many characters is one term here (or the exact name itself).
pub const HEAD: &str = "__head";
/// The prefix `__head` keeps: a surname's first character. Longer prefixes are narrow enough
/// for a range over the exact names.
pub const HEAD_CHARS: usize = 1;
/// Pinyin initials, apart from the full spellings so that a prefix range over those never
/// meets an initials term (`zs` must not find `zsf`).
pub const INITIALS: &str = "__ini";

/// The terms a field value contributes to the index, per sub-field suffix ("" = the exact field).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FieldTerms {
    pub exact: String,
    /// Phone digits reversed, for suffix lookups.
    pub tail: Option<String>,
    pub gram: Vec<String>,
    /// The name's leading characters (`__head`).
    pub head: Vec<String>,
    /// Full pinyin spellings (`__py`).
    pub pinyin: Vec<String>,
    /// Pinyin initials (`__ini`).
    pub initials: Vec<String>,
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
            terms.head = exact
                .char_indices()
                .skip(1)
                .take(HEAD_CHARS)
                .map(|(end, _)| exact[..end].to_string())
                .collect();
            let spellings = pinyin_spellings(&exact);
            terms.pinyin = spellings.full;
            terms.initials = spellings.initials;
        }
        FieldKind::Idcard | FieldKind::Keyword => {}
    }
    terms.exact = exact;
    Ok(terms)
}

/// The digits of a phone number, last first.
fn reversed_digits(phone: &str) -> String {
    phone.chars().rev().filter(|c| c.is_ascii_digit()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_terms_are_of_the_folded_name() {
        let terms = field_terms(FieldKind::Name, "張 三豐").unwrap();
        assert_eq!(terms.exact, "张三丰");
        assert!(terms.gram.contains(&"张三".to_string()), "{terms:?}");
        assert_eq!(terms.pinyin, vec!["zhangsanfeng"]);
        assert_eq!(terms.initials, vec!["zsf"]);
        assert_eq!(terms.head, vec!["张"]);
        assert_eq!(
            field_terms(FieldKind::Name, "张三").unwrap().head,
            vec!["张"]
        );
        assert!(field_terms(FieldKind::Name, "张").unwrap().head.is_empty());
        let latin = field_terms(FieldKind::Name, "John  SMITH").unwrap();
        assert_eq!(latin.exact, "john smith");
        assert!(latin.pinyin.is_empty() && latin.initials.is_empty());
    }
}
