//! `[[sources]]`: where a table's change events come from, parsed from the raw TOML the schema
//! crate keeps for us, then validated without IO.
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
//! # [sources.properties]     # passed to librdkafka as-is (security.protocol, sasl.*, ...)
//! ```
//!
//! A table with no source is fed by the embedded store's change feed.

use std::collections::BTreeMap;

use hbidx_schema::config::Config;
use serde::Deserialize;

use crate::error::{IndexerError, Result};
use crate::formats::Format;
use crate::kafka::{KafkaSourceConfig, StartPolicy};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    kind: String,
    brokers: Option<String>,
    topic: Option<String>,
    format: Option<String>,
    table: Option<String>,
    group_id: Option<String>,
    start: Option<String>,
    #[serde(default)]
    properties: BTreeMap<String, String>,
}

fn invalid(index: usize, reason: impl std::fmt::Display) -> IndexerError {
    IndexerError::Config(format!("sources[{index}]: {reason}"))
}

/// The Kafka sources of `config`, at most one per table.
pub fn kafka_sources(config: &Config) -> Result<Vec<KafkaSourceConfig>> {
    let Some(raw) = &config.raw_sources else {
        return Ok(Vec::new());
    };
    let raw: Vec<RawSource> = raw.clone().try_into().map_err(|err: toml::de::Error| {
        IndexerError::Config(format!("sources: {}", err.message()))
    })?;
    let mut out: Vec<KafkaSourceConfig> = Vec::new();
    for (index, source) in raw.into_iter().enumerate() {
        if source.kind != "kafka" {
            return Err(invalid(
                index,
                format!("kind \"{}\" is not supported (kafka)", source.kind),
            ));
        }
        let required = |value: Option<String>, name: &str| {
            value
                .filter(|v| !v.trim().is_empty())
                .ok_or_else(|| invalid(index, format!("{name} is required")))
        };
        let brokers = required(source.brokers, "brokers")?;
        let topic = required(source.topic, "topic")?;
        let table_name = required(source.table, "table")?;
        let table = config
            .table(&table_name)
            .ok_or_else(|| invalid(index, format!("table \"{table_name}\" is not configured")))?;
        let format = match source.format.as_deref() {
            None => Format::Json,
            Some(text) => Format::parse(text).ok_or_else(|| {
                invalid(
                    index,
                    format!("format \"{text}\" is unknown (json or hbase-kafka-proxy)"),
                )
            })?,
        };
        let start = match source.start.as_deref() {
            None | Some("earliest") => StartPolicy::Earliest,
            Some("latest") => StartPolicy::Latest,
            Some(other) => {
                return Err(invalid(
                    index,
                    format!("start \"{other}\" must be earliest or latest"),
                ));
            }
        };
        if topic.contains('/') {
            return Err(invalid(index, "topic names cannot contain '/'"));
        }
        if out.iter().any(|s| s.table == table.name) {
            return Err(invalid(
                index,
                format!(
                    "table \"{}\" already has a source; one index has one source",
                    table.name
                ),
            ));
        }
        out.push(KafkaSourceConfig {
            brokers,
            topic,
            format,
            table: table.name.clone(),
            group_id: source.group_id,
            start,
            properties: source.properties,
            prefetch_kbytes: None,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(sources: &str) -> Config {
        let text = format!(
            "{}\n{sources}",
            include_str!("../../deploy/config/hbidx.toml")
        );
        hbidx_schema::parse_config(&text).unwrap()
    }

    #[test]
    fn the_documented_contract_parses() {
        let sources = kafka_sources(&config(
            "[[sources]]\nkind = \"kafka\"\nbrokers = \"127.0.0.1:9092\"\ntopic = \"user-events\"\nformat = \"json\"\ntable = \"user\"\n",
        ))
        .unwrap();
        assert_eq!(sources.len(), 1);
        assert_eq!(sources[0].format, Format::Json);
        assert_eq!(sources[0].start, StartPolicy::Earliest);
        assert_eq!(sources[0].group_id("a1"), "hbidx-a1-user");
        assert_eq!(sources[0].source_name(), "kafka:user-events");
    }

    #[test]
    fn mistakes_are_named() {
        for (text, expected) in [
            ("kind = \"kinesis\"\ntable = \"user\"", "kind \"kinesis\""),
            (
                "kind = \"kafka\"\ntopic = \"t\"\ntable = \"user\"",
                "brokers is required",
            ),
            (
                "kind = \"kafka\"\nbrokers = \"b\"\ntopic = \"t\"\ntable = \"nope\"",
                "table \"nope\"",
            ),
            (
                "kind = \"kafka\"\nbrokers = \"b\"\ntopic = \"t\"\ntable = \"user\"\nformat = \"xml\"",
                "format \"xml\"",
            ),
            (
                "kind = \"kafka\"\nbrokers = \"b\"\ntopic = \"t\"\ntable = \"user\"\nstart = \"now\"",
                "start \"now\"",
            ),
            (
                "kind = \"kafka\"\nbrokers = \"b\"\ntopic = \"t\"\ntable = \"user\"\ntypo = 1",
                "unknown field",
            ),
        ] {
            let err = kafka_sources(&config(&format!("[[sources]]\n{text}\n")))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(expected),
                "{err:?} should contain {expected:?}"
            );
            assert!(err.contains("sources"), "{err}");
        }
        let twice =
            "[[sources]]\nkind = \"kafka\"\nbrokers = \"b\"\ntopic = \"t\"\ntable = \"user\"\n";
        let err = kafka_sources(&config(&format!("{twice}{twice}")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("already has a source"), "{err}");
    }
}
