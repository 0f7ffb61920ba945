//! `hbidx-serve`: what `hbidx serve` is, as a library the binary, the demo, the benchmark and
//! the tests start in-process.
//!
//! - [`open`] / [`open_rows`] + [`open_with_rows`]: the store, one index and one indexer
//!   thread per table, the query service's state, the reindexer; an [`Instance`] holds them.
//! - [`HttpServer`] / [`serve_http`]: the REST API on its own HTTP threads ([`HttpThreads`]:
//!   one single-threaded runtime each, optionally pinned), never on the indexers' threads.
//! - [`start_gateway`]: the HBase Thrift1 gateway over the embedded store.
//! - Reindex jobs: a shadow index built beside the live one and swapped in, with crash
//!   recovery of a half-done swap at open (private; reached through the jobs API).
//! - [`serve_auth`]: the API keys a server starts with.

mod http;
pub mod index_dirs;
mod keys;
mod reindex;
mod server;

pub use http::{HttpServer, HttpThreads, allowed_cpus, default_threads, serve as serve_http};
pub use keys::{
    BLIND_KEY_ENV, CLI_KEY_ID, CLUSTER_KEY_ENV, CLUSTER_KEY_ID, CURSOR_KEY_ENV, arm_blind_fields,
    blind_key, cursor_seal, security_config, serve_auth, serve_cursors,
};
pub use server::{
    Indexers, Instance, OpenedRows, bind, gateway_options, open, open_rows, open_with_rows,
    start_gateway, writer_options,
};
