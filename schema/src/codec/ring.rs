//! The consistent-hash ring behind the `ring` prefix. It is public in its own right (a key's
//! region without a design), and its balance and stability are properties of the ring alone.

use std::fmt;

use xxhash_rust::xxh3::xxh3_64;

use super::{CodecError, MAX_RING_POINTS, MAX_RING_REGIONS, MAX_RING_VNODES};

/// A consistent-hash ring (seed 000's answer to "adding a region must not move every key").
///
/// Each region owns `vnodes` points at `xxh3_64("<region>#<vnode>")`; a key belongs to the first
/// point clockwise from `xxh3_64(key)`. Points of existing regions never depend on the region
/// count, so growing from N to N+1 regions only moves the keys the new region's points capture,
/// about 1/(N+1) of them.
#[derive(Clone, PartialEq, Eq)]
pub struct HashRing {
    regions: u32,
    vnodes: u32,
    /// Sorted by (point, region) so ties resolve the same way on every build.
    points: Vec<(u64, u32)>,
}

impl fmt::Debug for HashRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The point list is thousands of entries; it says nothing a reader needs.
        f.debug_struct("HashRing")
            .field("regions", &self.regions)
            .field("vnodes", &self.vnodes)
            .finish_non_exhaustive()
    }
}

impl HashRing {
    /// Builds a ring of `regions` regions (numbered `0..regions`) with `vnodes` points each.
    pub fn new(regions: u32, vnodes: u32) -> Result<HashRing, CodecError> {
        let invalid = |reason| CodecError::InvalidRing {
            regions,
            vnodes,
            reason,
        };
        if regions == 0 || regions > MAX_RING_REGIONS {
            return Err(invalid("regions must be in 1..=10000"));
        }
        if vnodes == 0 || vnodes > MAX_RING_VNODES {
            return Err(invalid("vnodes must be in 1..=1000"));
        }
        if u64::from(regions) * u64::from(vnodes) > MAX_RING_POINTS {
            return Err(invalid("regions x vnodes must be at most 1000000"));
        }
        let mut points = Vec::with_capacity(regions as usize * vnodes as usize);
        for region in 0..regions {
            for vnode in 0..vnodes {
                let label = format!("{region}#{vnode}");
                points.push((xxh3_64(label.as_bytes()), region));
            }
        }
        points.sort_unstable();
        Ok(HashRing {
            regions,
            vnodes,
            points,
        })
    }

    /// The same ring with a different region count; existing regions keep their points.
    pub fn with_regions(&self, regions: u32) -> Result<HashRing, CodecError> {
        HashRing::new(regions, self.vnodes)
    }

    /// Number of regions.
    pub fn regions(&self) -> u32 {
        self.regions
    }

    /// Virtual nodes per region.
    pub fn vnodes(&self) -> u32 {
        self.vnodes
    }

    /// The region (`0..regions`) that owns `key`.
    pub fn region_of(&self, key: impl AsRef<[u8]>) -> u32 {
        let hash = xxh3_64(key.as_ref());
        let index = self.points.partition_point(|&(point, _)| point < hash);
        // Past the last point the ring wraps to the first one. `new` never builds an empty
        // ring, but a lookup must not panic even so.
        self.points
            .get(index)
            .or_else(|| self.points.first())
            .map_or(0, |&(_, region)| region)
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_parameters_are_bounded() {
        assert!(HashRing::new(0, 160).is_err());
        assert!(HashRing::new(10, 0).is_err());
        assert!(HashRing::new(10_001, 1).is_err());
        let err = HashRing::new(10_000, 1_000).unwrap_err();
        assert_eq!(
            err.to_string(),
            "hash ring with 10000 regions and 1000 vnodes: regions x vnodes must be at most 1000000"
        );
        let ring = HashRing::new(1, 4).unwrap();
        assert_eq!(ring.region_of("anything"), 0);
    }

    #[test]
    fn ring_spreads_keys_and_adding_a_region_moves_few() {
        let ring = HashRing::new(10, 160).unwrap();
        let grown = ring.with_regions(11).unwrap();
        let mut counts = [0u32; 10];
        let mut moved = 0;
        let total = 20_000;
        for i in 0..total {
            let key = format!("u{i:07}");
            let before = ring.region_of(&key);
            counts[before as usize] += 1;
            let after = grown.region_of(&key);
            if before != after {
                // Keys only ever move to the new region.
                assert_eq!(after, 10);
                moved += 1;
            }
        }
        let share = f64::from(moved) / f64::from(total);
        assert!((share - 1.0 / 11.0).abs() < 0.03, "moved {share}");
        for count in counts {
            assert!((1_500..=2_500).contains(&count), "{counts:?}");
        }
    }
}
