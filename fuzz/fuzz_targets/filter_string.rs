//! The Thrift gateway's filter language (`TScan.filterString`): any bytes through the parser,
//! and what parses run over a few rows as a scanner would.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    hbidx_gateway::fuzzing::filter_string(data);
});
