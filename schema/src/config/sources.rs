//! `[[sources]]`: where a table's change events come from. A table with no source is fed by
//! the embedded store's change feed.
//!
//! ```toml
//! [[sources]]
//! kind = "kafka"
//! brokers = "127.0.0.1:9092"
//! topic = "user-events"
//! format = "json"            # or "hbase-kafka-proxy"
//! table = "user"
//! # group_id = "..."         # default hbidx-<instance id>-<table>: each instance is a replica
//! # start = "earliest"       # where partitions with no checkpoint in this index begin
//! # dead_letter_max_mb = 1024  # the table's dead-letter files at most (two, rotated)
//! # [sources.properties]     # passed to librdkafka as-is (security.protocol, sasl.*, ...)
//! ```

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{ConfigError, TableConfig};

/// A table's dead-letter files at most, when `dead_letter_max_mb` doesn't say: 1 GiB. Anyone
/// who can produce to the topic can send undecodable messages; the cap keeps that from filling
/// the data volume the index lives on.
pub const DEFAULT_DEAD_LETTER_MAX_MB: u64 = 1024;

/// How the messages of one topic are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventFormat {
    /// hbidx's own JSON events (the write-through publisher writes these).
    Json,
    /// The HBase Kafka Proxy's Avro events (HBase replication into Kafka).
    HbaseKafkaProxy,
}

impl EventFormat {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "json" => Some(Self::Json),
            "hbase-kafka-proxy" => Some(Self::HbaseKafkaProxy),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::HbaseKafkaProxy => "hbase-kafka-proxy",
        }
    }
}

/// Where a partition with no checkpoint in this index starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartPolicy {
    Earliest,
    Latest,
}

/// A validated `[[sources]]` entry of kind `kafka`.
#[derive(Debug, Clone, PartialEq)]
pub struct KafkaSourceConfig {
    pub brokers: String,
    pub topic: String,
    pub format: EventFormat,
    /// The configured table's name.
    pub table: String,
    /// Consumer group; `None` derives `hbidx-<instance>-<table>`.
    pub group_id: Option<String>,
    pub start: StartPolicy,
    /// Extra librdkafka properties (security settings and the like), passed through.
    pub properties: BTreeMap<String, String>,
    /// The consumer's prefetch queue (librdkafka `queued.max.messages.kbytes`), the source's
    /// share of `[memory] source_buffers_mb`; `properties` win. `None`: librdkafka's default.
    /// Not a config key: the server sets it from the memory budget.
    pub prefetch_kbytes: Option<u64>,
    /// The table's dead-letter files at most, in bytes (`dead_letter_max_mb`): the current
    /// file and one rotated one, each at most half.
    pub dead_letter_max_bytes: u64,
}

impl KafkaSourceConfig {
    /// The name this source's partitions have in checkpoints.
    pub fn source_name(&self) -> String {
        format!("kafka:{}", self.topic)
    }

    pub fn group_id(&self, instance_id: &str) -> String {
        self.group_id
            .clone()
            .unwrap_or_else(|| format!("hbidx-{instance_id}-{}", self.table))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSource {
    kind: Option<String>,
    brokers: Option<String>,
    topic: Option<String>,
    format: Option<String>,
    table: Option<String>,
    group_id: Option<String>,
    start: Option<String>,
    #[serde(default)]
    properties: BTreeMap<String, String>,
    dead_letter_max_mb: Option<i64>,
}

/// Validates `[[sources]]` against the (already validated) tables: at most one per table.
pub(crate) fn validate_sources(
    raw: Vec<RawSource>,
    tables: &[TableConfig],
) -> Result<Vec<KafkaSourceConfig>, ConfigError> {
    let mut out: Vec<KafkaSourceConfig> = Vec::new();
    for (index, source) in raw.into_iter().enumerate() {
        let invalid = |key: &str, reason: String| {
            ConfigError::invalid(format!("sources[{index}].{key}"), reason)
        };
        let required = |value: Option<String>, key: &str| {
            value
                .filter(|v| !v.trim().is_empty())
                .ok_or_else(|| invalid(key, "is required".into()))
        };
        let kind = required(source.kind, "kind")?;
        if kind != "kafka" {
            return Err(invalid(
                "kind",
                format!("\"{kind}\" is not supported (kafka)"),
            ));
        }
        let brokers = required(source.brokers, "brokers")?;
        let topic = required(source.topic, "topic")?;
        let table_name = required(source.table, "table")?;
        let table = tables
            .iter()
            .find(|table| table.name == table_name || table.full_name() == table_name)
            .ok_or_else(|| invalid("table", format!("\"{table_name}\" is not configured")))?;
        let format = match source.format.as_deref() {
            None => EventFormat::Json,
            Some(text) => EventFormat::parse(text).ok_or_else(|| {
                invalid(
                    "format",
                    format!("\"{text}\" is unknown (json or hbase-kafka-proxy)"),
                )
            })?,
        };
        let start = match source.start.as_deref() {
            None | Some("earliest") => StartPolicy::Earliest,
            Some("latest") => StartPolicy::Latest,
            Some(other) => {
                return Err(invalid(
                    "start",
                    format!("\"{other}\" must be earliest or latest"),
                ));
            }
        };
        if topic.contains('/') {
            return Err(invalid("topic", "topic names cannot contain '/'".into()));
        }
        if out.iter().any(|s| s.table == table.name) {
            return Err(invalid(
                "table",
                format!(
                    "\"{}\" already has a source; one index has one source",
                    table.name
                ),
            ));
        }
        let dead_letter_max_mb = match source.dead_letter_max_mb {
            None => DEFAULT_DEAD_LETTER_MAX_MB,
            Some(mb @ 1..=1_048_576) => mb as u64,
            Some(mb) => {
                return Err(invalid(
                    "dead_letter_max_mb",
                    format!("{mb} is not within 1..=1048576"),
                ));
            }
        };
        out.push(KafkaSourceConfig {
            brokers,
            topic,
            format,
            table: table.name.clone(),
            group_id: source.group_id,
            start,
            properties: source.properties,
            prefetch_kbytes: None,
            dead_letter_max_bytes: dead_letter_max_mb * 1024 * 1024,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources(sources: &str) -> Result<Vec<KafkaSourceConfig>, ConfigError> {
        let text = format!("{}\n{sources}", crate::EXAMPLE_CONFIG);
        crate::config::parse_config(&text).map(|config| config.sources)
    }

    #[test]
    fn the_documented_contract_parses() {
        let sources = sources(
            "[[sources]]\nkind = \"kafka\"\nbrokers = \"127.0.0.1:9092\"\ntopic = \"user-events\"\nformat = \"json\"\ntable = \"user\"\n",
        )
        .unwrap();
        assert_eq!(sources.len(), 1);
        assert_eq!(sources[0].format, EventFormat::Json);
        assert_eq!(sources[0].start, StartPolicy::Earliest);
        assert_eq!(sources[0].group_id("a1"), "hbidx-a1-user");
        assert_eq!(sources[0].source_name(), "kafka:user-events");
    }

    #[test]
    fn mistakes_are_named() {
        for (text, expected) in [
            (
                "kind = \"kinesis\"\ntable = \"user\"",
                "sources[0].kind: \"kinesis\"",
            ),
            (
                "kind = \"kafka\"\ntopic = \"t\"\ntable = \"user\"",
                "sources[0].brokers: is required",
            ),
            (
                "kind = \"kafka\"\nbrokers = \"b\"\ntopic = \"t\"\ntable = \"nope\"",
                "sources[0].table: \"nope\"",
            ),
            (
                "kind = \"kafka\"\nbrokers = \"b\"\ntopic = \"t\"\ntable = \"user\"\nformat = \"xml\"",
                "sources[0].format: \"xml\"",
            ),
            (
                "kind = \"kafka\"\nbrokers = \"b\"\ntopic = \"t\"\ntable = \"user\"\nstart = \"now\"",
                "sources[0].start: \"now\"",
            ),
            (
                "kind = \"kafka\"\nbrokers = \"b\"\ntopic = \"t\"\ntable = \"user\"\ntypo = 1",
                "sources[0].typo: unknown field",
            ),
        ] {
            let err = sources(&format!("[[sources]]\n{text}\n"))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(expected),
                "{err:?} should contain {expected:?}"
            );
        }
        let twice =
            "[[sources]]\nkind = \"kafka\"\nbrokers = \"b\"\ntopic = \"t\"\ntable = \"user\"\n";
        let err = sources(&format!("{twice}{twice}")).unwrap_err().to_string();
        assert!(
            err.contains("sources[1].table: \"user\" already has a source"),
            "{err}"
        );
    }
}
