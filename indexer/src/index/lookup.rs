//! [`TableSearcher::lookup`]: the rows matching a lookup's conditions, a page in rowkey order,
//! at a cost bounded by `max_matches` whatever the size of the table.
//!
//! A lookup is an AND of clauses, each one term (an exact value, a gram, a pinyin spelling) or
//! a prefix range of terms (a name prefix, a phone tail). Documents are not stored in rowkey
//! order, so the first `limit` rowkeys of a lookup are only known once every match has been
//! seen: the cost of a lookup is the number of matches it walks. That number is read first from
//! the term dictionaries, where each term carries its document count: a lookup walks its
//! narrowest clause, and when even that one holds more than `max_matches` documents it is
//! refused ([`IndexerError::TooBroad`]) after reading at most that many terms' counts, without
//! touching a posting list. So a one-character name prefix costs the same at 10M rows as at
//! 10k, answered or refused, and no structure is sized by the table (tantivy's range query
//! would build a bitset of every document of each segment per lookup).
//!
//! The other clauses filter the narrowest one's documents: exact terms (a common name, a
//! surname's `__head` term) by seeking their postings to each candidate, however many documents
//! they hold; a prefix range of at most `max_matches` documents by its postings; a broader range
//! by reading each candidate's row state and checking the condition on its value, at most
//! `max_matches` reads.
//!
//! The counts include deleted documents (replaced versions of updated rows) until segments
//! merge, so on a table with many recent updates a lookup near the bound may be refused until
//! the idle compaction has run.

use std::ops::Bound;

use tantivy::columnar::{BytesColumn, TermOrdHit};
use tantivy::postings::TermInfo;
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::{DocAddress, DocId, DocSet, SegmentReader, Term};

use crate::analysis::{Condition, GRAM, HEAD, INITIALS, PINYIN, TAIL};
use crate::error::{IndexerError, Result};

use super::searcher::{LookupPage, TableSearcher};

/// A candidate's row state costs about as much to read as this many terms of a range (a
/// decompressed store block against a dictionary step and a postings header each).
const STATE_READ_TERMS: usize = 16;

/// The terms of one clause.
enum Terms {
    Exact(Vec<u8>),
    /// Every term from `lower` (inclusive) up to `upper` (exclusive).
    Range {
        lower: Vec<u8>,
        upper: Bound<Vec<u8>>,
    },
}

/// One AND-ed part of a lookup: the documents that hold any of its terms, in any of its
/// sub-fields (a pinyin lookup is its initials or its full spelling).
struct Clause {
    parts: Vec<(Field, Terms)>,
    /// The condition it comes from, to check a candidate's row state against.
    condition: usize,
}

impl Clause {
    /// No prefix range: every term is read at counting, however broad.
    fn exact_only(&self) -> bool {
        self.parts
            .iter()
            .all(|(_, terms)| matches!(terms, Terms::Exact(_)))
    }
}

/// A clause's terms in each segment, as far as they were read.
struct Counted {
    /// Per segment, the clause's terms with their sub-fields.
    infos: Vec<Vec<(Field, TermInfo)>>,
    /// Documents of those terms over all segments, deleted ones included.
    docs: u64,
    /// Whether every term was read; false once `docs` passed the bound.
    complete: bool,
}

/// The first key after every key that starts with `prefix` (`Unbounded` when there is none):
/// the prefix with its last character incremented. UTF-8 preserves code point order, so every
/// term starting with the prefix sorts in `[prefix, upper)`.
fn prefix_upper(prefix: &str) -> Bound<Vec<u8>> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        // The next scalar value, skipping the surrogate gap; char::MAX has no successor, so
        // the bound moves one character to the left.
        if let Some(next) = (last as u32 + 1..=char::MAX as u32).find_map(char::from_u32) {
            chars.push(next);
            return Bound::Excluded(chars.into_iter().collect::<String>().into_bytes());
        }
    }
    Bound::Unbounded
}

impl TableSearcher {
    /// Finds rows matching all conditions, in rowkey order, after `after` (exclusive), walking
    /// at most `max_matches` matches (see the module docs); a lookup that matches more is
    /// [`IndexerError::TooBroad`].
    ///
    /// Ordering is by rowkey: it is deterministic, stays stable while the index changes under a
    /// paging client (the cursor is the last rowkey returned), and is the order in which a
    /// multi-get visits HBase regions.
    pub fn lookup(
        &self,
        conditions: &[Condition],
        limit: usize,
        after: Option<&[u8]>,
        max_matches: usize,
    ) -> Result<LookupPage> {
        let clauses = self.clauses(conditions)?;
        if clauses.is_empty() {
            return Ok(LookupPage::default());
        }
        let searcher = self.reader().searcher();
        let segments = searcher.segment_readers();
        let bound = max_matches as u64;
        // Exact terms are counted first (one probe a segment), then ranges, longer prefixes
        // (a 4-digit phone tail) before shorter ones (a surname). Once a clause is known to
        // hold `n` documents, another is only counted up to `n * STATE_READ_TERMS`: past that
        // it is checked on the candidates' states, and streaming the rest of its terms (a
        // surname's thousands of names) would cost more than the lookup.
        let mut counting: Vec<usize> = (0..clauses.len()).collect();
        counting.sort_by_key(|&i| {
            let ranges = clauses[i]
                .parts
                .iter()
                .filter_map(|(_, terms)| match terms {
                    Terms::Exact(_) => None,
                    Terms::Range { lower, .. } => Some(lower.len()),
                });
            match ranges.min() {
                None => (0, 0),
                Some(shortest) => (1, usize::MAX - shortest),
            }
        });
        let mut counted: Vec<Option<Counted>> = (0..clauses.len()).map(|_| None).collect();
        let mut narrowest: Option<u64> = None;
        for i in counting {
            let clause_bound = narrowest.map_or(bound, |n| {
                bound.min(n.saturating_mul(STATE_READ_TERMS as u64))
            });
            let count = count_clause(segments, &clauses[i], clause_bound)?;
            if count.complete {
                narrowest = Some(narrowest.map_or(count.docs, |n| n.min(count.docs)));
            }
            counted[i] = Some(count);
        }
        let counted: Vec<Counted> = counted.into_iter().flatten().collect();
        // The narrowest clause drives the walk; the others filter its documents, the narrower
        // first.
        let mut order: Vec<usize> = (0..clauses.len()).collect();
        order.sort_by_key(|&i| (!counted[i].complete, counted[i].docs));
        let driver = order[0];
        if !counted[driver].complete {
            return Err(IndexerError::TooBroad {
                field: conditions[clauses[driver].condition].field.clone(),
                max: max_matches,
            });
        }
        let walked = counted[driver].docs;
        let columns = self.rowkey_columns(&searcher)?;
        let keep = limit + 1;
        let mut rowkeys: Vec<Vec<u8>> = Vec::new();
        let mut ords: Vec<u64> = Vec::new();
        for (segment_ord, (segment, column)) in segments.iter().zip(columns.iter()).enumerate() {
            let Some(column) = column else { continue };
            let mut docs = segment_docs(segment, &counted[driver].infos[segment_ord])?;
            if let Some(alive) = segment.alive_bitset() {
                docs.retain(|&doc| alive.is_alive(doc));
            }
            for &other in &order[1..] {
                if docs.is_empty() {
                    break;
                }
                let clause = &clauses[other];
                let infos = &counted[other].infos[segment_ord];
                let complete = counted[other].complete;
                if clause.exact_only() {
                    // Exact terms (however many documents they hold): their postings, each
                    // skipped forward to the candidates in turn.
                    let mut postings = Vec::with_capacity(infos.len());
                    for (field, info) in infos {
                        postings.push(
                            segment
                                .inverted_index(*field)?
                                .read_postings_from_terminfo(info, IndexRecordOption::Basic)
                                .map_err(tantivy::TantivyError::from)?,
                        );
                    }
                    docs.retain(|&doc| {
                        postings
                            .iter_mut()
                            .any(|postings| postings.doc() <= doc && postings.seek(doc) == doc)
                    });
                } else if complete && docs.len() * STATE_READ_TERMS >= infos.len() {
                    let holders = segment_docs(segment, infos)?;
                    docs.retain(|doc| holders.binary_search(doc).is_ok());
                } else {
                    // Too broad to read by its postings, or a range of many terms beside a few
                    // candidates: each candidate's state is checked instead.
                    let condition = &conditions[clause.condition];
                    let mut kept = Vec::with_capacity(docs.len());
                    for doc in docs {
                        if self.state_matches(&searcher, segment_ord, doc, condition)? {
                            kept.push(doc);
                        }
                    }
                    docs = kept;
                }
            }
            let min_ord = match after {
                Some(after) => first_ord_after(column, after)?,
                None => 0,
            };
            ords.clear();
            ords.extend(
                docs.iter()
                    .flat_map(|&doc| column.term_ords(doc))
                    .filter(|&ord| ord >= min_ord),
            );
            // The `limit + 1` smallest rowkeys of the segment: term ordinals of the `_rk`
            // column sort like the rowkeys, so only the winners are decoded.
            if ords.len() > keep {
                ords.select_nth_unstable(keep - 1);
                ords.truncate(keep);
            }
            for &ord in &ords {
                if let Some(rowkey) = self.rowkey_term(segment.segment_id(), column, ord)? {
                    rowkeys.push(rowkey);
                }
            }
        }
        // A rowkey has one live document, so there is nothing to deduplicate across segments.
        rowkeys.sort_unstable();
        let has_more = rowkeys.len() > limit;
        rowkeys.truncate(limit);
        Ok(LookupPage {
            rowkeys,
            has_more,
            walked,
        })
    }

    /// The clauses of `conditions`: each condition's terms in its sub-field.
    fn clauses(&self, conditions: &[Condition]) -> Result<Vec<Clause>> {
        let mut clauses = Vec::new();
        for (index, condition) in conditions.iter().enumerate() {
            let invalid = |reason: &str| IndexerError::InvalidCondition {
                field: condition.field.clone(),
                reason: reason.into(),
            };
            let handles = self
                .fields
                .by_name
                .get(&condition.field)
                .ok_or_else(|| invalid("not an indexed field of this table"))?;
            let sub_field = |suffix: &str| {
                match suffix {
                    "" => Some(handles.exact),
                    TAIL => handles.tail,
                    GRAM => handles.gram,
                    PINYIN => handles.pinyin,
                    INITIALS => handles.initials,
                    HEAD => handles.head,
                    _ => None,
                }
                .ok_or_else(|| invalid("this match mode is not indexed for the field"))
            };
            let terms_of = |term: String, prefix: bool| {
                if prefix {
                    Terms::Range {
                        upper: prefix_upper(&term),
                        lower: term.into_bytes(),
                    }
                } else {
                    Terms::Exact(term.into_bytes())
                }
            };
            let mut alternatives = condition.terms();
            if alternatives.len() == 1
                && let Some(wanted) = alternatives.pop()
            {
                // Every term must be present (a partial lookup's grams): a clause each.
                let field = sub_field(wanted.subfield_suffix)?;
                for term in wanted.terms {
                    clauses.push(Clause {
                        parts: vec![(field, terms_of(term, wanted.prefix))],
                        condition: index,
                    });
                }
                continue;
            }
            // Alternatives (a pinyin lookup: its initials or its full spelling), one term each:
            // one clause, any of them.
            let mut parts = Vec::with_capacity(alternatives.len());
            for wanted in alternatives {
                let field = sub_field(wanted.subfield_suffix)?;
                let [term] = <[String; 1]>::try_from(wanted.terms)
                    .map_err(|_| invalid("a lookup alternative must be one term"))?;
                parts.push((field, terms_of(term, wanted.prefix)));
            }
            if !parts.is_empty() {
                clauses.push(Clause {
                    parts,
                    condition: index,
                });
            }
        }
        Ok(clauses)
    }

    /// Whether the row state of document `doc` satisfies `condition`: the filter of a clause
    /// too broad to read by its postings.
    fn state_matches(
        &self,
        searcher: &tantivy::Searcher,
        segment_ord: usize,
        doc: DocId,
        condition: &Condition,
    ) -> Result<bool> {
        let Some(handles) = self.fields.by_name.get(&condition.field) else {
            return Ok(false);
        };
        let address = DocAddress::new(segment_ord as u32, doc);
        let state = self.state_at(searcher, address, b"")?;
        Ok(state
            .value(&handles.column)
            .and_then(|value| std::str::from_utf8(value).ok())
            .is_some_and(|value| condition.matches(value)))
    }
}

/// Reads `clause`'s terms in every segment and counts their documents, stopping once the count
/// passes `bound`: at most `bound` terms are read, since each holds a document at least.
fn count_clause(segments: &[SegmentReader], clause: &Clause, bound: u64) -> Result<Counted> {
    let mut counted = Counted {
        infos: Vec::with_capacity(segments.len()),
        docs: 0,
        complete: true,
    };
    for segment in segments {
        let mut infos = Vec::new();
        for (field, terms) in &clause.parts {
            // Exact terms are read whatever their counts (one probe each): a broad one still
            // filters other clauses' candidates by a postings seek.
            if !counted.complete && matches!(terms, Terms::Range { .. }) {
                break;
            }
            let inverted = segment.inverted_index(*field)?;
            match terms {
                Terms::Exact(bytes) => {
                    let term = Term::from_field_bytes(*field, bytes);
                    if let Some(info) = inverted
                        .get_term_info(&term)
                        .map_err(tantivy::TantivyError::from)?
                    {
                        counted.docs += u64::from(info.doc_freq);
                        infos.push((*field, info));
                    }
                }
                Terms::Range { lower, upper } => {
                    let mut range = inverted.terms().range().ge(lower);
                    range = match upper {
                        Bound::Excluded(upper) => range.lt(upper),
                        _ => range,
                    };
                    let mut stream = range.into_stream().map_err(tantivy::TantivyError::from)?;
                    while counted.docs <= bound && stream.advance() {
                        let info = stream.value().clone();
                        counted.docs += u64::from(info.doc_freq);
                        infos.push((*field, info));
                    }
                }
            }
            counted.complete = counted.docs <= bound;
        }
        counted.infos.push(infos);
    }
    Ok(counted)
}

/// The documents of `segment` holding any of `infos`' terms, sorted, without duplicates
/// (deleted ones included).
fn segment_docs(segment: &SegmentReader, infos: &[(Field, TermInfo)]) -> Result<Vec<DocId>> {
    let mut docs = Vec::new();
    for (field, info) in infos {
        let mut postings = segment
            .inverted_index(*field)?
            .read_block_postings_from_terminfo(info, IndexRecordOption::Basic)
            .map_err(tantivy::TantivyError::from)?;
        loop {
            let block = postings.docs();
            if block.is_empty() {
                break;
            }
            docs.extend_from_slice(block);
            postings.advance();
        }
    }
    // One term's postings are sorted; several terms' (a range, a name's initials and full
    // spelling) are merged here.
    if infos.len() > 1 {
        docs.sort_unstable();
        docs.dedup();
    }
    Ok(docs)
}

/// The first `_rk` ordinal of `column` whose rowkey sorts after `after`.
fn first_ord_after(column: &BytesColumn, after: &[u8]) -> Result<u64> {
    Ok(
        match column
            .dictionary()
            .term_ord_or_next(after)
            .map_err(tantivy::TantivyError::from)?
        {
            TermOrdHit::Exact(ord) => ord + 1,
            TermOrdHit::Next(ord) => ord,
        },
    )
}
