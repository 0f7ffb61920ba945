//! The region report the dashboard shows per table: the table's live rowkeys (all, or an even
//! sample) over its regions, built on a blocking thread from the committed index.

use hbidx_indexer::LiveRowkeys;
use hbidx_schema::codec::printable;
use hbidx_schema::config::{SplitConfig, TableConfig};
use hbidx_schema::split::{HotspotReport, RegionMap, hex_string_split};
use serde::Serialize;

use crate::TableRuntime;

use super::HOTSPOT_SAMPLE;

/// Regions assumed for a table without `[tables.splits]`, as `hbidx hotspot` does.
const DEFAULT_REGIONS: u32 = 10;

/// A table's rowkeys over its regions, as the page draws it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct HotspotView {
    /// Where the regions come from (`codec, 10 regions`, `configured hex`, …).
    pub splits: String,
    pub regions: Vec<RegionView>,
    /// Live rows of the table.
    pub total: u64,
    /// Rowkeys the report was computed from: `total`, or a sample of [`HOTSPOT_SAMPLE`] when the
    /// table is bigger (then each region's `rows` is an estimate).
    pub sampled: u64,
    pub cv: Option<f64>,
    pub max_mean_ratio: Option<f64>,
    pub computed_ms: u64,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct RegionView {
    /// HBase's printable form of the region's start key ("" = the start of the table).
    pub start: String,
    pub end: String,
    pub rows: u64,
}

/// The regions of a table: its `[tables.splits]`, or, like `hbidx hotspot`, the design's
/// codec buckets (HexStringSplit without a hash prefix) over 10 regions. Reads a splits file:
/// call it from a blocking thread.
fn region_map(table: &TableConfig, rowkeys: &[Vec<u8>]) -> Result<(RegionMap, String), String> {
    let keys = match &table.splits {
        Some(SplitConfig::File { path }) => {
            let text = std::fs::read_to_string(path)
                .map_err(|err| format!("cannot read the splits file {path}: {err}"))?;
            table.split_keys(Some(&text), None)
        }
        // Sampled splits are quantiles of a sample; the live rowkeys are the best sample.
        Some(SplitConfig::Sampled { .. }) => table.split_keys(None, Some(rowkeys.to_vec())),
        Some(_) => table.split_keys(None, None),
        None => Ok(match table.rowkey.codec_splits(DEFAULT_REGIONS) {
            Some(keys) => keys,
            None => hex_string_split(DEFAULT_REGIONS).map_err(|err| err.to_string())?,
        }),
    }
    .map_err(|err| err.to_string())?;
    let described = match &table.splits {
        Some(splits) => format!("configured {}", splits.algo()),
        None if table.rowkey.codec_splits(DEFAULT_REGIONS).is_some() => {
            "codec buckets (no [tables.splits])".to_string()
        }
        None => "HexStringSplit (no [tables.splits])".to_string(),
    };
    let map = RegionMap::new(keys).map_err(|err| err.to_string())?;
    let described = format!("{described}, {} regions", map.region_count());
    Ok((map, described))
}

/// Builds a table's region report from the live rowkeys of its committed index. Blocking.
pub(super) fn compute_hotspot(runtime: &TableRuntime) -> Result<HotspotView, String> {
    let sample = runtime
        .searcher
        .live_rowkeys_sample(HOTSPOT_SAMPLE)
        .map_err(|err| err.to_string())?;
    let (map, splits) = region_map(&runtime.config, &sample.rowkeys)?;
    Ok(hotspot_view(&map, splits, &sample))
}

/// The report over `sample`'s rowkeys, with each region's count scaled to the live rows (cv
/// and max/mean don't depend on the scale).
fn hotspot_view(map: &RegionMap, splits: String, sample: &LiveRowkeys) -> HotspotView {
    let report = HotspotReport::compute(map, sample.rowkeys.iter());
    let scale = sample.live as f64 / report.total.max(1) as f64;
    let regions = report
        .regions
        .iter()
        .zip(&report.counts)
        .map(|(region, rows)| RegionView {
            start: printable(&region.start),
            end: printable(&region.end),
            rows: (*rows as f64 * scale).round() as u64,
        })
        .collect();
    HotspotView {
        splits,
        regions,
        total: sample.live,
        sampled: report.total,
        cv: report.cv,
        max_mean_ratio: report.max_mean_ratio,
        computed_ms: hbidx_store::now_ms().unsigned_abs(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sampled_region_report_scales_its_counts_to_the_live_rows() {
        let map = RegionMap::new(vec![b"m".to_vec()]).unwrap();
        let rowkeys: Vec<Vec<u8>> = vec![b"a".to_vec(), b"b".to_vec(), b"n".to_vec()];
        // All rows read: the counts are the counts.
        let exact = LiveRowkeys {
            rowkeys: rowkeys.clone(),
            live: 3,
        };
        let view = hotspot_view(&map, "test".into(), &exact);
        let rows: Vec<u64> = view.regions.iter().map(|r| r.rows).collect();
        assert_eq!((rows, view.total, view.sampled), (vec![2, 1], 3, 3));
        // Three rows sampled out of 300: each stands for 100.
        let sampled = LiveRowkeys { rowkeys, live: 300 };
        let view = hotspot_view(&map, "test".into(), &sampled);
        let rows: Vec<u64> = view.regions.iter().map(|r| r.rows).collect();
        assert_eq!((rows, view.total, view.sampled), (vec![200, 100], 300, 3));
        // The spread measures are the sample's.
        assert_eq!(view.max_mean_ratio, Some(2.0 / 1.5));
    }
    #[test]
    fn default_regions_follow_the_rowkey_design() {
        let config =
            hbidx_schema::config::parse_config(include_str!("../../../deploy/config/hbidx.toml"))
                .unwrap();
        let table = &config.tables[0];
        let (map, described) = region_map(table, &[]).unwrap();
        assert!(map.region_count() > 1, "{described}");
        assert!(described.contains("regions"), "{described}");
    }
}
