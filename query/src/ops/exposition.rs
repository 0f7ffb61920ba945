//! Reading Prometheus' text exposition: parsing it into samples, grouping and summing them, and
//! `histogram_quantile`. Pure functions of the text, so the dashboard's numbers are the ones a
//! Prometheus server would compute from the same scrape.

use std::collections::{BTreeMap, HashMap};

/// One sample of the Prometheus exposition: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses the Prometheus text exposition format (what `PrometheusHandle::render` writes).
/// Comment lines are skipped; a malformed line is skipped too rather than failing the whole
/// sample (the text is ours, but a dashboard must never take the service down).
pub fn parse_exposition(text: &str) -> Vec<Sample> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(['{', ' '])?;
    let name = &line[..name_end];
    let mut labels = Vec::new();
    let mut rest = &line[name_end..];
    if let Some(mut body) = rest.strip_prefix('{') {
        // `key="value"` pairs separated by commas; values escape backslash, quote and newline.
        loop {
            body = body.trim_start_matches([',', ' ']);
            if let Some(after) = body.strip_prefix('}') {
                rest = after;
                break;
            }
            let eq = body.find('=')?;
            let key = body[..eq].trim().to_string();
            let quoted = body[eq + 1..].strip_prefix('"')?;
            let mut value = String::new();
            let mut end = None;
            let mut chars = quoted.char_indices();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        other => value.push(other),
                    },
                    '"' => {
                        end = Some(i);
                        break;
                    }
                    other => value.push(other),
                }
            }
            body = &quoted[end? + 1..];
            labels.push((key, value));
        }
    }
    let value = parse_value(rest.split_whitespace().next()?)?;
    Some(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

fn parse_value(text: &str) -> Option<f64> {
    match text {
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        other => other.parse().ok(),
    }
}

/// The samples of one scrape, looked up by metric name.
#[derive(Debug, Default)]
pub(super) struct Snapshot {
    by_name: HashMap<String, Vec<Sample>>,
}

impl Snapshot {
    pub(super) fn new(samples: Vec<Sample>) -> Self {
        let mut by_name: HashMap<String, Vec<Sample>> = HashMap::new();
        for sample in samples {
            by_name.entry(sample.name.clone()).or_default().push(sample);
        }
        Self { by_name }
    }

    pub(super) fn samples(&self, name: &str) -> &[Sample] {
        self.by_name.get(name).map_or(&[], Vec::as_slice)
    }

    /// Sums a metric's samples per group (see [`group_key`]), keeping only those `keep`
    /// accepts.
    pub(super) fn sum_by(
        &self,
        name: &str,
        label: &str,
        keep: impl Fn(&Sample) -> bool,
    ) -> BTreeMap<String, f64> {
        let mut sums = BTreeMap::new();
        for sample in self.samples(name).iter().filter(|s| keep(s)) {
            *sums.entry(group_key(sample, label)).or_insert(0.0) += sample.value;
        }
        sums
    }

    /// A histogram's cumulative bucket counts by `le`, summed over the samples `keep` accepts,
    /// grouped by `label` ("" for one group).
    pub(super) fn buckets_by(
        &self,
        name: &str,
        label: &str,
        keep: impl Fn(&Sample) -> bool,
    ) -> BTreeMap<String, Vec<(f64, f64)>> {
        let mut groups: BTreeMap<String, BTreeMap<u64, (f64, f64)>> = BTreeMap::new();
        for sample in self
            .samples(&format!("{name}_bucket"))
            .iter()
            .filter(|s| keep(s))
        {
            let Some(le) = sample.label("le").and_then(parse_value) else {
                continue;
            };
            let group = group_key(sample, label);
            // Keyed by the bound's bits: bounds are positive, so bit order is numeric order.
            let entry = groups
                .entry(group)
                .or_default()
                .entry(le.to_bits())
                .or_insert((le, 0.0));
            entry.1 += sample.value;
        }
        groups
            .into_iter()
            .map(|(group, buckets)| (group, buckets.into_values().collect()))
            .collect()
    }
}

/// The group a sample belongs to: "" for `labels = ""` (one group), else the values of the
/// comma-separated `labels`, joined with `/` (`"store,op"` → `embedded/get_rows`).
fn group_key(sample: &Sample, labels: &str) -> String {
    if labels.is_empty() {
        return String::new();
    }
    labels
        .split(',')
        .map(|label| sample.label(label).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("/")
}

/// Prometheus' `histogram_quantile` over cumulative `(le, count)` buckets sorted by `le`:
/// linear interpolation inside the bucket holding the rank; the `+Inf` bucket answers with the
/// highest finite bound. `None` without observations.
pub fn histogram_quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    let total = buckets.last().map(|&(_, count)| count)?;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut lower = 0.0;
    let mut below = 0.0;
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return Some(lower);
            }
            let in_bucket = count - below;
            if in_bucket <= 0.0 {
                return Some(le);
            }
            return Some(lower + (le - lower) * (rank - below) / in_bucket);
        }
        lower = le;
        below = count;
    }
    Some(lower)
}

/// `now - then` per bucket (a bucket missing from `then` counted from 0).
pub(super) fn bucket_delta(now: &[(f64, f64)], then: Option<&Vec<(f64, f64)>>) -> Vec<(f64, f64)> {
    now.iter()
        .map(|&(le, count)| {
            let before = then
                .and_then(|b| b.iter().find(|(l, _)| *l == le))
                .map_or(0.0, |&(_, c)| c);
            (le, (count - before).max(0.0))
        })
        .collect()
}
