//! Property tests for the schema crate: codec round-trips, ring stability, split ordering,
//! routing, and "no input makes it panic".

use hbidx_schema::codec::{HashAlgo, HashRing, RowkeyCodec, RowkeyPart, TsFormat};
use hbidx_schema::split::{
    RegionMap, decimal_string_split, hex_string_split, parse_splits_file, sampled_splits,
    uniform_split, validate_splits,
};
use hbidx_schema::{
    normalize_idcard, normalize_keyword, normalize_name, normalize_phone, parse_config,
    parse_printable, printable,
};
use proptest::prelude::*;

fn prefix_parts() -> Vec<Option<RowkeyPart>> {
    let mut parts = vec![None];
    for algo in [
        HashAlgo::Md5,
        HashAlgo::Xxh64,
        HashAlgo::Xxh3,
        HashAlgo::Murmur3,
    ] {
        for binary in [false, true] {
            parts.push(Some(RowkeyPart::HashPrefix {
                algo,
                width: if binary { 3 } else { 6 },
                binary,
                separator: if binary { String::new() } else { "_".into() },
            }));
        }
        parts.push(Some(RowkeyPart::HashSalt {
            buckets: 37,
            hash: algo,
            width: 3,
            separator: "|".into(),
        }));
    }
    parts.push(Some(RowkeyPart::Ring {
        regions: 12,
        vnodes: 40,
        width: 2,
        separator: String::new(),
    }));
    parts
}

/// Every deterministic design that takes arbitrary string ids (modulo needs integers and is
/// tested on its own).
fn deterministic_designs() -> Vec<RowkeyCodec> {
    let mut designs = Vec::new();
    for prefix in prefix_parts() {
        for reverse in [false, true] {
            for ts in [None, Some(TsFormat::Binary), Some(TsFormat::Decimal)] {
                let mut parts: Vec<RowkeyPart> = prefix.iter().cloned().collect();
                parts.push(RowkeyPart::Key { reverse });
                if let Some(format) = ts {
                    parts.push(RowkeyPart::ReverseTs { format });
                }
                designs.push(RowkeyCodec::new("t", parts).expect("valid design"));
            }
        }
    }
    designs
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn deterministic_designs_round_trip(id in "\\PC{1,40}", ts in 0i64..=i64::MAX) {
        for codec in deterministic_designs() {
            let key = if codec.has_timestamp() { format!("{id}#{ts}") } else { id.clone() };
            let rowkey = codec.encode(&key).unwrap();
            prop_assert_eq!(codec.decode(&rowkey).unwrap(), key.clone(), "{}", codec.describe());
            prop_assert_eq!(codec.candidate_rowkeys(&key).unwrap(), vec![rowkey]);
        }
    }

    #[test]
    fn modulo_round_trips(id in any::<u64>(), buckets in 2u32..=65_536) {
        let codec = RowkeyCodec::new(
            "t",
            vec![RowkeyPart::Modulo { buckets }, RowkeyPart::Key { reverse: false }],
        ).unwrap();
        let key = id.to_string();
        let rowkey = codec.encode(&key).unwrap();
        prop_assert_eq!(&rowkey[..8], &(id % u64::from(buckets)).to_be_bytes()[..]);
        prop_assert_eq!(codec.decode(&rowkey).unwrap(), key);
    }

    #[test]
    fn random_salt_candidates_cover_every_write(id in "\\PC{1,20}", seed in any::<u64>()) {
        use rand::SeedableRng;
        let codec = RowkeyCodec::new(
            "t",
            vec![
                RowkeyPart::RandomSalt { buckets: 8, width: 1, separator: "-".into() },
                RowkeyPart::Key { reverse: false },
            ],
        ).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let rowkey = codec.encode_random(&id, &mut rng).unwrap();
        prop_assert!(codec.candidate_rowkeys(&id).unwrap().contains(&rowkey));
        prop_assert_eq!(codec.decode(&rowkey).unwrap(), id);
    }

    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        for codec in deterministic_designs() {
            let _ = codec.decode(&bytes);
        }
    }

    #[test]
    fn encode_never_panics(key in "\\PC{0,30}(#[0-9-]{0,22})?") {
        for codec in deterministic_designs() {
            let _ = codec.encode(&key);
        }
    }

    #[test]
    fn printable_round_trips(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let text = printable(&bytes);
        prop_assert!(text.is_ascii());
        prop_assert_eq!(parse_printable(&text).unwrap(), bytes);
    }

    #[test]
    fn parse_printable_never_panics(text in "(\\\\x?[0-9A-Fa-fz]{0,2}|\\PC){0,20}") {
        let _ = parse_printable(&text);
    }

    #[test]
    fn calculators_are_strictly_increasing(regions in 2u32..=2_000) {
        for splits in [
            hex_string_split(regions).unwrap(),
            decimal_string_split(regions).unwrap(),
            uniform_split(regions).unwrap(),
        ] {
            prop_assert_eq!(splits.len(), regions as usize - 1);
            prop_assert!(validate_splits(&splits).is_ok());
        }
        for codec in deterministic_designs() {
            if let Some(splits) = codec.codec_splits(regions) {
                prop_assert!(validate_splits(&splits).is_ok(), "{}", codec.describe());
            }
        }
    }

    #[test]
    fn sampled_splits_are_strictly_increasing(
        keys in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..6), 0..200),
        regions in 0u32..50,
    ) {
        let splits = sampled_splits(keys, regions);
        prop_assert!(splits.len() < regions.max(1) as usize);
        prop_assert!(validate_splits(&splits).is_ok());
    }

    #[test]
    fn region_map_agrees_with_a_linear_scan(
        raw_splits in proptest::collection::btree_set(proptest::collection::vec(any::<u8>(), 1..4), 0..20),
        rowkeys in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..5), 1..50),
    ) {
        let splits: Vec<Vec<u8>> = raw_splits.into_iter().collect();
        let map = RegionMap::new(splits.clone()).unwrap();
        let regions = map.regions();
        prop_assert_eq!(regions.len(), splits.len() + 1);
        for rowkey in rowkeys {
            let linear = regions
                .iter()
                .position(|r| r.start <= rowkey && (r.end.is_empty() || rowkey < r.end))
                .unwrap();
            prop_assert_eq!(map.region_of(&rowkey), linear);
        }
    }

    #[test]
    fn splits_file_never_panics(text in "(\\PC|\\\\x[0-9A-F]{2}|\r?\n){0,60}") {
        if let Ok(splits) = parse_splits_file(&text) {
            prop_assert!(validate_splits(&splits).is_ok());
        }
    }

    #[test]
    fn normalisers_never_panic(raw in "\\PC{0,40}|[0-9０-９+＋xX ()-]{0,25}") {
        let results = [
            normalize_phone(&raw),
            normalize_idcard(&raw),
            normalize_name(&raw),
            normalize_keyword(&raw),
        ];
        for normalised in results.into_iter().flatten() {
            prop_assert!(!normalised.is_empty());
        }
    }

    #[test]
    fn normalisers_are_idempotent(raw in "[0-9０-９+ ]{8,20}|\\PC{1,30}") {
        if let Ok(once) = normalize_phone(&raw) {
            prop_assert_eq!(normalize_phone(&once).unwrap(), once);
        }
        if let Ok(once) = normalize_name(&raw) {
            prop_assert_eq!(normalize_name(&once).unwrap(), once);
        }
    }

    #[test]
    fn config_parser_never_panics(text in "(\\[\\[tables\\]\\]\n|name = \"[a-z.]{0,5}\"\n|\\[tables\\.(rowkey|splits)\\]\n|\\[\\[tables\\.(families|fields)\\]\\]\n|[a-z_]{1,12} = (-?[0-9]{1,6}|\"[a-zA-Z:_]{0,10}\"|true|\\[\\{ ?kind = \"[a-z_]{1,12}\" ?\\}\\])\n){0,25}") {
        let _ = parse_config(&text);
    }

    #[test]
    fn config_parser_never_panics_on_noise(text in "\\PC{0,200}") {
        let _ = parse_config(&text);
    }

    /// Every section, with keys of every section and values of every type: the whole builder
    /// (store, sources, server, security, memory) answers a config or a `ConfigError`. Keys
    /// land in any section, so `rowkey_cache_mb` is tried both where it is read (`[memory]`)
    /// and where it is refused with a pointer there (`[server]`, whatever the value's type).
    #[test]
    fn whole_config_builder_never_panics(
        text in "(\\[(store|server|security|memory|indexer|other)\\]\n|\\[\\[(sources|security\\.keys|tables)\\]\\]\n|(kind|thrift|pool_size|timeout_ms|brokers|topic|table|format|start|listen|workers|http_cpus|thrift_listen|thrift_workers|thrift_hbase_version|rowkey_cache_mb|id|sha256|scopes|rate_limit|budget_mb|index_writers_mb|name) = (-?[0-9]{1,12}|\"[a-z0-9:.]{0,12}\"|true|\\[-?[0-9]{0,4}\\]|\\[\"(lookup|admin|x)\"\\]|\\{ ?per_second = -?[0-9]{1,3} ?\\})\n){0,20}"
    ) {
        let _ = parse_config(&text);
    }

    /// The example config with some of its lines dropped or duplicated.
    #[test]
    fn the_example_config_cut_up_never_panics(
        keep in proptest::collection::vec(0u8..4, 0..200),
    ) {
        let mut text = String::new();
        for (line, choice) in hbidx_schema::EXAMPLE_CONFIG.lines().zip(keep.iter().chain(std::iter::repeat(&1))) {
            match choice {
                0 => {}
                3 => {
                    text.push_str(line);
                    text.push('\n');
                    text.push_str(line);
                    text.push('\n');
                }
                _ => {
                    text.push_str(line);
                    text.push('\n');
                }
            }
        }
        let _ = parse_config(&text);
    }
}

/// Adding a region to a ring of N moves about 1/(N+1) of the keys, all of them to the new
/// region; a naive `hash mod N` would move about N/(N+1).
#[test]
fn ring_growth_moves_about_one_in_n_plus_one() {
    let keys: Vec<String> = (0..20_000).map(|i| format!("user-{i}")).collect();
    // Exhaustive over small rings rather than sampled: the result depends only on N.
    for regions in 2u32..=64 {
        let ring = HashRing::new(regions, 160).unwrap();
        let grown = ring.with_regions(regions + 1).unwrap();
        let mut moved = 0usize;
        for key in &keys {
            let (before, after) = (ring.region_of(key), grown.region_of(key));
            if before != after {
                assert_eq!(after, regions, "keys only move to the new region");
                moved += 1;
            }
        }
        let share = moved as f64 / keys.len() as f64;
        let expected = 1.0 / f64::from(regions + 1);
        assert!(
            (share - expected).abs() < expected * 0.35,
            "{regions} -> {}: moved {share:.4}, expected about {expected:.4}",
            regions + 1
        );
        // Shrinking back moves exactly the same keys home.
        let shrunk = grown.with_regions(regions).unwrap();
        assert!(
            keys.iter()
                .all(|k| shrunk.region_of(k) == ring.region_of(k))
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever a log line around it looks like, a mobile number or an idcard in any common
    /// spelling never survives `mask_pii_in_text` with all its digits.
    #[test]
    fn log_masking_hides_phones_and_idcards(
        second in 3u8..=9,
        rest in "[0-9]{9}",
        id17 in "[0-9]{17}",
        check in "[0-9Xx]",
        spelling in 0usize..6,
        before in "[a-z =:\"{,]{0,12}",
        after in "[a-z =:\"},]{0,12}",
    ) {
        use hbidx_schema::mask::mask_pii_in_text;
        let phone = format!("1{second}{rest}");
        let spelled = match spelling {
            0 => phone.clone(),
            1 => format!("+86{phone}"),
            2 => format!("0086{phone}"),
            3 => format!("{}-{}-{}", &phone[..3], &phone[3..7], &phone[7..]),
            4 => format!("+86 {} {} {}", &phone[..3], &phone[3..7], &phone[7..]),
            _ => format!("{}.{}.{}", &phone[..3], &phone[3..7], &phone[7..]),
        };
        let line = format!("{before}{spelled}{after}");
        let masked = mask_pii_in_text(&line);
        prop_assert!(!masked.contains(&phone), "{}", masked);
        prop_assert!(masked.contains(&format!("{}****{}", &phone[..3], &phone[7..])), "{}", masked);

        let idcard = format!("{id17}{check}");
        let line = format!("{before}{idcard}{after}");
        let masked = mask_pii_in_text(&line);
        prop_assert!(!masked.contains(&id17[3..14]), "{}", masked);
    }
}
