//! `controller_mutation_rate` (KIP-599) as Kafka's active controller enforces it: the
//! partitions a client creates or deletes are taken from a token bucket that refills at its
//! quota (partitions a second) up to a burst of the quota's whole window (11 one-second
//! samples), one bucket per whose usage the quota counts. A strict change (CreateTopics v6+,
//! DeleteTopics v5+, CreatePartitions v3+) is refused while the bucket is below zero, with the
//! time it takes to refill to zero; an older client's change is made and only throttled. The
//! buckets live in the controller leading the quorum, as Kafka's do; a new leader starts them
//! full.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use weir_metadata::requests::MutationQuota;
use weir_metadata::ControllerError;

/// Seconds of quota a full bucket holds: Kafka's `quota.window.num` (11) samples of
/// `quota.window.size.seconds` (1).
const BURST_SECONDS: f64 = 11.0;
/// Buckets kept at once; beyond, full ones are forgotten (a new bucket starts full), and if
/// none are, new clients share one.
const BUCKETS_MAX: usize = 100_000;
/// The longest throttle answered (what `throttle_time_ms` holds).
const THROTTLE_MS_MAX: u64 = i32::MAX as u64;

/// Whose usage a bucket counts: the user and the client id, where the quota names them.
type BucketKey = (Option<String>, Option<String>);

/// Partitions a client may still create or delete at once.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    rate: f64,
    updated: Instant,
}

impl Bucket {
    /// The bucket refilled at its rate up to the burst, as of `now`.
    fn refill(&mut self, now: Instant, rate: f64) {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.tokens = (self.tokens + rate * elapsed).min(rate * BURST_SECONDS);
        self.rate = rate;
        self.updated = now;
    }

    /// Full again by `now`: forgetting it changes nothing.
    fn is_full(&self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.tokens + self.rate * elapsed >= self.rate * BURST_SECONDS
    }

    /// Milliseconds until the tokens are back to zero (zero when they are not below it).
    fn throttle_ms(&self) -> u64 {
        if self.tokens >= 0.0 {
            return 0;
        }
        if self.rate <= 0.0 {
            return THROTTLE_MS_MAX;
        }
        // A float to integer cast saturates.
        ((-self.tokens / self.rate * 1000.0).round() as u64).min(THROTTLE_MS_MAX)
    }
}

/// The token buckets of the clients held to a `controller_mutation_rate`.
#[derive(Debug, Default)]
pub(crate) struct MutationQuotas {
    buckets: Mutex<HashMap<BucketKey, Bucket>>,
}

impl MutationQuotas {
    /// Takes `partitions` from the bucket `quota` names: answered with the milliseconds the
    /// client is to pause, or, for a strict quota whose bucket is below zero,
    /// THROTTLING_QUOTA_EXCEEDED with that pause (nothing taken).
    pub(crate) fn take(
        &self,
        quota: &MutationQuota,
        partitions: i32,
    ) -> Result<u64, ControllerError> {
        self.take_at(Instant::now(), quota, partitions)
    }

    fn take_at(
        &self,
        now: Instant,
        quota: &MutationQuota,
        partitions: i32,
    ) -> Result<u64, ControllerError> {
        let rate = if quota.rate.is_finite() {
            quota.rate.max(0.0)
        } else {
            f64::MAX
        };
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let mut key = (quota.user.clone(), quota.client_id.clone());
        if !buckets.contains_key(&key) && buckets.len() >= BUCKETS_MAX {
            buckets.retain(|_, bucket| !bucket.is_full(now));
            if buckets.len() >= BUCKETS_MAX {
                key = (None, None);
            }
        }
        let bucket = buckets.entry(key).or_insert(Bucket {
            tokens: rate * BURST_SECONDS,
            rate,
            updated: now,
        });
        bucket.refill(now, rate);
        if quota.strict && bucket.tokens < 0.0 {
            return Err(ControllerError::ThrottlingQuotaExceeded(
                bucket.throttle_ms(),
            ));
        }
        bucket.tokens -= f64::from(partitions.max(0));
        Ok(bucket.throttle_ms())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn quota(rate: f64, strict: bool) -> MutationQuota {
        MutationQuota {
            user: None,
            client_id: Some("admin".into()),
            rate,
            strict,
        }
    }

    fn refused_for(outcome: Result<u64, ControllerError>) -> u64 {
        match outcome {
            Err(ControllerError::ThrottlingQuotaExceeded(ms)) => ms,
            other => panic!("expected THROTTLING_QUOTA_EXCEEDED, got {other:?}"),
        }
    }

    #[test]
    fn a_strict_quota_lets_a_burst_through_then_refuses_until_the_bucket_refills() {
        let quotas = MutationQuotas::default();
        let start = Instant::now();
        let strict = quota(2.0, true);
        // A full bucket holds 22 partitions; a change may take it below zero once.
        assert_eq!(quotas.take_at(start, &strict, 20).expect("taken"), 0);
        assert_eq!(
            quotas.take_at(start, &strict, 5).expect("taken"),
            1_500,
            "3 below zero at 2/s"
        );
        assert_eq!(refused_for(quotas.take_at(start, &strict, 1)), 1_500);
        let later = start + Duration::from_millis(1_000);
        assert_eq!(
            refused_for(quotas.take_at(later, &strict, 1)),
            500,
            "nothing was taken"
        );
        let refilled = start + Duration::from_millis(1_500);
        assert_eq!(quotas.take_at(refilled, &strict, 1).expect("taken"), 500);
    }

    #[test]
    fn a_permissive_quota_makes_every_change_and_throttles_for_the_debt() {
        let quotas = MutationQuotas::default();
        let start = Instant::now();
        let permissive = quota(1.0, false);
        assert_eq!(quotas.take_at(start, &permissive, 11).expect("taken"), 0);
        assert_eq!(quotas.take_at(start, &permissive, 4).expect("taken"), 4_000);
        assert_eq!(quotas.take_at(start, &permissive, 4).expect("taken"), 8_000);
    }

    #[test]
    fn buckets_are_per_client_and_refill_no_further_than_the_burst() {
        let quotas = MutationQuotas::default();
        let start = Instant::now();
        let strict = quota(1.0, true);
        let other = MutationQuota {
            client_id: Some("other".into()),
            ..strict.clone()
        };
        assert_eq!(quotas.take_at(start, &strict, 12).expect("taken"), 1_000);
        assert_eq!(
            quotas.take_at(start, &other, 11).expect("taken"),
            0,
            "a bucket of its own"
        );
        let much_later = start + Duration::from_secs(3_600);
        assert_eq!(quotas.take_at(much_later, &strict, 11).expect("taken"), 0);
        assert_eq!(
            quotas.take_at(much_later, &strict, 1).expect("taken"),
            1_000,
            "11 at most"
        );
    }

    #[test]
    fn a_zero_quota_allows_nothing_after_the_first_change() {
        let quotas = MutationQuotas::default();
        let start = Instant::now();
        assert_eq!(
            quotas.take_at(start, &quota(0.0, true), 1).expect("taken"),
            THROTTLE_MS_MAX
        );
        assert_eq!(
            refused_for(quotas.take_at(start, &quota(0.0, true), 1)),
            THROTTLE_MS_MAX
        );
    }
}
