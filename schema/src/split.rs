//! Pre-split calculators, region routing and the hotspot report.
//!
//! HBase creates a table with one region unless it is given split keys; every write then lands
//! on one RegionServer until the region grows and splits. The seeds' fix is to pre-split, and the
//! split points must match the rowkey design: ten regions split on hex strings are useless if
//! every rowkey starts with `u`. This module computes split keys:
//!
//! - [`hex_string_split`], [`decimal_string_split`], [`uniform_split`]: exactly what HBase's
//!   `RegionSplitter` algorithms (`HexStringSplit`, `DecimalStringSplit`, `UniformSplit`) return,
//!   so `hbidx` and `hbase shell ... SPLITALGO => 'HexStringSplit'` agree byte for byte;
//! - [`RowkeyCodec::codec_splits`](crate::codec::RowkeyCodec::codec_splits): boundaries of the
//!   design's own prefix buckets;
//! - [`sampled_splits`]: quantiles of sample rowkeys (seeds 001 and 002), for designs whose key
//!   space is unknown;
//! - [`parse_splits_file`]: an HBase shell `SPLITS_FILE`.
//!
//! [`RegionMap`] routes rowkeys to regions the way HBase does, and [`HotspotReport`] shows how
//! evenly a set of rowkeys spreads over them (`hbidx hotspot`).

use std::fmt::Write as _;

use crate::codec::{CodecError, parse_printable, printable};

/// Region counts accepted by the calculators (HBase needs at least 2 to split at all).
pub const MAX_REGIONS: u32 = 10_000;

/// Errors from split calculation and region routing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    /// A calculator asked for a region count outside 2..=10000.
    #[error("{algo} split needs 2..=10000 regions, got {regions}")]
    RegionCount { algo: &'static str, regions: u32 },
    /// HBase refuses empty split keys (`Empty split key must not be passed in the split keys`).
    #[error("split key {index} is empty; hbase refuses empty split keys")]
    EmptySplitKey { index: usize },
    /// Split keys must be strictly increasing to describe regions.
    #[error(
        "split key {index} ({key}) is not greater than split key {previous_index} ({previous}); split keys must be strictly increasing"
    )]
    NotIncreasing {
        index: usize,
        key: String,
        previous_index: usize,
        previous: String,
    },
    /// A line of a splits file is not valid escaped text.
    #[error("splits file line {line}: {source}")]
    FileLine {
        line: usize,
        #[source]
        source: CodecError,
    },
    /// The same split key appears twice (HBase refuses duplicates too).
    #[error("split key {key} appears more than once ({first} and {second})")]
    Duplicate {
        key: String,
        /// Where it was first seen (`line 3` or `key 2`).
        first: String,
        second: String,
    },
    /// A split algorithm needs input the config does not hold (the CLI reads files).
    #[error("table {table:?}: splits algo {algo:?} needs {needs}")]
    MissingInput {
        table: String,
        algo: &'static str,
        needs: &'static str,
    },
    /// `algo = "codec"` on a design without a prefix part.
    #[error(
        "table {table:?}: splits algo \"codec\" needs a rowkey prefix part (hash_prefix, random_salt, hash_salt, modulo or ring); use \"sampled\" or an explicit list for this design"
    )]
    NoCodecPrefix { table: String },
}

fn check_regions(algo: &'static str, regions: u32) -> Result<(), SplitError> {
    if (2..=MAX_REGIONS).contains(&regions) {
        Ok(())
    } else {
        Err(SplitError::RegionCount { algo, regions })
    }
}

/// HBase's `NumberStringSplit.split(n)` over `[0, last]` in `radix`, padded to `pad` characters:
/// `range = last - first + 1; size = range / n; split[i-1] = first + size * i` for `i in 1..n`
/// (the last region gets the remainder), printed lowercase as `BigInteger.toString(radix)`.
fn number_string_split(last: u64, radix: u32, pad: usize, regions: u32) -> Vec<Vec<u8>> {
    let range = u128::from(last) + 1;
    let size = range / u128::from(regions);
    (1..u128::from(regions))
        .map(|i| {
            let value = size * i;
            let text = match radix {
                16 => format!("{value:0pad$x}"),
                _ => format!("{value:0pad$}"),
            };
            text.into_bytes()
        })
        .collect()
}

/// `RegionSplitter.HexStringSplit`: 8-character lowercase hex strings over
/// `"00000000".."FFFFFFFF"`. For 15 regions: `11111111`, `22222222`, … `eeeeeeee`.
pub fn hex_string_split(regions: u32) -> Result<Vec<Vec<u8>>, SplitError> {
    check_regions("hex", regions)?;
    Ok(number_string_split(0xFFFF_FFFF, 16, 8, regions))
}

/// `RegionSplitter.DecimalStringSplit`: 8-digit decimal strings over `"00000000".."99999999"`.
/// For 10 regions: `10000000`, `20000000`, … `90000000`.
pub fn decimal_string_split(regions: u32) -> Result<Vec<Vec<u8>>, SplitError> {
    check_regions("decimal", regions)?;
    Ok(number_string_split(99_999_999, 10, 8, regions))
}

/// `RegionSplitter.UniformSplit`: 8-byte keys dividing `[00..00, FF..FF]` evenly.
///
/// HBase computes `Bytes.split(new byte[0], {0xFF x 8}, inclusive = true, n - 1)` and drops the
/// two endpoints. In `Bytes.iterateOnSplits` the start pads to `00 x 8`, both ends get the
/// `{1, 0}` header (so `BigInteger` sees them as unsigned), `diff = stop - start + 1 = 2^64`,
/// `interval = diff / n`, and split `i` is `start + interval * i` with the header stripped again:
/// the 8 bytes of `floor(2^64 / n) * i`, big-endian.
pub fn uniform_split(regions: u32) -> Result<Vec<Vec<u8>>, SplitError> {
    check_regions("uniform", regions)?;
    let interval = (1u128 << 64) / u128::from(regions);
    Ok((1..u128::from(regions))
        .map(|i| {
            // interval * i < 2^64 for every i < regions, so the low 8 bytes are the value.
            (interval * i).to_be_bytes()[8..].to_vec()
        })
        .collect())
}

/// Split keys as quantiles of sample rowkeys (seeds 001 and 002: generate rowkeys, sort them,
/// take every k-th). Samples are sorted and deduplicated; split `i` is the sample at
/// `floor(i * len / regions)`. With fewer distinct samples than regions there are fewer splits.
/// The empty key is never a split (it is where region 0 starts already).
pub fn sampled_splits(mut keys: Vec<Vec<u8>>, regions: u32) -> Vec<Vec<u8>> {
    keys.retain(|key| !key.is_empty());
    keys.sort_unstable();
    keys.dedup();
    let len = keys.len();
    let regions = usize::try_from(regions).unwrap_or(usize::MAX);
    if len == 0 || regions < 2 {
        return Vec::new();
    }
    let mut splits: Vec<Vec<u8>> = Vec::with_capacity(regions - 1);
    for i in 1..regions {
        let index = (i as u128 * len as u128 / regions as u128) as usize;
        if index == 0 {
            continue;
        }
        if let Some(key) = keys.get(index).filter(|key| splits.last() != Some(*key)) {
            splits.push(key.clone());
        }
    }
    splits
}

/// Parses an HBase shell `SPLITS_FILE`: one split key per line.
///
/// Decisions, checked against HBase's `admin.rb` and `Bytes`:
/// - Line endings are stripped (`\n`, `\r\n`), as the shell's `line.chomp` does; other
///   whitespace is part of the key (older shells used `strip`; the current `admin.rb` keeps
///   leading and trailing spaces).
/// - `\xNN` escapes are decoded, because the shell passes every line through
///   `Bytes.toBytesBinary`: a file written with [`printable`] keys round-trips. Decoding is
///   strict (see [`parse_printable`]).
/// - Empty lines are skipped. The shell would pass them on and the master would refuse the
///   table with "Empty split key must not be passed", so a trailing blank line is all they can be.
/// - Keys are sorted, as `Admin.createTable` sorts them; a duplicate is an error, as in HBase.
pub fn parse_splits_file(text: &str) -> Result<Vec<Vec<u8>>, SplitError> {
    let mut keyed = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.is_empty() {
            continue;
        }
        let key = parse_printable(line).map_err(|source| SplitError::FileLine {
            line: index + 1,
            source,
        })?;
        keyed.push((key, format!("line {}", index + 1)));
    }
    sort_and_check(keyed)
}

/// Parses an explicit split list (config `keys = [...]`, the shell's `SPLITS => [...]`): each
/// entry goes through [`parse_printable`]; the list is sorted and must have no duplicates or
/// empty keys, like HBase requires.
pub fn parse_split_list(keys: &[String]) -> Result<Vec<Vec<u8>>, SplitError> {
    let mut keyed = Vec::with_capacity(keys.len());
    for (index, key) in keys.iter().enumerate() {
        let bytes = parse_printable(key).map_err(|source| SplitError::FileLine {
            line: index + 1,
            source,
        })?;
        if bytes.is_empty() {
            return Err(SplitError::EmptySplitKey { index });
        }
        keyed.push((bytes, format!("key {index}")));
    }
    sort_and_check(keyed)
}

fn sort_and_check(mut keyed: Vec<(Vec<u8>, String)>) -> Result<Vec<Vec<u8>>, SplitError> {
    // Stable, so duplicates are reported in input order.
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    for pair in keyed.windows(2) {
        let [(previous, first), (key, second)] = pair else {
            continue;
        };
        if previous == key {
            return Err(SplitError::Duplicate {
                key: printable(key),
                first: first.clone(),
                second: second.clone(),
            });
        }
    }
    Ok(keyed.into_iter().map(|(key, _)| key).collect())
}

/// Checks that `splits` describe regions: non-empty keys, strictly increasing.
pub fn validate_splits(splits: &[Vec<u8>]) -> Result<(), SplitError> {
    for (index, key) in splits.iter().enumerate() {
        if key.is_empty() {
            return Err(SplitError::EmptySplitKey { index });
        }
        if index > 0 && splits[index - 1] >= *key {
            return Err(SplitError::NotIncreasing {
                index,
                key: printable(key),
                previous_index: index - 1,
                previous: printable(&splits[index - 1]),
            });
        }
    }
    Ok(())
}

/// One region: `[start, end)`, where an empty start is the beginning of the table and an empty
/// end is its end (HBase's convention).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    pub index: usize,
    pub start: Vec<u8>,
    pub end: Vec<u8>,
}

/// The regions a list of split keys creates, for routing rowkeys like HBase does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionMap {
    splits: Vec<Vec<u8>>,
}

impl RegionMap {
    /// `splits` must be non-empty keys in strictly increasing order; no splits is one region.
    pub fn new(splits: Vec<Vec<u8>>) -> Result<RegionMap, SplitError> {
        validate_splits(&splits)?;
        Ok(RegionMap { splits })
    }

    /// The region holding `rowkey`: region `i` covers `[split[i-1], split[i])`, so a rowkey equal
    /// to a split key starts the next region.
    pub fn region_of(&self, rowkey: &[u8]) -> usize {
        self.splits
            .partition_point(|split| split.as_slice() <= rowkey)
    }

    /// Number of regions (splits + 1).
    pub fn region_count(&self) -> usize {
        self.splits.len() + 1
    }

    /// The split keys.
    pub fn splits(&self) -> &[Vec<u8>] {
        &self.splits
    }

    /// Every region with its start and end key.
    pub fn regions(&self) -> Vec<Region> {
        (0..self.region_count())
            .map(|index| Region {
                index,
                start: index
                    .checked_sub(1)
                    .and_then(|i| self.splits.get(i))
                    .cloned()
                    .unwrap_or_default(),
                end: self.splits.get(index).cloned().unwrap_or_default(),
            })
            .collect()
    }
}

/// How evenly a set of rowkeys spreads over regions.
#[derive(Debug, Clone, PartialEq)]
pub struct HotspotReport {
    pub regions: Vec<Region>,
    /// Rowkeys per region, indexed like `regions`.
    pub counts: Vec<u64>,
    pub total: u64,
    pub max: u64,
    pub min: u64,
    pub mean: f64,
    /// Population standard deviation of `counts`.
    pub stddev: f64,
    /// `stddev / mean`: 0 is perfectly even; all rows in one of N regions gives `sqrt(N - 1)`.
    /// `None` when there are no rowkeys.
    pub cv: Option<f64>,
    /// `max / mean`: 1 is perfectly even; all rows in one of N regions gives N. `None` when
    /// there are no rowkeys.
    pub max_mean_ratio: Option<f64>,
}

impl HotspotReport {
    /// Routes every rowkey through `map` and computes the spread.
    pub fn compute<I, K>(map: &RegionMap, rowkeys: I) -> HotspotReport
    where
        I: IntoIterator<Item = K>,
        K: AsRef<[u8]>,
    {
        let mut counts = vec![0u64; map.region_count()];
        for rowkey in rowkeys {
            if let Some(count) = counts.get_mut(map.region_of(rowkey.as_ref())) {
                *count += 1;
            }
        }
        let total: u64 = counts.iter().sum();
        let max = counts.iter().copied().max().unwrap_or(0);
        let min = counts.iter().copied().min().unwrap_or(0);
        let n = counts.len() as f64;
        let mean = total as f64 / n;
        let variance = counts
            .iter()
            .map(|&count| (count as f64 - mean).powi(2))
            .sum::<f64>()
            / n;
        let stddev = variance.sqrt();
        let (cv, max_mean_ratio) = if total == 0 {
            (None, None)
        } else {
            (Some(stddev / mean), Some(max as f64 / mean))
        };
        HotspotReport {
            regions: map.regions(),
            counts,
            total,
            max,
            min,
            mean,
            stddev,
            cv,
            max_mean_ratio,
        }
    }

    /// A table of regions with a bar chart (`bar_width` cells for the fullest region, drawn with
    /// eighth-block characters) and a summary line, for a terminal.
    pub fn render(&self, bar_width: usize) -> String {
        const EIGHTHS: [char; 8] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];
        let key_text = |key: &[u8], empty: &str| {
            if key.is_empty() {
                return empty.to_owned();
            }
            let text = printable(key);
            if text.chars().count() > 20 {
                let head: String = text.chars().take(19).collect();
                format!("{head}…")
            } else {
                text
            }
        };
        let starts: Vec<String> = self
            .regions
            .iter()
            .map(|r| key_text(&r.start, "(start)"))
            .collect();
        let ends: Vec<String> = self
            .regions
            .iter()
            .map(|r| key_text(&r.end, "(end)"))
            .collect();
        let start_width = starts
            .iter()
            .map(|s| s.chars().count())
            .max()
            .unwrap_or(0)
            .max(9);
        let end_width = ends
            .iter()
            .map(|s| s.chars().count())
            .max()
            .unwrap_or(0)
            .max(7);
        let count_width = self.max.to_string().len().max(4);

        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:>6}  {:<start_width$}  {:<end_width$}  {:>count_width$}  {:>6}  distribution",
            "region", "start key", "end key", "rows", "share"
        );
        for (((region, count), start), end) in self
            .regions
            .iter()
            .zip(&self.counts)
            .zip(&starts)
            .zip(&ends)
        {
            let share = if self.total == 0 {
                0.0
            } else {
                *count as f64 * 100.0 / self.total as f64
            };
            let eighths = if self.max == 0 {
                0
            } else {
                ((*count as u128 * bar_width as u128 * 8 + self.max as u128 / 2) / self.max as u128)
                    as usize
            };
            let mut bar = "█".repeat(eighths / 8);
            if eighths % 8 > 0 {
                bar.push(EIGHTHS[eighths % 8]);
            }
            let _ = writeln!(
                out,
                "{:>6}  {start:<start_width$}  {end:<end_width$}  {count:>count_width$}  {share:>5.1}%  {bar}",
                region.index
            );
        }
        let ratio =
            |value: Option<f64>| value.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.3}"));
        let _ = writeln!(
            out,
            "regions {}  rows {}  mean {:.1}  stddev {:.1}  min {}  max {}  cv {}  max/mean {}",
            self.counts.len(),
            self.total,
            self.mean,
            self.stddev,
            self.min,
            self.max,
            ratio(self.cv),
            ratio(self.max_mean_ratio),
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{HashAlgo, RowkeyCodec, RowkeyPart};

    fn strings(splits: &[Vec<u8>]) -> Vec<String> {
        splits.iter().map(|s| printable(s)).collect()
    }

    #[test]
    fn hex_string_split_matches_hbase() {
        // `create 't', 'f', {NUMREGIONS => 15, SPLITALGO => 'HexStringSplit'}` (seed 000).
        let expected: Vec<String> = (1..15u32)
            .map(|i| format!("{:08x}", 0x1111_1111u32 * i))
            .collect();
        assert_eq!(strings(&hex_string_split(15).unwrap()), expected);
        assert_eq!(expected[0], "11111111");
        assert_eq!(expected[13], "eeeeeeee");
        assert_eq!(strings(&hex_string_split(2).unwrap()), ["80000000"]);
        assert_eq!(
            strings(&hex_string_split(4).unwrap()),
            ["40000000", "80000000", "c0000000"]
        );
        // 2^32 / 10 = 429496729.6 -> 429496729 = 0x19999999; the last region gets the slop.
        let ten = strings(&hex_string_split(10).unwrap());
        assert_eq!(ten[0], "19999999");
        assert_eq!(ten[1], "33333332");
        assert_eq!(ten[8], "e6666661");
    }

    #[test]
    fn decimal_string_split_matches_hbase() {
        assert_eq!(
            strings(&decimal_string_split(10).unwrap()),
            [
                "10000000", "20000000", "30000000", "40000000", "50000000", "60000000", "70000000",
                "80000000", "90000000"
            ]
        );
        assert_eq!(strings(&decimal_string_split(2).unwrap()), ["50000000"]);
        assert_eq!(
            strings(&decimal_string_split(3).unwrap()),
            ["33333333", "66666666"]
        );
        assert_eq!(
            strings(&decimal_string_split(4).unwrap()),
            ["25000000", "50000000", "75000000"]
        );
    }

    #[test]
    fn uniform_split_matches_hbase() {
        assert_eq!(
            strings(&uniform_split(2).unwrap()),
            ["\\x80\\x00\\x00\\x00\\x00\\x00\\x00\\x00"]
        );
        assert_eq!(
            uniform_split(4).unwrap(),
            vec![
                vec![0x40, 0, 0, 0, 0, 0, 0, 0],
                vec![0x80, 0, 0, 0, 0, 0, 0, 0],
                vec![0xC0, 0, 0, 0, 0, 0, 0, 0],
            ]
        );
        assert_eq!(
            uniform_split(3).unwrap(),
            vec![vec![0x55; 8], vec![0xAA; 8]]
        );
        // 2^64 / 15 = 0x1111111111111111 exactly.
        assert_eq!(uniform_split(15).unwrap()[0], vec![0x11; 8]);
    }

    #[test]
    fn region_counts_are_checked() {
        for regions in [0, 1, 10_001] {
            assert!(hex_string_split(regions).is_err());
            assert!(uniform_split(regions).is_err());
            assert!(decimal_string_split(regions).is_err());
        }
        assert_eq!(
            hex_string_split(1).unwrap_err().to_string(),
            "hex split needs 2..=10000 regions, got 1"
        );
    }

    #[test]
    fn splits_file_like_the_shell() {
        let text = "bbbb\r\naaaa\n\ncccc \n\\x00\\xFF\n";
        let splits = parse_splits_file(text).unwrap();
        assert_eq!(
            splits,
            vec![
                vec![0x00, 0xFF],
                b"aaaa".to_vec(),
                b"bbbb".to_vec(),
                b"cccc ".to_vec()
            ]
        );
        let err = parse_splits_file("a\nb\na\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "split key a appears more than once (line 1 and line 3)"
        );
        let err = parse_splits_file("a\n\\xzz\n").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("splits file line 2: escaped bytes"),
            "{err}"
        );
    }

    #[test]
    fn sampled_splits_take_quantiles() {
        let keys: Vec<Vec<u8>> = (0..100u32)
            .rev()
            .map(|i| format!("{i:03}").into_bytes())
            .collect();
        let splits = sampled_splits(keys, 4);
        assert_eq!(strings(&splits), ["025", "050", "075"]);
        let few = sampled_splits(vec![b"b".to_vec(), b"a".to_vec(), b"a".to_vec()], 10);
        assert_eq!(strings(&few), ["b"]);
        assert!(sampled_splits(Vec::new(), 10).is_empty());
    }

    #[test]
    fn region_map_routes_like_hbase() {
        let map = RegionMap::new(vec![b"b".to_vec(), b"d".to_vec()]).unwrap();
        assert_eq!(map.region_count(), 3);
        assert_eq!(map.region_of(b""), 0);
        assert_eq!(map.region_of(b"a"), 0);
        assert_eq!(map.region_of(b"b"), 1);
        assert_eq!(map.region_of(b"c"), 1);
        assert_eq!(map.region_of(b"d"), 2);
        assert_eq!(map.region_of(b"zzz"), 2);
        let regions = map.regions();
        assert_eq!(regions[0].start, b"");
        assert_eq!(regions[0].end, b"b");
        assert_eq!(regions[2].start, b"d");
        assert_eq!(regions[2].end, b"");
        let err = RegionMap::new(vec![b"b".to_vec(), b"a".to_vec()]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "split key 1 (a) is not greater than split key 0 (b); split keys must be strictly increasing"
        );
        assert!(matches!(
            RegionMap::new(vec![Vec::new()]),
            Err(SplitError::EmptySplitKey { index: 0 })
        ));
    }

    /// The seeds' point in numbers: sequential uids under a plain design all land in one region;
    /// `substr(md5(uid),0,6) + uid` spreads them evenly.
    #[test]
    fn hotspot_plain_vs_md5_prefix() {
        let uids: Vec<String> = (0..100_000).map(|i| format!("u{i:07}")).collect();
        let md5 = RowkeyCodec::new(
            "user",
            vec![
                RowkeyPart::HashPrefix {
                    algo: HashAlgo::Md5,
                    width: 6,
                    binary: false,
                    separator: String::new(),
                },
                RowkeyPart::Key { reverse: false },
            ],
        )
        .unwrap();
        let plain = RowkeyCodec::plain("user");
        for splits in [md5.codec_splits(10).unwrap(), hex_string_split(10).unwrap()] {
            let map = RegionMap::new(splits).unwrap();
            let hot = HotspotReport::compute(&map, uids.iter().map(|u| plain.encode(u).unwrap()));
            assert_eq!(hot.total, 100_000);
            assert_eq!(hot.max, 100_000);
            assert_eq!(hot.counts.iter().filter(|&&c| c > 0).count(), 1);
            assert!((hot.max_mean_ratio.unwrap() - 10.0).abs() < 1e-9);
            assert!((hot.cv.unwrap() - 3.0).abs() < 1e-9);

            let spread = HotspotReport::compute(&map, uids.iter().map(|u| md5.encode(u).unwrap()));
            assert!(spread.cv.unwrap() < 0.1, "cv {:?}", spread.cv);
            assert!(spread.max_mean_ratio.unwrap() < 1.1);
        }
    }

    #[test]
    fn render_draws_a_table_and_bars() {
        let map = RegionMap::new(vec![b"m".to_vec()]).unwrap();
        let report = HotspotReport::compute(&map, [b"a".as_slice(), b"b", b"c", b"z"]);
        let text = report.render(8);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(
            lines[1].contains("(start)") && lines[1].ends_with("████████"),
            "{text}"
        );
        assert!(
            lines[2].contains("(end)") && lines[2].contains(" 25.0%") && lines[2].ends_with("██▋"),
            "{text}"
        );
        assert!(
            lines[3].contains("cv 0.500") && lines[3].contains("max/mean 1.500"),
            "{text}"
        );
        let empty = HotspotReport::compute(&map, std::iter::empty::<&[u8]>());
        assert_eq!(empty.cv, None);
        assert!(empty.render(10).contains("cv n/a"));
    }
}
