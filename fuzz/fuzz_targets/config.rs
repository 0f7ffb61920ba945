//! The config file: any text parses into a validated config or an error naming what is wrong,
//! never a panic; and with `[cluster]`, checking an identity against the layout doesn't panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(config) = hbidx_schema::config::parse_config(text)
        && let Some(cluster) = config.cluster
    {
        let _ = cluster.with_identity(Some(data.len() % 4), Some(data.len() % 3));
    }
});
