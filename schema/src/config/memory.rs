//! `[memory]`: one budget for everything in the process that holds data in RAM and grows with
//! load or table size, split between the parts that use it.
//!
//! ```toml
//! [memory]
//! budget_mb = 512            # the whole split, per process, across all tables
//! # Optional, MiB each: a part given here is taken out first; the parts not given share the
//! # rest in their default proportions.
//! index_writers_mb = 160     # tantivy writer heaps: every table's writer, plus one reindex
//! store_cache_mb = 150       # fjall block cache (embedded store)
//! store_memtables_mb = 72    # fjall memtables, all keyspaces
//! row_cache_mb = 50          # recently read rows (embedded store), all tables
//! rowkey_cache_mb = 50       # decoded index rowkeys, all tables
//! source_buffers_mb = 30     # Kafka consumers' prefetch queues, all sources
//! index_merges_mb = 100      # segment merges in flight, all tables (caps each merge's size)
//! ```
//!
//! Every part is a ceiling its owner respects by slowing down, never by failing: a full writer
//! heap flushes a segment, a full cache evicts, a full memtable is sealed and flushed, a full
//! prefetch queue stops fetching. So over budget means slower, not an OOM kill. What the budget
//! does not cover is bounded by other settings (the uncommitted row states by the commit
//! policy's document count) or is small and fixed (threads, segment readers).

use serde::Deserialize;

use super::ConfigError;

/// One part of the [`MemoryBudget`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemoryPart {
    IndexWriters,
    StoreCache,
    StoreMemtables,
    RowCache,
    RowkeyCache,
    SourceBuffers,
    IndexMerges,
}

impl MemoryPart {
    pub const ALL: [MemoryPart; 7] = [
        MemoryPart::IndexWriters,
        MemoryPart::StoreCache,
        MemoryPart::StoreMemtables,
        MemoryPart::RowCache,
        MemoryPart::RowkeyCache,
        MemoryPart::SourceBuffers,
        MemoryPart::IndexMerges,
    ];

    /// The part's name in metrics and on the dashboard.
    pub fn name(self) -> &'static str {
        match self {
            MemoryPart::IndexWriters => "index_writers",
            MemoryPart::StoreCache => "store_cache",
            MemoryPart::StoreMemtables => "store_memtables",
            MemoryPart::RowCache => "row_cache",
            MemoryPart::RowkeyCache => "rowkey_cache",
            MemoryPart::SourceBuffers => "source_buffers",
            MemoryPart::IndexMerges => "index_merges",
        }
    }

    /// Share of the budget in per mille when nothing is overridden. The writers and the block
    /// cache get the most: a small writer heap means many small segments and more merging
    /// during a load, a small block cache means lookups and read-before-write updates
    /// decompress store blocks again. The row and rowkey caches only hold hot rows. The
    /// merges' part decides how big a segment gets (a merge holds ~24 bytes a document): at
    /// 512 MiB, merges of up to ~3.8M documents.
    fn default_share(self) -> u64 {
        match self {
            MemoryPart::IndexWriters => 300,
            MemoryPart::StoreCache => 230,
            MemoryPart::StoreMemtables => 100,
            MemoryPart::RowCache => 70,
            MemoryPart::RowkeyCache => 90,
            MemoryPart::SourceBuffers => 40,
            MemoryPart::IndexMerges => 170,
        }
    }

    /// The smallest budget the part works with.
    fn minimum_bytes(self) -> u64 {
        match self {
            // tantivy refuses a writer heap under 15 MB per indexing thread (two threads).
            MemoryPart::IndexWriters => 2 * MIN_WRITER_THREAD_BYTES,
            // A table's merges of ~130k documents: under that, a writer's own segments barely
            // merge.
            MemoryPart::IndexMerges => 3 * MIB,
            _ => 1 << 20,
        }
    }
}

/// tantivy's `MEMORY_BUDGET_NUM_BYTES_MIN` (15 MB per indexing thread), rounded up.
pub const MIN_WRITER_THREAD_BYTES: u64 = 16 << 20;

/// The default `budget_mb`: with it a 10M-row table stays within 1 GiB of anonymous memory.
pub const DEFAULT_BUDGET_MB: u64 = 512;

const MIB: u64 = 1 << 20;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMemory {
    budget_mb: Option<i64>,
    index_writers_mb: Option<i64>,
    store_cache_mb: Option<i64>,
    store_memtables_mb: Option<i64>,
    row_cache_mb: Option<i64>,
    rowkey_cache_mb: Option<i64>,
    source_buffers_mb: Option<i64>,
    index_merges_mb: Option<i64>,
}

impl RawMemory {
    fn part(&self, part: MemoryPart) -> Option<i64> {
        match part {
            MemoryPart::IndexWriters => self.index_writers_mb,
            MemoryPart::StoreCache => self.store_cache_mb,
            MemoryPart::StoreMemtables => self.store_memtables_mb,
            MemoryPart::RowCache => self.row_cache_mb,
            MemoryPart::RowkeyCache => self.rowkey_cache_mb,
            MemoryPart::SourceBuffers => self.source_buffers_mb,
            MemoryPart::IndexMerges => self.index_merges_mb,
        }
    }
}

/// `[memory]`, validated: the budget and each part's bytes (they add up to the budget).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryBudget {
    pub budget_bytes: u64,
    parts: [u64; MemoryPart::ALL.len()],
}

impl Default for MemoryBudget {
    fn default() -> Self {
        validate_memory(RawMemory::default(), 1).unwrap_or(MemoryBudget {
            budget_bytes: DEFAULT_BUDGET_MB * MIB,
            parts: [DEFAULT_BUDGET_MB * MIB / MemoryPart::ALL.len() as u64; MemoryPart::ALL.len()],
        })
    }
}

impl MemoryBudget {
    /// Bytes of one part, for the whole process.
    pub fn bytes(&self, part: MemoryPart) -> u64 {
        let index = MemoryPart::ALL
            .iter()
            .position(|p| *p == part)
            .unwrap_or_default();
        self.parts[index]
    }

    /// Every part with its bytes, in [`MemoryPart::ALL`] order.
    pub fn parts(&self) -> impl Iterator<Item = (MemoryPart, u64)> + '_ {
        MemoryPart::ALL.into_iter().zip(self.parts)
    }

    /// One writer's heap when `tables` tables are indexed: the writers' part over one writer
    /// per table plus one for a reindex's shadow index (a reindex runs beside the live writer).
    pub fn writer_heap_bytes(&self, tables: usize) -> u64 {
        (self.bytes(MemoryPart::IndexWriters) / (tables as u64 + 1))
            .max(2 * MIN_WRITER_THREAD_BYTES)
    }

    /// One table's share of a per-table cache part (`RowCache`, `RowkeyCache`).
    pub fn per_table(&self, part: MemoryPart, tables: usize) -> u64 {
        (self.bytes(part) / tables.max(1) as u64).max(1)
    }
}

/// Validates `[memory]`; `tables` is how many tables share it (the writers' part must give each
/// writer, and a reindex's, tantivy's minimum heap).
pub(crate) fn validate_memory(raw: RawMemory, tables: usize) -> Result<MemoryBudget, ConfigError> {
    let budget_mb = match raw.budget_mb {
        None => DEFAULT_BUDGET_MB,
        Some(mb @ 64..=1_048_576) => mb as u64,
        Some(mb) => {
            return Err(memory_error(
                "budget_mb",
                format!("{mb} is not within 64..=1048576 (MiB)"),
            ));
        }
    };
    let budget = budget_mb * MIB;
    let mut parts = [0u64; MemoryPart::ALL.len()];
    let mut given = 0u64;
    let mut rest_shares = 0u64;
    for (index, part) in MemoryPart::ALL.into_iter().enumerate() {
        match part_override(&raw, part)? {
            Some(bytes) => {
                parts[index] = bytes;
                given += bytes;
            }
            None => rest_shares += part.default_share(),
        }
    }
    if given > budget {
        return Err(memory_error(
            "budget_mb",
            format!(
                "the parts given add up to {} MiB, more than the budget of {budget_mb} MiB",
                given / MIB
            ),
        ));
    }
    let rest = budget - given;
    for (index, part) in MemoryPart::ALL.into_iter().enumerate() {
        if raw.part(part).is_none() {
            parts[index] = rest * part.default_share() / rest_shares.max(1);
        }
        let minimum = match part {
            MemoryPart::IndexWriters => 2 * MIN_WRITER_THREAD_BYTES * (tables as u64 + 1),
            // Each table's merges get their share of this part.
            MemoryPart::IndexMerges => part.minimum_bytes() * tables.max(1) as u64,
            _ => part.minimum_bytes(),
        };
        if parts[index] < minimum {
            let key = if raw.part(part).is_some() {
                format!("{}_mb", part.name())
            } else {
                "budget_mb".into()
            };
            return Err(memory_error(
                &key,
                format!(
                    "{} gets {} MiB, under the {} MiB it needs{}",
                    part.name(),
                    parts[index] / MIB,
                    minimum.div_ceil(MIB),
                    match part {
                        MemoryPart::IndexWriters => format!(
                            " ({} tables and a reindex, 32 MiB of writer heap each)",
                            tables
                        ),
                        MemoryPart::IndexMerges => {
                            format!(" ({tables} tables, 3 MiB of merges each)")
                        }
                        _ => String::new(),
                    }
                ),
            ));
        }
    }
    Ok(MemoryBudget {
        budget_bytes: budget,
        parts,
    })
}

fn part_override(raw: &RawMemory, part: MemoryPart) -> Result<Option<u64>, ConfigError> {
    match raw.part(part) {
        None => Ok(None),
        Some(mb @ 1..=1_048_576) => Ok(Some(mb as u64 * MIB)),
        Some(mb) => Err(memory_error(
            &format!("{}_mb", part.name()),
            format!("{mb} is not within 1..=1048576 (MiB)"),
        )),
    }
}

fn memory_error(key: &str, reason: String) -> ConfigError {
    ConfigError::invalid(format!("memory.{key}"), reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> RawMemory {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn the_default_split_adds_up_to_the_budget() {
        let budget = MemoryBudget::default();
        assert_eq!(budget.budget_bytes, DEFAULT_BUDGET_MB * MIB);
        let sum: u64 = budget.parts().map(|(_, bytes)| bytes).sum();
        assert!(budget.budget_bytes - sum < 8, "{sum}");
        assert!(budget.bytes(MemoryPart::IndexWriters) > budget.bytes(MemoryPart::RowCache));
        // One table: its writer and a reindex's share the writers' part.
        assert_eq!(
            budget.writer_heap_bytes(1),
            budget.bytes(MemoryPart::IndexWriters) / 2
        );
    }

    #[test]
    fn overrides_come_out_first_and_the_rest_keeps_its_proportions() {
        let budget = validate_memory(
            raw("budget_mb = 1000\nrow_cache_mb = 200\nrowkey_cache_mb = 100"),
            2,
        )
        .unwrap();
        assert_eq!(budget.bytes(MemoryPart::RowCache), 200 * MIB);
        assert_eq!(budget.bytes(MemoryPart::RowkeyCache), 100 * MIB);
        let rest = 700 * MIB;
        let shares = 300 + 230 + 100 + 40 + 170;
        assert_eq!(budget.bytes(MemoryPart::IndexWriters), rest * 300 / shares);
        assert_eq!(budget.per_table(MemoryPart::RowCache, 2), 100 * MIB);
    }

    #[test]
    fn bad_values_name_their_key() {
        for (text, key) in [
            ("budget_mb = 10", "budget_mb"),
            ("budget_mb = 100\nstore_cache_mb = 200", "budget_mb"),
            ("row_cache_mb = 0", "row_cache_mb"),
            ("index_writers_mb = 40", "index_writers_mb"),
            ("budget_mb = 64\nstore_cache_mb = 60", "budget_mb"),
        ] {
            let err = validate_memory(raw(text), 1).unwrap_err().to_string();
            assert!(err.contains(&format!("memory.{key}")), "{text}: {err}");
        }
        // Ten tables need ten writers and a reindex's: 11 × 32 MiB of the writers' part.
        let err = validate_memory(raw("budget_mb = 256"), 10)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("index_writers") && err.contains("10 tables"),
            "{err}"
        );
        // Each table's merges need 3 MiB of the merges' part.
        let err = validate_memory(raw("index_merges_mb = 5"), 2)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("memory.index_merges_mb") && err.contains("2 tables"),
            "{err}"
        );
    }

    #[test]
    fn unknown_keys_are_refused() {
        assert!(toml::from_str::<RawMemory>("budget = 5").is_err());
    }
}
