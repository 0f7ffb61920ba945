//! The table config's validation, and the whole file's: every section and key named by path.

use super::*;

const USER: &str = r#"
[[tables]]
name = "user"

[[tables.families]]
name = "info"
versions = 1
ttl = "forever"
compression = "snappy"
bloomfilter = "ROW"
blocksize = 65536
data_block_encoding = "fast_diff"

[tables.rowkey]
parts = [ { kind = "hash_prefix", algo = "md5", width = 6 }, { kind = "key" } ]

[[tables.fields]]
name = "phone"
kind = "phone"
column = "info:phone"
phone_suffix_min = 6

[[tables.fields]]
name = "idcard"
kind = "idcard"
column = "info:idcard"

[tables.splits]
algo = "codec"
regions = 10
"#;

/// `USER` with `from` replaced, to provoke one error at a time.
fn user_with(from: &str, to: &str) -> Result<HbidxConfig, ConfigError> {
    assert!(USER.contains(from), "{from}");
    parse_config(&USER.replacen(from, to, 1))
}

/// What is wrong, without the path (which `unknown_sections_and_bad_keys_name_their_path`
/// checks): the table, family or field the message names, and why.
fn message(result: Result<HbidxConfig, ConfigError>) -> String {
    match result.expect_err("config should be rejected") {
        ConfigError::Invalid { reason, .. } => reason,
        other => other.to_string(),
    }
}

fn full_message(result: Result<HbidxConfig, ConfigError>) -> String {
    result.expect_err("config should be rejected").to_string()
}

/// The example shipped in `deploy/config` must always parse and do what its comments say.
#[test]
fn example_config_is_valid() {
    let config = parse_config(crate::EXAMPLE_CONFIG).unwrap();
    let user = config.table("user").unwrap();
    assert_eq!(user.full_name(), "user");
    assert_eq!(user.rowkey.describe(), "substr(md5(key),0,6) + key");
    assert_eq!(user.rowkey.encode("foo0001").unwrap(), b"95f18cfoo0001");
    let kinds: Vec<FieldKind> = user.fields.iter().map(|f| f.kind).collect();
    assert_eq!(
        kinds,
        [FieldKind::Phone, FieldKind::Idcard, FieldKind::Name]
    );
    let splits = user.split_keys(None, None).unwrap();
    let text: Vec<String> = splits.iter().map(|s| crate::codec::printable(s)).collect();
    assert_eq!(
        text,
        [
            "199999", "333333", "4ccccc", "666666", "800000", "999999", "b33333", "cccccc",
            "e66666"
        ]
    );
    assert_eq!(
        crate::ddl::create_statement(user, &splits),
        "create 'user', {NAME => 'info', VERSIONS => '1', COMPRESSION => 'SNAPPY', BLOOMFILTER => 'ROW', \
         BLOCKSIZE => '65536', DATA_BLOCK_ENCODING => 'FAST_DIFF'}, {SPLITS => ['199999', '333333', \
         '4ccccc', '666666', '800000', '999999', 'b33333', 'cccccc', 'e66666']}"
    );
}

#[test]
fn parses_a_table() {
    let config = parse_config(USER).unwrap();
    let user = config.table("user").unwrap();
    assert_eq!(user.full_name(), "user");
    assert_eq!(user.namespace, "default");
    let info = user.family("info").unwrap();
    assert_eq!(info.ttl, Some(Ttl::Forever));
    assert_eq!(info.compression, Some(Compression::Snappy));
    assert_eq!(info.data_block_encoding, Some(DataBlockEncoding::FastDiff));
    assert_eq!(info.blocksize, Some(65536));
    assert_eq!(user.rowkey.describe(), "substr(md5(key),0,6) + key");
    assert_eq!(user.field("phone").unwrap().phone_suffix_min, 6);
    assert_eq!(user.field("idcard").unwrap().phone_suffix_min, 4);
    assert_eq!(user.field("idcard").unwrap().family(), "info");
    assert_eq!(user.field("idcard").unwrap().qualifier(), "idcard");
    assert_eq!(user.fields_of_kind(FieldKind::Phone).count(), 1);
    assert_eq!(user.splits, Some(SplitConfig::Codec { regions: 10 }));
    assert_eq!(user.split_keys(None, None).unwrap().len(), 9);
    assert_eq!(config.store, StoreConfig::default());
}

#[test]
fn every_section_is_validated_together() {
    let text = format!(
        "{USER}\n[store]\nkind = \"embedded\"\n[server]\nlisten = \"127.0.0.1:8080\"\n\
         [[sources]]\nkind = \"kafka\"\nbrokers = \"b:9092\"\ntopic = \"t\"\ntable = \"user\"\n\
         [security]\n[memory]\nbudget_mb = 256\n"
    );
    let config = parse_config(&text).unwrap();
    assert_eq!(config.store, StoreConfig::default());
    assert_eq!(
        config.server.listen,
        Some("127.0.0.1:8080".parse().unwrap())
    );
    assert_eq!(config.source_for("user").unwrap().topic, "t");
    assert!(config.security.keys.is_empty());
    assert_eq!(config.memory.budget_bytes, 256 << 20);
}

/// Unknown sections and keys are errors in every section, and every error names the path of
/// the key at fault, so an operator can find it in a long file.
#[test]
fn unknown_sections_and_bad_keys_name_their_path() {
    let cases: &[(&str, &str)] = &[
        // An unknown section, and the section nothing ever read.
        ("[cache]\nsize = 1", "unknown field `cache`"),
        (
            "[indexer]\ncommit_ms = 50",
            "indexer: hbidx has no [indexer] settings",
        ),
        // An unknown key in each section.
        (
            "[store]\nkind = \"hbase\"\nthrfit = \"h:1\"",
            "store.thrfit: unknown field `thrfit`",
        ),
        (
            "[server]\nlisen = \"127.0.0.1:1\"",
            "server.lisen: unknown field `lisen`",
        ),
        (
            "[security]\nkeyz = []",
            "security.keyz: unknown field `keyz`",
        ),
        (
            "[memory]\nbudget = 5",
            "memory.budget: unknown field `budget`",
        ),
        (
            "[[sources]]\nkind = \"kafka\"\nbrokers = \"b\"\ntopic = \"t\"\ntable = \"user\"\ntopik = \"u\"",
            "sources[0].topik: unknown field `topik`",
        ),
        // A bad value in each section.
        (
            "[store]\nkind = \"hbase\"\nthrift = \"h:1\"\npool_size = 0",
            "store.pool_size: 0 is out of range",
        ),
        ("[server]\nworkers = 0", "server.workers: 0 is not within"),
        (
            "[[security.keys]]\nid = \"a\"\nscopes = [\"lookup\"]",
            "security.keys[0].sha256: missing",
        ),
        (
            "[memory]\nbudget_mb = 1",
            "memory.budget_mb: 1 is not within",
        ),
        (
            "[[sources]]\nkind = \"kafka\"\ntopic = \"t\"\ntable = \"user\"",
            "sources[0].brokers: is required",
        ),
        (
            "[server]\nworkers = \"two\"",
            "server.workers: invalid type",
        ),
    ];
    for (section, expected) in cases {
        let err = parse_config(&format!("{USER}\n{section}\n"))
            .expect_err(section)
            .to_string();
        assert!(err.contains(expected), "{section:?}\n=> {err}");
    }
    // In the tables: an unknown key and a bad value, each named down to its entry.
    for (from, to, expected) in [
        (
            "compression = \"snappy\"",
            "compresion = \"snappy\"",
            "tables[0].families[0].compresion: unknown field",
        ),
        (
            "kind = \"idcard\"",
            "kind = \"passport\"",
            "tables[0].fields[1]: table \"user\": field \"idcard\": kind \"passport\"",
        ),
        (
            "{ kind = \"key\" }",
            "{ kind = \"key\", widht = 3 }",
            "tables[0].rowkey.parts[1].widht: unknown field",
        ),
        (
            "regions = 10",
            "regions = 1",
            "tables[0].splits: table \"user\": splits: regions 1",
        ),
        (
            "name = \"info\"",
            "name = \"in fo\"",
            "tables[0].families[0]: table \"user\": family \"in fo\"",
        ),
    ] {
        let err = full_message(user_with(from, to));
        assert!(err.contains(expected), "{to:?}\n=> {err}");
    }
    let err = full_message(parse_config("[[tables]]\nnamespace = \"crm\""));
    assert!(err.starts_with("tables[0].name: missing"), "{err}");
    assert_eq!(
        parse_config("[[tables]]\nnamespace = \"crm\"")
            .unwrap_err()
            .path(),
        "tables[0].name"
    );
}

#[test]
fn namespaces_and_lookup() {
    let config = user_with("name = \"user\"", "name = \"user\"\nnamespace = \"crm\"").unwrap();
    assert!(config.table("user").is_some());
    assert_eq!(config.table("crm:user").unwrap().full_name(), "crm:user");
    assert!(config.table("other").is_none());
    assert_eq!(
        message(user_with(
            "name = \"user\"",
            "name = \"user\"\nnamespace = \"hbase\""
        )),
        "table \"user\": namespace \"hbase\" is reserved for hbase's system tables"
    );
}

#[test]
fn unknown_keys_are_rejected() {
    let err = message(user_with("compression", "compresion"));
    assert!(
        err.starts_with("unknown field `compresion`") && err.contains("at line 9, column 1"),
        "{err}"
    );
    let err = message(parse_config(&format!("{USER}\n[metrics]\nport = 1\n")));
    assert!(err.contains("unknown field `metrics`"), "{err}");
    let err = message(parse_config("[[tables]\n"));
    assert!(err.starts_with("invalid config toml at line 1"), "{err}");
}

#[test]
fn covered_columns_are_kept_beside_the_indexed_ones() {
    // Table keys go before the table's first sub-table in TOML.
    let config = user_with(
        "name = \"user\"\n",
        "name = \"user\"\ncovered = [\"info:name\", \"info:city\"]\n",
    )
    .unwrap();
    let user = config.table("user").unwrap();
    assert_eq!(user.covered, ["info:name", "info:city"]);
    let kept: Vec<&str> = user.kept_columns().collect();
    assert_eq!(
        kept,
        ["info:phone", "info:idcard", "info:name", "info:city"]
    );
    assert!(user.keeps_column("info:city") && !user.keeps_column("info:email"));
    let cases = [
        (
            "[\"info:city\", \"other:x\"]",
            "table \"user\": covered \"other:x\": family \"other\" is not declared",
        ),
        (
            "[\"city\"]",
            "table \"user\": covered \"city\": is not of the form \"family:qualifier\"",
        ),
        (
            "[\"info:\"]",
            "table \"user\": covered \"info:\": has an empty qualifier",
        ),
        (
            "[\"info:phone\"]",
            "table \"user\": covered \"info:phone\": is indexed by field \"phone\", whose value the index keeps anyway; remove it from covered",
        ),
        (
            "[\"info:city\", \"info:city\"]",
            "table \"user\": covered \"info:city\": is listed more than once",
        ),
    ];
    for (list, expected) in cases {
        let err = message(user_with(
            "name = \"user\"\n",
            &format!("name = \"user\"\ncovered = {list}\n"),
        ));
        assert_eq!(err, expected);
    }
}

#[test]
fn errors_name_what_is_wrong() {
    let cases = [
        (
            "column = \"info:phone\"",
            "column = \"info2:phone\"",
            "table \"user\": field \"phone\": column \"info2:phone\" uses family \"info2\" which is not declared",
        ),
        (
            "column = \"info:idcard\"",
            "column = \"info:phone\"",
            "table \"user\": field \"idcard\": column \"info:phone\" is already indexed by field \"phone\"",
        ),
        (
            "name = \"idcard\"",
            "name = \"phone\"",
            "table \"user\": field \"phone\": is declared more than once",
        ),
        (
            "name = \"idcard\"",
            "name = \"IdCard\"",
            "table \"user\": field \"IdCard\": name must match [a-z][a-z0-9_]* (at most 64 characters)",
        ),
        (
            "kind = \"idcard\"",
            "kind = \"passport\"",
            "table \"user\": field \"idcard\": kind \"passport\" is not one of phone, idcard, name, keyword",
        ),
        (
            "phone_suffix_min = 6",
            "phone_suffix_min = 9",
            "table \"user\": field \"phone\": phone_suffix_min 9 is out of range 3..=8",
        ),
        (
            "column = \"info:idcard\"",
            "column = \"info:idcard\"\nphone_suffix_min = 4",
            "table \"user\": field \"idcard\": phone_suffix_min only applies to phone fields, this one is idcard",
        ),
        (
            "compression = \"snappy\"",
            "compression = \"brotli\"",
            "table \"user\": family \"info\": compression \"brotli\" is not one of NONE, SNAPPY, LZ4, GZ, ZSTD, LZO",
        ),
        (
            "versions = 1",
            "versions = 0",
            "table \"user\": family \"info\": versions 0 is out of range 1..=2147483647",
        ),
        (
            "ttl = \"forever\"",
            "ttl = -5",
            "table \"user\": family \"info\": ttl -5 is out of range 1..=2147483647 seconds",
        ),
        (
            "blocksize = 65536",
            "blocksize = 512",
            "table \"user\": family \"info\": blocksize 512 is out of range 1024..=16777216 bytes",
        ),
        (
            "bloomfilter = \"ROW\"",
            "bloomfilter = \"ROWPREFIX_FIXED_LENGTH\"",
            "table \"user\": family \"info\": bloomfilter ROWPREFIX_FIXED_LENGTH needs bloom_prefix_length (hbase refuses the table without it)",
        ),
        (
            "name = \"user\"",
            "name = \".user\"",
            "table \".user\": name must not start with '.' or '-'",
        ),
        (
            "name = \"user\"",
            "name = \"us er\"",
            "table \"us er\": name contains ' '; hbase table names use only letters, digits, '_', '.' and '-'",
        ),
        (
            "width = 6",
            "width = 40",
            "table \"user\": rowkey part 0 (hash_prefix): width 40 is out of range 1..=32 hex characters for md5",
        ),
        (
            "width = 6",
            "width = 6, buckets = 4",
            "table \"user\": rowkey part 0 (hash_prefix): `buckets` does not apply to hash_prefix; it takes algo, width, separator, binary",
        ),
        (
            "{ kind = \"key\" }",
            "{ kind = \"id\" }",
            "table \"user\": rowkey part 1 (unknown): kind \"id\" is not one of hash_prefix, random_salt, hash_salt, modulo, ring, key, reverse_ts",
        ),
        (
            "{ kind = \"key\" }",
            "{ kind = \"reverse_ts\" }, { kind = \"key\" }",
            "table \"user\": rowkey part 1 (reverse_ts): reverse_ts must come after the key part",
        ),
        (
            "regions = 10",
            "regions = 1",
            "table \"user\": splits: regions 1 is out of range 2..=10000",
        ),
        (
            "algo = \"codec\"",
            "algo = \"murmur\"",
            "table \"user\": splits: algo \"murmur\" is not one of hex, uniform, decimal, codec, sampled, explicit, file",
        ),
        (
            "{ kind = \"hash_prefix\", algo = \"md5\", width = 6 }, ",
            "",
            "table \"user\": splits: algo \"codec\" needs a rowkey prefix part, and \"key\" has none; use \"sampled\" or an explicit list",
        ),
    ];
    for (from, to, expected) in cases {
        let err = message(user_with(from, to));
        assert_eq!(err, expected, "replacing {from:?} with {to:?}");
    }
    // A hex hash prefix of width 1 has only 16 distinct prefixes.
    let err = message(parse_config(
        &USER
            .replace("width = 6", "width = 1")
            .replace("regions = 10", "regions = 20"),
    ));
    assert!(
        err.starts_with("table \"user\": splits: regions 20 is more than the 16 distinct prefixes"),
        "{err}"
    );
}

#[test]
fn structural_errors() {
    assert_eq!(
        message(parse_config("[[tables]]\nnamespace = \"x\"\n")),
        "missing; every [[tables]] entry needs a name"
    );
    assert_eq!(
        message(parse_config(
            "[[tables]]\nname = \"t\"\n[tables.rowkey]\nparts = [{ kind = \"key\" }]\n"
        )),
        "table \"t\": declares no column families; add at least one [[tables.families]]"
    );
    assert!(
        message(parse_config(
            "[[tables]]\nname = \"t\"\n[[tables.families]]\nname = \"f\"\n"
        ))
        .starts_with("table \"t\": has no [tables.rowkey]")
    );
    let twice = format!(
        "{USER}\n{}",
        USER.split("[tables.splits]").next().unwrap_or("")
    );
    assert_eq!(
        message(parse_config(&twice)),
        "table \"user\": is declared more than once"
    );
    assert!(parse_config("").unwrap().tables.is_empty());
}

#[test]
fn every_split_algo() {
    let with = |splits: &str| user_with("algo = \"codec\"\nregions = 10", splits);
    let table = |config: HbidxConfig| config.tables.into_iter().next().unwrap();
    let hex = table(with("algo = \"hex\"\nregions = 15").unwrap());
    assert_eq!(hex.split_keys(None, None).unwrap()[0], b"11111111");
    let uniform = table(with("algo = \"uniform\"\nregions = 2").unwrap());
    assert_eq!(
        uniform.split_keys(None, None).unwrap(),
        vec![vec![0x80, 0, 0, 0, 0, 0, 0, 0]]
    );
    let decimal = table(with("algo = \"decimal\"\nregions = 2").unwrap());
    assert_eq!(
        decimal.split_keys(None, None).unwrap(),
        vec![b"50000000".to_vec()]
    );
    let explicit = table(with("algo = \"explicit\"\nkeys = [\"b\", \"a\", \"\\\\x00\"]").unwrap());
    assert_eq!(
        explicit.split_keys(None, None).unwrap(),
        vec![vec![0], b"a".to_vec(), b"b".to_vec()]
    );
    let file = table(with("algo = \"file\"\nfile = \"splits.txt\"").unwrap());
    assert_eq!(
        file.splits,
        Some(SplitConfig::File {
            path: "splits.txt".into()
        })
    );
    assert_eq!(
        file.split_keys(None, None).unwrap_err().to_string(),
        "table \"user\": splits algo \"file\" needs the splits file text, which the caller reads"
    );
    assert_eq!(
        file.split_keys(Some("b\na\n"), None).unwrap(),
        vec![b"a".to_vec(), b"b".to_vec()]
    );
    let sampled = table(with("algo = \"sampled\"\nregions = 2").unwrap());
    let samples = vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec(), b"d".to_vec()];
    assert_eq!(
        sampled.split_keys(None, Some(samples)).unwrap(),
        vec![b"c".to_vec()]
    );
    assert!(sampled.split_keys(None, None).is_err());
    assert!(
        message(with("algo = \"explicit\"\nkeys = [\"a\", \"a\"]"))
            .contains("appears more than once")
    );
    assert!(message(with("algo = \"explicit\"\nkeys = [\"\"]")).contains("split key 0 is empty"));
    assert!(message(with("algo = \"hex\"")).ends_with("algo \"hex\" needs regions"));
    assert!(
        message(with("algo = \"file\"\nregions = 3"))
            .ends_with("regions does not apply to algo \"file\"")
    );
}

#[test]
fn every_part_kind_parses() {
    let design = |parts: &str| {
        user_with(
            "parts = [ { kind = \"hash_prefix\", algo = \"md5\", width = 6 }, { kind = \"key\" } ]",
            &format!("parts = {parts}"),
        )
        .map(|config| config.tables[0].rowkey.describe())
    };
    assert_eq!(
        design(r#"[{ kind = "random_salt", buckets = 10, separator = "-" }, { kind = "key" }]"#)
            .unwrap(),
        "lpad(random() mod 10,1,'0') + \"-\" + key"
    );
    assert_eq!(
        design(r#"[{ kind = "hash_salt", buckets = 100, hash = "xxh3" }, { kind = "key" }]"#)
            .unwrap(),
        "lpad(xxh3(key) mod 100,2,'0') + key"
    );
    assert_eq!(
        design(r#"[{ kind = "modulo", buckets = 10 }, { kind = "key" }]"#).unwrap(),
        "bytes8(key mod 10) + key"
    );
    assert_eq!(
        design(r#"[{ kind = "ring", regions = 10 }, { kind = "key", reverse = true }, { kind = "reverse_ts", format = "decimal" }]"#).unwrap(),
        "lpad(ring(id,10 regions,160 vnodes),1,'0') + reverse(id) + lpad(Long.MAX_VALUE - ts,19,'0')"
    );
    assert_eq!(
        design(r#"[{ kind = "hash_prefix", algo = "murmur3", width = 4, binary = true, separator = "|" }, { kind = "key" }]"#).unwrap(),
        "head(murmur3_bytes(key),4) + \"|\" + key"
    );
    assert!(
        design(r#"[{ kind = "random_salt", buckets = 100, width = 1 }, { kind = "key" }]"#)
            .is_err()
    );
    assert!(design(r#"[{ kind = "modulo" }, { kind = "key" }]"#).is_err());
    assert!(design(r#"[{ kind = "modulo", buckets = -3 }, { kind = "key" }]"#).is_err());
    assert!(design(r#"[{ kind = "key" }, { kind = "reverse_ts", format = "iso" }]"#).is_err());
    assert!(
        design(r#"[{ kind = "hash_prefix", algo = "sha1", width = 4 }, { kind = "key" }]"#)
            .is_err()
    );
    assert!(design(r#"[]"#).is_err());
}

const HBASE_STORE: &str = "\n[store]\nkind = \"hbase\"\nthrift = \"127.0.0.1:9090\"\n";

fn cluster(section: &str) -> Result<HbidxConfig, ConfigError> {
    parse_config(&format!("{USER}{HBASE_STORE}\n[cluster]\n{section}"))
}

#[test]
fn cluster_shards_default_to_runs_of_the_tables_regions() {
    let config = cluster(
        "shards = [[\"http://a:8080\"], [\"http://b:8080\", \"http://c:8080/\"], [\"http://d:8080\"]]\nshard = 1\n",
    )
    .unwrap();
    let cluster = config.cluster.unwrap();
    // 10 codec regions over 3 shards: regions 0-2, 3-5, 6-9, so shards start at the 3rd and
    // 6th split points (333333.., 800000..: splits[2] is 4ccccc, splits[5] is 999999).
    let splits = config.tables[0].split_keys(None, None).unwrap();
    assert_eq!(
        cluster.boundaries["user"],
        vec![splits[2].clone(), splits[5].clone()]
    );
    assert_eq!(cluster.shards[1], vec!["http://b:8080", "http://c:8080"]);
    assert_eq!(cluster.shard_of("user", b"000000u1"), 0);
    assert_eq!(cluster.shard_of("user", &splits[2]), 1);
    assert_eq!(cluster.shard_of("user", b"ffffffu1"), 2);
    let range = cluster.range("user", 1);
    assert!(range.contains(&splits[2]) && !range.contains(&splits[5]));
    assert!(range.has_keys_after(b"4") && !range.has_keys_after(&splits[5]));
    let cluster = cluster.with_identity(None, Some(1)).unwrap();
    assert_eq!(cluster.own_url(), Some("http://c:8080"));
    assert_eq!(cluster.own_range("user"), Some(range));
}

#[test]
fn cluster_errors_name_their_key() {
    let message = |result: Result<HbidxConfig, ConfigError>| result.unwrap_err().to_string();
    let embedded = parse_config(&format!("{USER}\n[cluster]\nshards = [[\"http://a:1\"]]\n"));
    assert!(
        message(embedded).starts_with("cluster: sharding needs the rows in HBase"),
        "embedded store refused"
    );
    for (section, path, says) in [
        ("shard = 0\n", "cluster.shards", "is required"),
        ("shards = []\n", "cluster.shards", "not within"),
        ("shards = [[]]\n", "cluster.shards[0]", "lists no replica"),
        (
            "shards = [[\"a:1\"]]\n",
            "cluster.shards[0][0]",
            "not a base URL",
        ),
        (
            "shards = [[\"http://a:1\"], [\"http://a:1\"]]\n",
            "cluster.shards[1][0]",
            "listed twice",
        ),
        (
            "shards = [[\"http://a:1\"]]\nshard = 1\n",
            "cluster.shard",
            "does not exist",
        ),
        (
            "shards = [[\"http://a:1\"]]\ntimeout_ms = 0\n",
            "cluster.timeout_ms",
            "not within",
        ),
        (
            "shards = [[\"http://a:1\"], [\"http://b:1\"]]\n[cluster.boundaries]\nuser = [\"5\", \"a\"]\n",
            "cluster.boundaries.user",
            "2 shards need 1 boundaries, got 2",
        ),
        (
            "shards = [[\"http://a:1\"], [\"http://b:1\"]]\n[cluster.boundaries]\nusers = [\"5\"]\n",
            "cluster.boundaries.users",
            "no table",
        ),
        (
            "shards = [[\"http://a:1\"]]\nshardz = 1\n",
            "cluster.shardz",
            "unknown field",
        ),
    ] {
        let text = message(cluster(section));
        assert!(
            text.starts_with(&format!("{path}: ")) && text.contains(says),
            "{section}: {text}"
        );
    }
    // Eleven shards over ten regions can't be whole regions.
    let urls: Vec<String> = (0..11).map(|i| format!("[\"http://h{i}:1\"]")).collect();
    let text = message(cluster(&format!("shards = [{}]\n", urls.join(", "))));
    assert!(text.contains("fewer than 11 shards"), "{text}");
    // The identity from the command line is checked against the layout too.
    let config = cluster("shards = [[\"http://a:1\"]]\n").unwrap();
    let err = config
        .cluster
        .unwrap()
        .with_identity(Some(0), Some(2))
        .unwrap_err();
    assert!(err.to_string().starts_with("cluster.replica: "), "{err}");
}

#[test]
fn blind_fields_are_phone_idcard_or_keyword_and_name_their_key_when_refused() {
    let config = user_with(
        "column = \"info:idcard\"\n",
        "column = \"info:idcard\"\nblind = true\n",
    )
    .unwrap();
    let user = config.table("user").unwrap();
    assert!(user.field("idcard").unwrap().blind);
    assert!(!user.field("phone").unwrap().blind);
    assert!(user.has_blind_fields());
    assert_eq!(config.blind_fields(), ["user.idcard"]);
    // Kept (the index keeps its tags), but never answered from the index.
    assert!(user.keeps_column("info:idcard") && !user.answers_column("info:idcard"));
    assert!(user.answers_column("info:phone"));
    assert!(user.field("idcard").unwrap().blind_key.is_none());

    let mut armed = config.clone();
    armed.set_blind_key(&crate::BlindKey::new("0123456789abcdef0123456789abcdef").unwrap());
    let user = armed.table("user").unwrap();
    assert!(user.field("idcard").unwrap().blind_key.is_some());
    assert!(user.field("phone").unwrap().blind_key.is_none());

    for kind in ["phone", "keyword"] {
        let text = USER.replacen(
            "kind = \"idcard\"\n",
            &format!("kind = \"{kind}\"\nblind = true\n"),
            1,
        );
        assert!(parse_config(&text).is_ok(), "{kind}");
    }
    let err = user_with(
        "kind = \"idcard\"\ncolumn = \"info:idcard\"\n",
        "kind = \"name\"\ncolumn = \"info:idcard\"\nblind = true\n",
    )
    .unwrap_err();
    assert_eq!(err.path(), "tables[0].fields[1].blind");
    let text = err.to_string();
    assert!(
        text.starts_with("tables[0].fields[1].blind: table \"user\": field \"idcard\": blind: name fields can't be blind"),
        "{text}"
    );
    let err = user_with(
        "column = \"info:idcard\"\n",
        "column = \"info:idcard\"\nblind = 1\n",
    )
    .unwrap_err();
    assert!(err.path().contains("blind"), "{err}");
}

#[test]
fn blind_key_file_is_a_path_or_absent() {
    let config = parse_config(&format!(
        "{USER}\n[security]\nblind_key_file = \"/run/secrets/blind\"\n"
    ))
    .unwrap();
    assert_eq!(
        config.security.blind_key_file.as_deref(),
        Some("/run/secrets/blind")
    );
    let err = parse_config(&format!("{USER}\n[security]\nblind_key_file = \"\"\n")).unwrap_err();
    assert_eq!(err.path(), "security.blind_key_file");
}
