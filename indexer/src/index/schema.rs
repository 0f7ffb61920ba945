//! The tantivy schema of a table's index (the layout the module docs of [`crate::index`]
//! describe) and the field handles the writer and the searcher address it by.

use std::collections::HashMap;

use hbidx_schema::config::{FieldKind, TableConfig};
use tantivy::schema::{
    BytesOptions, Field, IndexRecordOption, STORED, Schema, TextFieldIndexing, TextOptions,
};

use crate::analysis::{GRAM, HEAD, INITIALS, PINYIN, TAIL};

/// The tantivy fields of one indexed field.
#[derive(Debug, Clone)]
pub(super) struct FieldHandles {
    pub(super) column: String,
    pub(super) kind: FieldKind,
    /// The field's terms are keyed hashes (`analysis/blind.rs`), kept as such in the row state.
    pub(super) blind: bool,
    pub(super) exact: Field,
    pub(super) tail: Option<Field>,
    pub(super) gram: Option<Field>,
    pub(super) pinyin: Option<Field>,
    pub(super) initials: Option<Field>,
    pub(super) head: Option<Field>,
}

#[derive(Debug)]
pub(super) struct Fields {
    pub(super) rowkey: Field,
    pub(super) state: Field,
    /// `"1"` on documents of rows with at least one visible value. The others only keep the
    /// row's tombstones (so a late, older put can't resurrect it) and are not rows any more.
    /// `"d"` on documents that remember a delete (see the module docs of [`super`]).
    pub(super) live: Field,
    pub(super) by_name: HashMap<String, FieldHandles>,
}

/// A term field whose terms hbidx makes itself (see `analysis/`): untokenised, postings
/// without frequencies or positions, and no field norms. Lookups never score, so norms (one
/// byte per document and field, written at every commit and merge) would be paid for nothing.
fn raw_terms() -> TextOptions {
    TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer("raw")
            .set_fieldnorms(false)
            .set_index_option(IndexRecordOption::Basic),
    )
}

/// The schema of a table's index: its layout (see the module docs) for the table's fields.
/// An index whose schema differs (a changed field config, or an index written by an hbidx with
/// an older layout) can't be opened; the server rebuilds it from the store
/// ([`IndexerError::SchemaMismatch`]).
pub(super) fn build_schema(table: &TableConfig) -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let rowkey = builder.add_bytes_field("_rk", BytesOptions::default().set_indexed().set_fast());
    // Not written any more (see the module docs); declared so that existing indexes still open.
    builder.add_text_field("_key", STORED);
    let state = builder.add_bytes_field("_state", STORED);
    let live = builder.add_text_field("_live", raw_terms());
    for column in &table.covered {
        builder.add_bytes_field(&format!("_covered.{column}"), BytesOptions::default());
    }
    let mut by_name = HashMap::new();
    for field in &table.fields {
        let name = &field.name;
        if field.blind {
            // An empty marker, like the covered columns': turning `blind` on or off, or
            // changing the key, changes the schema, so the index is rebuilt rather than
            // holding plaintext terms, or tags no lookup can find any more.
            let key = field
                .blind_key
                .as_ref()
                .map_or_else(|| "nokey".to_string(), |key| key.fingerprint());
            builder.add_bytes_field(&format!("_blind.{name}.{key}"), BytesOptions::default());
        }
        let exact = builder.add_text_field(name, raw_terms());
        let mut sub =
            |suffix: &str| Some(builder.add_text_field(&format!("{name}{suffix}"), raw_terms()));
        let (tail, gram, pinyin, initials, head) = match field.kind {
            FieldKind::Phone => (sub(TAIL), None, None, None, None),
            FieldKind::Name => (None, sub(GRAM), sub(PINYIN), sub(INITIALS), sub(HEAD)),
            FieldKind::Idcard | FieldKind::Keyword => (None, None, None, None, None),
        };
        by_name.insert(
            name.clone(),
            FieldHandles {
                column: field.column.clone(),
                kind: field.kind,
                blind: field.blind,
                exact,
                tail,
                gram,
                pinyin,
                initials,
                head,
            },
        );
    }
    (
        builder.build(),
        Fields {
            rowkey,
            state,
            live,
            by_name,
        },
    )
}
