//! Hot partitions. Once a second the broker compares what producers appended to each
//! partition it hosts: one that took at least a quarter of all of it, and at least
//! [`HOT_BYTES_PER_SECOND_MIN`], while others were appended to as well, is hot until the next
//! sample. A hot partition's appends run
//! in the bulk lane (`bulk_lane.rs`), at a lower priority, so that one flooded partition (a
//! flash-sale key) cannot starve the others' produce and fetch latency. The hot partitions of
//! the last sample are listed for `/metrics` and the console.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// How often the broker samples which partitions are hot.
pub const HOT_SAMPLE_INTERVAL: Duration = Duration::from_secs(1);
/// A partition appended less than this per second is never hot, whatever its share.
pub const HOT_BYTES_PER_SECOND_MIN: u64 = 1024 * 1024;
/// A partition is hot when it took at least 1/`HOT_SHARE_DIVISOR` of the broker's appends.
const HOT_SHARE_DIVISOR: u64 = 4;

/// What the sampler keeps of one partition.
#[derive(Debug, Default)]
pub struct AppendLoad {
    /// The partition's appended bytes (`bytes_in`) at the last sample.
    sampled: AtomicU64,
    /// The partition was hot at the last sample.
    hot: AtomicBool,
}

impl AppendLoad {
    /// The partition was hot at the last sample: its appends go to the bulk lane.
    pub fn is_hot(&self) -> bool {
        self.hot.load(Ordering::Relaxed)
    }
}

/// A partition found hot at the last sample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotPartition {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// What producers appended to it per second over the sample.
    pub bytes_per_second: u64,
}

/// One hosted partition, as a sample sees it.
pub struct Sampled<'a> {
    /// Topic name.
    pub topic: &'a str,
    /// Partition index.
    pub partition: i32,
    /// What the sampler keeps of it.
    pub load: &'a AppendLoad,
    /// Bytes producers appended to it so far (its `bytes_in` counter).
    pub bytes_in: u64,
}

/// The hot partitions of the last sample.
#[derive(Debug, Default)]
pub struct HotPartitions {
    last: Mutex<Vec<HotPartition>>,
}

impl HotPartitions {
    /// The partitions hot at the last sample, hottest first.
    pub fn list(&self) -> Vec<HotPartition> {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Takes what each of `partitions` appended since the last sample, `elapsed` ago, and
    /// marks each hot or not.
    pub fn sample<'a>(&self, partitions: impl IntoIterator<Item = Sampled<'a>>, elapsed: Duration) {
        let partitions: Vec<Sampled<'a>> = partitions.into_iter().collect();
        let appended: Vec<u64> = partitions
            .iter()
            .map(|p| {
                p.bytes_in
                    .saturating_sub(p.load.sampled.swap(p.bytes_in, Ordering::Relaxed))
            })
            .collect();
        let total: u64 = appended.iter().sum();
        let seconds = elapsed.as_secs_f64().max(0.001);
        let mut hot = Vec::new();
        for (partition, &bytes) in partitions.iter().zip(&appended) {
            let bytes_per_second = (bytes as f64 / seconds) as u64;
            let is_hot = is_hot(bytes, bytes_per_second, total);
            partition.load.hot.store(is_hot, Ordering::Relaxed);
            if is_hot {
                hot.push(HotPartition {
                    topic: partition.topic.to_string(),
                    partition: partition.partition,
                    bytes_per_second,
                });
            }
        }
        hot.sort_by_key(|h| std::cmp::Reverse(h.bytes_per_second));
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = hot;
    }
}

/// A partition that appended `bytes` (`bytes_per_second`) of the broker's `total` is hot,
/// unless it was the only one appended to: then it holds back nobody, and lowering it would
/// only hand its CPU to other processes.
fn is_hot(bytes: u64, bytes_per_second: u64, total: u64) -> bool {
    bytes_per_second >= HOT_BYTES_PER_SECOND_MIN
        && bytes.saturating_mul(HOT_SHARE_DIVISOR) >= total
        && bytes < total
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    #[test]
    fn a_partition_is_hot_with_a_quarter_of_the_appends_a_mebibyte_a_second_and_company() {
        assert!(is_hot(300 * MIB, 300 * MIB, 307 * MIB), "the flood");
        assert!(!is_hot(MIB, MIB, 307 * MIB), "a quiet one beside it");
        assert!(is_hot(25 * MIB, 25 * MIB, 100 * MIB), "a quarter");
        assert!(
            !is_hot(24 * MIB, 24 * MIB, 100 * MIB),
            "less than a quarter"
        );
        assert!(!is_hot(MIB / 2, MIB / 2, MIB), "too little to matter");
        assert!(
            !is_hot(300 * MIB, 300 * MIB, 300 * MIB),
            "alone: nobody to yield to"
        );
        assert!(!is_hot(0, 0, 0), "an idle broker");
        // Eight partitions sharing a broker's load evenly are none of them hot.
        assert!(!is_hot(40 * MIB, 40 * MIB, 320 * MIB));
    }

    #[test]
    fn a_sample_marks_the_flooded_partition_and_forgets_it_once_the_flood_stops() {
        let (flooded, quiet) = (AppendLoad::default(), AppendLoad::default());
        let hot = HotPartitions::default();
        let at = |flooded_bytes, quiet_bytes| {
            [
                Sampled {
                    topic: "sale",
                    partition: 0,
                    load: &flooded,
                    bytes_in: flooded_bytes,
                },
                Sampled {
                    topic: "sale",
                    partition: 1,
                    load: &quiet,
                    bytes_in: quiet_bytes,
                },
            ]
        };
        hot.sample(at(200 * MIB, MIB), Duration::from_secs(2));
        assert!(flooded.is_hot() && !quiet.is_hot());
        assert_eq!(
            hot.list(),
            vec![HotPartition {
                topic: "sale".into(),
                partition: 0,
                bytes_per_second: 100 * MIB
            }],
            "bytes per second over the time sampled"
        );
        // Counters are cumulative: only what was appended since counts.
        hot.sample(at(200 * MIB, 3 * MIB), Duration::from_secs(1));
        assert!(
            !flooded.is_hot() && !quiet.is_hot(),
            "the flood stopped, and the other one, written alone, holds back nobody"
        );
        assert!(hot.list().is_empty());
    }
}
