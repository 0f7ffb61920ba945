//! The Thrift gateway's request path: one request's bytes, in the binary protocol when the
//! first byte is even, else the compact one, through the size limits, the nullable-arguments
//! layer and the generated processor to the handlers over a real embedded store.
#![no_main]

use std::sync::LazyLock;

use hbidx_gateway::fuzzing::RequestFuzzer;
use libfuzzer_sys::fuzz_target;

static GATEWAY: LazyLock<(tempfile::TempDir, RequestFuzzer)> = LazyLock::new(|| {
    let dir = tempfile::tempdir().expect("a temp dir");
    let gateway = RequestFuzzer::new(dir.path());
    (dir, gateway)
});

fuzz_target!(|data: &[u8]| {
    let Some((&selector, request)) = data.split_first() else {
        return;
    };
    GATEWAY.1.process(request, selector % 2 == 1);
});
