//! Sources of change events, and the embedded change feed source.
//!
//! A source is polled from the table's indexer thread, never from async code: polling may block
//! (waiting for the feed, or inside rdkafka). Exactly-once works like this: the indexer applies a
//! batch of events, commits the index with the checkpoint as payload, and only then tells the
//! source ([`Source::committed`]) so it can drop what it no longer needs (trim the feed, commit
//! Kafka offsets as a hint). On start the indexer reads the checkpoint back from the index and
//! [`Source::seek`]s the source to it; whatever the source kept beyond the checkpoint is replayed.

use std::sync::Arc;
use std::time::Duration;

use hbidx_schema::model::ChangeEvent;
use hbidx_store::EmbeddedStore;

use crate::checkpoint::Checkpoint;
use crate::error::{IndexerError, Result};

pub trait Source: Send + 'static {
    /// The name under which this source's partitions appear in the checkpoint.
    fn name(&self) -> &str;
    /// Position the source just after the checkpoint's offsets.
    fn seek(&mut self, checkpoint: &Checkpoint) -> Result<()>;
    /// Up to `max` events, waiting at most `timeout` when none are ready.
    fn poll(&mut self, max: usize, timeout: Duration) -> Result<Vec<ChangeEvent>>;
    /// The checkpoint is durable in the index.
    fn committed(&mut self, checkpoint: &Checkpoint);
}

/// The embedded store's change feed for one table (partition 0, offset = feed sequence number).
pub struct ChangeFeedSource {
    store: Arc<EmbeddedStore>,
    table: String,
    after: i64,
}

pub const CHANGE_FEED: &str = "changefeed";

impl ChangeFeedSource {
    pub fn new(store: Arc<EmbeddedStore>, table: impl Into<String>) -> Self {
        Self {
            store,
            table: table.into(),
            after: 0,
        }
    }
}

impl Source for ChangeFeedSource {
    fn name(&self) -> &str {
        CHANGE_FEED
    }

    fn seek(&mut self, checkpoint: &Checkpoint) -> Result<()> {
        self.after = checkpoint.position(CHANGE_FEED, 0).unwrap_or(0);
        Ok(())
    }

    fn poll(&mut self, max: usize, timeout: Duration) -> Result<Vec<ChangeEvent>> {
        let read = |after| {
            self.store
                .read_feed(&self.table, after, max)
                .map_err(|err| IndexerError::Source {
                    source_name: format!("{CHANGE_FEED}:{}", self.table),
                    reason: err.to_string(),
                })
        };
        let mut events = read(self.after)?;
        if events.is_empty() {
            self.store
                .wait_for_offset_after(&self.table, self.after, timeout);
            events = read(self.after)?;
        }
        if let Some(last) = events.last() {
            self.after = last.offset;
        }
        Ok(events)
    }

    fn committed(&mut self, checkpoint: &Checkpoint) {
        if let Some(upto) = checkpoint.position(CHANGE_FEED, 0) {
            // The feed is only needed until the index has durably covered it.
            if let Err(err) = self.store.trim_feed(&self.table, upto) {
                tracing::warn!(table = %self.table, error = %err, "change feed trim failed; will retry after the next commit");
            }
        }
    }
}
