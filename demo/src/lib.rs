//! `hbidx-demo`: generated people and `hbidx demo`.
//!
//! - [`people`]: a seeded generator of people (Chinese and Latin names, valid mobile numbers
//!   and PRC idcards) that the demo, the benchmark and the tests share.
//! - [`PersonColumns`], [`demo_table`]: the table a person is loaded into and its columns.
//! - [`run`]: `hbidx demo` itself, from an empty data dir to a served, indexed table.

mod command;
pub mod people;
mod table;

pub use command::{Serving, run};
pub use table::{DEMO_SEED, PersonColumns, demo_table};
