use md5::{Digest, Md5};
use rand::SeedableRng;
use xxhash_rust::{xxh3::xxh3_64, xxh64::xxh64};

use super::hash::murmur3_32;
use super::*;

fn md5_design(width: usize) -> RowkeyCodec {
    RowkeyCodec::new(
        "user",
        vec![
            RowkeyPart::HashPrefix {
                algo: HashAlgo::Md5,
                width,
                binary: false,
                separator: String::new(),
            },
            RowkeyPart::Key { reverse: false },
        ],
    )
    .expect("valid design")
}

#[test]
fn seed_004_md5_prefix_examples() {
    // Seed 004: foo0001 -> 95f18cfoo0001 and so on.
    let codec = md5_design(6);
    for (key, rowkey) in [
        ("foo0001", "95f18cfoo0001"),
        ("foo0002", "6ccc20foo0002"),
        ("foo0003", "b61d00foo0003"),
        ("foo0004", "1a7475foo0004"),
    ] {
        assert_eq!(codec.encode(key).unwrap(), rowkey.as_bytes());
        assert_eq!(codec.decode(rowkey.as_bytes()).unwrap(), key);
    }
    assert_eq!(codec.describe(), "substr(md5(key),0,6) + key");
}

/// The in-place hex of every algorithm and width, odd ones included, against `hex::encode`
/// of the digest crates' output, and each encoded key decodes back (its prefix re-checked).
#[test]
fn hash_prefix_is_the_leading_hex_or_bytes_of_the_digest() {
    let key = "13800138000";
    let digests: [(HashAlgo, Vec<u8>); 4] = [
        (HashAlgo::Md5, Md5::digest(key.as_bytes()).to_vec()),
        (
            HashAlgo::Xxh64,
            xxh64(key.as_bytes(), 0).to_be_bytes().to_vec(),
        ),
        (
            HashAlgo::Xxh3,
            xxh3_64(key.as_bytes()).to_be_bytes().to_vec(),
        ),
        (
            HashAlgo::Murmur3,
            murmur3_32(key.as_bytes()).to_be_bytes().to_vec(),
        ),
    ];
    for (algo, digest) in digests {
        let hex = hex::encode(&digest);
        for binary in [false, true] {
            let max = if binary { digest.len() } else { hex.len() };
            for width in 1..=max {
                let codec = RowkeyCodec::new(
                    "t",
                    vec![
                        RowkeyPart::HashPrefix {
                            algo,
                            width,
                            binary,
                            separator: "_".into(),
                        },
                        RowkeyPart::Key { reverse: false },
                    ],
                )
                .unwrap();
                let mut expected = if binary {
                    digest[..width].to_vec()
                } else {
                    hex.as_bytes()[..width].to_vec()
                };
                expected.extend_from_slice(b"_13800138000");
                let rowkey = codec.encode(key).unwrap();
                assert_eq!(rowkey, expected, "{algo:?} width {width} binary {binary}");
                assert_eq!(codec.decode(&rowkey).unwrap(), key);
            }
        }
    }
}

#[test]
fn decode_rejects_a_wrong_prefix() {
    let codec = md5_design(6);
    let err = codec.decode(b"000000foo0001").unwrap_err();
    assert!(err.to_string().contains("does not match"), "{err}");
    assert!(
        err.to_string()
            .starts_with("table \"user\": rowkey 000000foo0001")
    );
}

#[test]
fn binary_prefix_skips_width_bytes() {
    let codec = RowkeyCodec::new(
        "t",
        vec![
            RowkeyPart::HashPrefix {
                algo: HashAlgo::Md5,
                width: 2,
                binary: true,
                separator: String::new(),
            },
            RowkeyPart::Key { reverse: false },
        ],
    )
    .unwrap();
    let rowkey = codec.encode("foo0001").unwrap();
    // md5("foo0001") starts 95 f1.
    assert_eq!(&rowkey[..2], &[0x95, 0xf1]);
    assert_eq!(&rowkey[2..], b"foo0001");
    assert_eq!(codec.decode(&rowkey).unwrap(), "foo0001");
}

#[test]
fn modulo_matches_seed_002_partition_design() {
    let codec = RowkeyCodec::new(
        "t",
        vec![
            RowkeyPart::Modulo { buckets: 10 },
            RowkeyPart::Key { reverse: false },
        ],
    )
    .unwrap();
    let rowkey = codec.encode("1234").unwrap();
    assert_eq!(&rowkey[..8], &4u64.to_be_bytes());
    assert_eq!(&rowkey[8..], b"1234");
    assert_eq!(codec.decode(&rowkey).unwrap(), "1234");
    let err = codec.encode("12a4").unwrap_err();
    assert_eq!(
        err.to_string(),
        "table \"t\": key \"12a4\" is not an unsigned integer, which the modulo prefix needs"
    );
    // Seed 002's calcSplitKeys: Bytes.toBytes((long) i) for i in 1..partitions.
    let splits = codec.codec_splits(10).unwrap();
    let expected: Vec<Vec<u8>> = (1u64..10).map(|i| i.to_be_bytes().to_vec()).collect();
    assert_eq!(splits, expected);
}

#[test]
fn random_salt_reports_it_is_not_deterministic() {
    let codec = RowkeyCodec::new(
        "events",
        vec![
            RowkeyPart::RandomSalt {
                buckets: 4,
                width: 1,
                separator: "-".into(),
            },
            RowkeyPart::Key { reverse: false },
        ],
    )
    .unwrap();
    assert!(!codec.is_deterministic());
    let err = codec.encode("foo0001").unwrap_err();
    assert!(matches!(err, CodecError::NotDeterministic { .. }));
    assert!(
        err.to_string()
            .contains("lpad(random() mod 4,1,'0') + \"-\" + key"),
        "{err}"
    );
    let candidates = codec.candidate_rowkeys("foo0001").unwrap();
    let expected: Vec<Vec<u8>> = ["0-foo0001", "1-foo0001", "2-foo0001", "3-foo0001"]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
    assert_eq!(candidates, expected);
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for _ in 0..20 {
        let rowkey = codec.encode_random("foo0001", &mut rng).unwrap();
        assert!(candidates.contains(&rowkey));
        assert_eq!(codec.decode(&rowkey).unwrap(), "foo0001");
    }
    assert!(codec.decode(b"7-foo0001").is_err());
}

#[test]
fn hash_salt_is_stable_and_decodes() {
    let codec = RowkeyCodec::new(
        "t",
        vec![
            RowkeyPart::HashSalt {
                buckets: 16,
                hash: HashAlgo::Murmur3,
                width: 2,
                separator: "_".into(),
            },
            RowkeyPart::Key { reverse: false },
        ],
    )
    .unwrap();
    let rowkey = codec.encode("foo").unwrap();
    let bucket = murmur3_32(b"foo") % 16;
    assert_eq!(rowkey, format!("{bucket:02}_foo").into_bytes());
    assert_eq!(codec.decode(&rowkey).unwrap(), "foo");
    assert_eq!(
        codec.codec_splits(4).unwrap(),
        vec![b"04".to_vec(), b"08".to_vec(), b"12".to_vec()]
    );
}

#[test]
fn reversed_key_with_reverse_timestamp() {
    let codec = RowkeyCodec::new(
        "calls",
        vec![
            RowkeyPart::Key { reverse: true },
            RowkeyPart::ReverseTs {
                format: TsFormat::Decimal,
            },
        ],
    )
    .unwrap();
    let rowkey = codec.encode("13800138000#1700000000000").unwrap();
    let expected = format!("00083100831{:019}", i64::MAX - 1_700_000_000_000);
    assert_eq!(rowkey, expected.into_bytes());
    assert_eq!(codec.decode(&rowkey).unwrap(), "13800138000#1700000000000");
    assert_eq!(
        codec.describe(),
        "reverse(id) + lpad(Long.MAX_VALUE - ts,19,'0')"
    );
    for bad in ["13800138000", "x#", "x#-1", "x#01", "x#1.5", "#5"] {
        assert!(codec.encode(bad).is_err(), "{bad}");
    }
}

#[test]
fn newer_timestamps_sort_first() {
    let codec = RowkeyCodec::new(
        "t",
        vec![
            RowkeyPart::HashPrefix {
                algo: HashAlgo::Md5,
                width: 4,
                binary: false,
                separator: String::new(),
            },
            RowkeyPart::Key { reverse: false },
            RowkeyPart::ReverseTs {
                format: TsFormat::Binary,
            },
        ],
    )
    .unwrap();
    let older = codec.encode("car7#1000").unwrap();
    let newer = codec.encode("car7#2000").unwrap();
    assert!(newer < older);
    // The prefix hashes the id only, so both versions share it.
    assert_eq!(older[..4], newer[..4]);
    assert_eq!(codec.decode(&older).unwrap(), "car7#1000");
    assert_eq!(
        codec.describe(),
        "substr(md5(id),0,4) + id + bytes8(Long.MAX_VALUE - ts)"
    );
}

#[test]
fn design_order_is_validated() {
    let key = RowkeyPart::Key { reverse: false };
    let ts = RowkeyPart::ReverseTs {
        format: TsFormat::Binary,
    };
    let salt = RowkeyPart::Modulo { buckets: 4 };
    let cases = [
        (vec![], "table \"t\": rowkey has no key part"),
        (
            vec![key.clone(), salt.clone()],
            "table \"t\": rowkey part 1 (modulo): a prefix part must come before the key part",
        ),
        (
            vec![ts.clone(), key.clone()],
            "table \"t\": rowkey part 0 (reverse_ts): reverse_ts must come after the key part",
        ),
        (
            vec![key.clone(), key.clone()],
            "table \"t\": rowkey part 1 (key): a design must have exactly one key part",
        ),
        (
            vec![salt.clone(), salt.clone(), key.clone()],
            "table \"t\": rowkey part 1 (modulo): a design can have at most one prefix part",
        ),
        (
            vec![key.clone(), ts.clone(), ts.clone()],
            "table \"t\": rowkey part 2 (reverse_ts): a design can have at most one reverse_ts part",
        ),
    ];
    for (parts, message) in cases {
        let err = RowkeyCodec::new("t", parts).unwrap_err();
        assert!(err.to_string().starts_with(message), "{err}");
    }
}

#[test]
fn prefix_parameters_are_validated() {
    let hash = |width, binary| RowkeyPart::HashPrefix {
        algo: HashAlgo::Md5,
        width,
        binary,
        separator: String::new(),
    };
    let key = RowkeyPart::Key { reverse: false };
    for part in [
        hash(0, false),
        hash(33, false),
        hash(17, true),
        RowkeyPart::RandomSalt {
            buckets: 1,
            width: 1,
            separator: String::new(),
        },
        RowkeyPart::HashSalt {
            buckets: 100,
            hash: HashAlgo::Xxh3,
            width: 1,
            separator: String::new(),
        },
        RowkeyPart::Ring {
            regions: 10,
            vnodes: 0,
            width: 1,
            separator: String::new(),
        },
    ] {
        assert!(
            RowkeyCodec::new("t", vec![part.clone(), key.clone()]).is_err(),
            "{part:?}"
        );
    }
    let err = RowkeyCodec::new("t", vec![hash(40, false), key]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "table \"t\": rowkey part 0 (hash_prefix): width 40 is out of range 1..=32 hex characters for md5"
    );
}

#[test]
fn empty_and_oversized_keys_are_errors() {
    let codec = md5_design(6);
    assert!(matches!(codec.encode(""), Err(CodecError::EmptyKey { .. })));
    let long = "x".repeat(MAX_ROWKEY_LEN);
    assert!(matches!(
        codec.encode(&long),
        Err(CodecError::RowkeyTooLong { .. })
    ));
}

#[test]
fn md5_prefix_splits_partition_the_prefix_space_evenly() {
    let splits = md5_design(6).codec_splits(10).unwrap();
    let text: Vec<String> = splits.iter().map(|s| printable(s)).collect();
    assert_eq!(
        text,
        [
            "199999", "333333", "4ccccc", "666666", "800000", "999999", "b33333", "cccccc",
            "e66666"
        ]
    );
    // Never more regions than prefixes.
    assert_eq!(md5_design(1).codec_splits(100).unwrap().len(), 15);
    assert_eq!(RowkeyCodec::plain("t").codec_splits(10), None);
}

#[test]
fn ring_region_formatting_and_splits() {
    let codec = RowkeyCodec::new(
        "t",
        vec![
            RowkeyPart::Ring {
                regions: 12,
                vnodes: 160,
                width: 2,
                separator: String::new(),
            },
            RowkeyPart::Key { reverse: false },
        ],
    )
    .unwrap();
    let ring = HashRing::new(12, 160).unwrap();
    let rowkey = codec.encode("u42").unwrap();
    assert_eq!(
        rowkey,
        format!("{:02}u42", ring.region_of("u42")).into_bytes()
    );
    assert_eq!(codec.decode(&rowkey).unwrap(), "u42");
    assert_eq!(codec.codec_splits(12).unwrap().len(), 11);
    assert_eq!(
        codec.codec_splits(3).unwrap(),
        vec![b"04".to_vec(), b"08".to_vec()]
    );
}
