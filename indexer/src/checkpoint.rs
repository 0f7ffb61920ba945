//! Source checkpoints, stored in the tantivy commit payload.
//!
//! A checkpoint maps `"{source}/{partition}"` to the offset of the last event whose effect is in
//! the index. It is written with `PreparedCommit::set_payload` in the same commit as the documents
//! it covers, so after a crash the index and its position can never disagree: the indexer resumes
//! at `offset + 1` and nothing is lost or applied twice. Other stores of the position (Kafka
//! committed offsets, the change feed's trim point) are hints derived from this one.
//!
//! Keys are per partition rather than a single number so that a Kafka topic with many partitions,
//! and later a partition-sharded index, fit without a format change.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{IndexerError, Result};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// `"{source}/{partition}"` → offset of the last applied event.
    pub positions: BTreeMap<String, i64>,
}

impl Checkpoint {
    pub fn key(source: &str, partition: i32) -> String {
        format!("{source}/{partition}")
    }

    /// Offset of the last applied event of a partition, if any was ever applied.
    pub fn position(&self, source: &str, partition: i32) -> Option<i64> {
        self.positions.get(&Self::key(source, partition)).copied()
    }

    /// Every partition of `source` with its offset.
    pub fn partitions(&self, source: &str) -> BTreeMap<i32, i64> {
        let prefix = format!("{source}/");
        self.positions
            .iter()
            .filter_map(|(key, offset)| {
                let partition = key.strip_prefix(&prefix)?.parse::<i32>().ok()?;
                Some((partition, *offset))
            })
            .collect()
    }

    pub fn advance(&mut self, source: &str, partition: i32, offset: i64) {
        let entry = self
            .positions
            .entry(Self::key(source, partition))
            .or_insert(offset);
        if offset > *entry {
            *entry = offset;
        }
    }

    pub fn to_payload(&self) -> String {
        // A BTreeMap<String, i64> always serialises.
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{}"))
    }

    /// The payload of a commit: the checkpoint and what [`PayloadFlags`] says about the index.
    pub(crate) fn to_payload_with(&self, flags: &PayloadFlags) -> String {
        #[derive(Serialize)]
        struct Payload<'a> {
            #[serde(flatten)]
            checkpoint: &'a Checkpoint,
            #[serde(skip_serializing_if = "std::ops::Not::not")]
            delete_marks: bool,
            #[serde(skip_serializing_if = "Option::is_none")]
            rows: Option<u64>,
        }
        serde_json::to_string(&Payload {
            checkpoint: self,
            delete_marks: flags.delete_marks,
            rows: flags.rows,
        })
        .unwrap_or_else(|_| String::from("{}"))
    }

    pub fn from_payload(payload: Option<&str>) -> Result<Self> {
        match payload {
            None => Ok(Self::default()),
            Some(text) if text.trim().is_empty() => Ok(Self::default()),
            Some(text) => serde_json::from_str(text)
                .map_err(|err| IndexerError::BadCheckpoint(err.to_string())),
        }
    }
}

/// What a commit payload says about the index beside its checkpoint.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct PayloadFlags {
    /// Every document that remembers a delete carries the `_live` delete mark, so those rows
    /// are a postings walk away. Set by the writer of an index it created (or emptied) and
    /// kept at each of its commits; an hbidx without marks rewrites the payload without it, so
    /// an index it wrote to is walked the long way again.
    #[serde(default)]
    pub(crate) delete_marks: bool,
    /// Live rows as of this commit: the writer's running count, read back when the index opens.
    /// Counting them instead walks the `_live` postings of every segment with deletes (~0.1 s at
    /// 10M rows at each start, growing with the table); an index committed by an hbidx without
    /// the count is walked once.
    #[serde(default)]
    pub(crate) rows: Option<u64>,
}

impl PayloadFlags {
    /// Unreadable or absent payloads say nothing: no flag is set.
    pub(crate) fn of(payload: Option<&str>) -> Self {
        payload
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_of_one_source() {
        let mut checkpoint = Checkpoint::default();
        checkpoint.advance("kafka:t", 0, 5);
        checkpoint.advance("kafka:t", 3, 9);
        checkpoint.advance("kafka:t2", 1, 7);
        checkpoint.advance("changefeed", 0, 1);
        assert_eq!(
            checkpoint.partitions("kafka:t"),
            BTreeMap::from([(0, 5), (3, 9)])
        );
        assert!(checkpoint.partitions("kafka").is_empty());
    }

    #[test]
    fn payload_round_trip_and_monotonic_advance() {
        let mut checkpoint = Checkpoint::default();
        checkpoint.advance("changefeed", 0, 10);
        checkpoint.advance("changefeed", 0, 7);
        checkpoint.advance("kafka:user-events", 3, 99);
        assert_eq!(checkpoint.position("changefeed", 0), Some(10));
        let back = Checkpoint::from_payload(Some(&checkpoint.to_payload())).unwrap();
        assert_eq!(back, checkpoint);
        assert_eq!(
            Checkpoint::from_payload(None).unwrap(),
            Checkpoint::default()
        );
        assert!(Checkpoint::from_payload(Some("not json")).is_err());
    }

    #[test]
    fn the_delete_marks_flag_rides_beside_the_checkpoint() {
        let mut checkpoint = Checkpoint::default();
        checkpoint.advance("changefeed", 0, 10);
        let marked = checkpoint.to_payload_with(&PayloadFlags {
            delete_marks: true,
            rows: None,
        });
        assert_eq!(Checkpoint::from_payload(Some(&marked)).unwrap(), checkpoint);
        assert!(PayloadFlags::of(Some(&marked)).delete_marks);
        // Without marks the payload is what a writer without them writes, and says so.
        assert_eq!(
            checkpoint.to_payload_with(&PayloadFlags::default()),
            checkpoint.to_payload()
        );
        assert!(!PayloadFlags::of(Some(&checkpoint.to_payload())).delete_marks);
        assert!(!PayloadFlags::of(None).delete_marks);
        // The live row count rides along too; a payload without it says nothing.
        let counted = checkpoint.to_payload_with(&PayloadFlags {
            delete_marks: true,
            rows: Some(42),
        });
        assert_eq!(
            Checkpoint::from_payload(Some(&counted)).unwrap(),
            checkpoint
        );
        assert_eq!(PayloadFlags::of(Some(&counted)).rows, Some(42));
        assert_eq!(PayloadFlags::of(Some(&marked)).rows, None);
    }
}
