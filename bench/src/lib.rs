//! `hbidx-bench`: generated test data and the benchmark.
//!
//! - [`people`]: a seeded generator of people (Chinese and Latin names, valid mobile numbers
//!   and PRC idcards) that the demo, the benchmark and the tests share.
//! - [`demo`]: the demo table's columns, loading generated people, and `hbidx demo` itself.
//! - [`bench`]: `hbidx bench`, the figures in docs/benchmarks.md (with its Kafka phase and its
//!   report rows in private modules).

pub mod bench;
pub mod demo;
mod kafka;
pub mod people;
mod report;
