//! Client quotas: the bytes each client appends (`producer_byte_rate`) or is sent
//! (`consumer_byte_rate`), and the time its requests take (`request_percentage`, see
//! `request_quota.rs`), are measured against the quota that applies to it (its user's and
//! client id's, in Kafka's order of precedence, from the metadata image), over Kafka's window
//! of 11 one-second samples. A client above its rate is throttled as Kafka throttles it since
//! KIP-219: its response carries `throttle_time_ms` at once, and its connection is read no
//! further until that time has passed ([`Mute`]), so the client slows down whether or not it
//! honours the field. A client address above its `connection_creation_rate` has its new
//! connections held for the pause and closed unserved ([`ConnectionRates`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;
use weir_metadata::quota::{QuotaKey, QuotaTable};
use weir_metadata::requests::MutationQuota;

/// Samples in a rate's window (Kafka's `quota.window.num`).
const SAMPLES: usize = 11;
/// Length of one sample (Kafka's `quota.window.size.seconds`).
const SAMPLE: Duration = Duration::from_secs(1);
/// Longest a client is throttled for at once by a byte rate (and longest its connection is
/// muted for any quota): the whole window.
pub(crate) const THROTTLE_MAX: Duration = Duration::from_secs(SAMPLES as u64);
/// Longest a client is throttled for at once by its request time (Kafka bounds it to one
/// sample).
const REQUEST_THROTTLE_MAX: Duration = SAMPLE;
/// Clients measured at once; beyond, clients idle for a window are forgotten, and if none
/// are, new ones share one measure.
const CLIENTS_MAX: usize = 100_000;

/// Whose usage one measure counts: the user and the client id, where the quota names them.
type ClientKey = (Option<String>, Option<String>);

/// An amount (bytes, or percent-seconds of request time) over Kafka's window of samples.
#[derive(Debug, Clone)]
struct Rate {
    /// Start of each sample, and the bytes recorded in it; `samples[current]` is the newest.
    samples: [(Instant, f64); SAMPLES],
    current: usize,
}

impl Rate {
    fn new(now: Instant) -> Rate {
        Rate {
            samples: [(now, 0.0); SAMPLES],
            current: 0,
        }
    }

    /// Adds `amount` at `now`, starting a new sample (dropping the oldest) when the current
    /// one is over.
    fn record(&mut self, now: Instant, amount: f64) {
        if now.duration_since(self.samples[self.current].0) >= SAMPLE {
            self.current = (self.current + 1) % SAMPLES;
            self.samples[self.current] = (now, 0.0);
        }
        self.samples[self.current].1 += amount;
    }

    /// The amount per second over the samples still in the window, measured over at least all
    /// but one sample's length (as Kafka measures, so a new client is not throttled for its
    /// first burst), and that length.
    fn per_second(&self, now: Instant) -> (f64, Duration) {
        let window = SAMPLE * SAMPLES as u32;
        let live = self
            .samples
            .iter()
            .filter(|(start, _)| now.duration_since(*start) < window);
        let (oldest, total) = live.fold((now, 0.0), |(oldest, total), (start, bytes)| {
            (oldest.min(*start), total + bytes)
        });
        let elapsed = now
            .duration_since(oldest)
            .max(SAMPLE * (SAMPLES as u32 - 1));
        (total / elapsed.as_secs_f64(), elapsed)
    }

    /// When the rate was last recorded.
    fn last_used(&self) -> Instant {
        self.samples[self.current].0
    }
}

/// How long a client at `rate` over `elapsed` must pause so that its rate comes back to
/// `limit`, as Kafka computes it, at most `max`.
fn throttle_time(rate: f64, limit: f64, elapsed: Duration, max: Duration) -> Duration {
    if rate <= limit {
        return Duration::ZERO;
    }
    if limit <= 0.0 {
        return max;
    }
    elapsed
        .mul_f64(((rate - limit) / limit).min(max.as_secs_f64()))
        .min(max)
}

/// One quota's measures: one per client (or user) the quota applies to.
pub struct ClientRates {
    key: QuotaKey,
    throttle_max: Duration,
    rates: RateTable<ClientKey>,
}

impl ClientRates {
    /// Measures against the quotas of `key`: bytes for `producer_byte_rate` and
    /// `consumer_byte_rate`, percent-seconds of request time for `request_percentage`.
    pub fn new(key: QuotaKey) -> ClientRates {
        let throttle_max = match key {
            QuotaKey::RequestPercentage => REQUEST_THROTTLE_MAX,
            _ => THROTTLE_MAX,
        };
        ClientRates {
            key,
            throttle_max,
            rates: RateTable::new(),
        }
    }

    /// Records `amount` for `client_id` of `principal` (`User:name`; Kafka's user is the
    /// name, `ANONYMOUS` for a client that did not log in) under `quotas`; answered with how
    /// long the client must now pause (zero within its quota, or without one).
    pub fn record(&self, quotas: &QuotaTable, who: (&str, &str), amount: f64) -> Duration {
        self.record_at(Instant::now(), quotas, who, amount)
    }

    /// Takes back `amount` recorded for the client (Kafka's un-recording of a fetch it
    /// answers empty).
    pub fn refund(&self, quotas: &QuotaTable, who: (&str, &str), amount: f64) {
        self.record_at(Instant::now(), quotas, who, -amount);
    }

    /// The most bytes one response may carry without its client being throttled for them
    /// alone, even after a window without any (Kafka's `getMaxValueInQuotaWindow`: the quota
    /// over all but one of the window's samples); `None` without a quota.
    pub fn window_bytes(
        &self,
        quotas: &QuotaTable,
        (principal, client_id): (&str, &str),
    ) -> Option<u64> {
        let quota = quotas.quota_for(self.key, user(principal), client_id)?;
        let bytes = quota.limit * (SAMPLE * (SAMPLES as u32 - 1)).as_secs_f64();
        // A float to integer cast saturates: a huge quota is no bound.
        Some(bytes as u64)
    }

    /// True when a quota of this key applies to the client.
    pub fn applies(&self, quotas: &QuotaTable, (principal, client_id): (&str, &str)) -> bool {
        quotas
            .quota_for(self.key, user(principal), client_id)
            .is_some()
    }

    /// [`ClientRates::record`] at `now`.
    fn record_at(
        &self,
        now: Instant,
        quotas: &QuotaTable,
        (principal, client_id): (&str, &str),
        amount: f64,
    ) -> Duration {
        let Some(quota) = quotas.quota_for(self.key, user(principal), client_id) else {
            return Duration::ZERO;
        };
        let keys = ((quota.user, quota.client_id), (None, None));
        let bound = (quota.limit, self.throttle_max);
        self.rates.record(now, keys, amount, bound, false)
    }
}

/// Rates by whose usage each counts: at most [`CLIENTS_MAX`], beyond which those idle for a
/// window are forgotten, and if none are, new ones share one rate.
struct RateTable<K> {
    rates: Mutex<HashMap<K, Rate>>,
}

impl<K: Eq + std::hash::Hash> RateTable<K> {
    fn new() -> RateTable<K> {
        RateTable {
            rates: Mutex::new(HashMap::new()),
        }
    }

    /// Records `amount` at `now` for `key` (`shared` once the table is full); answered with
    /// how long it must pause to come back to `limit`, at most `max`. With `refused_uncounted`,
    /// an amount that calls for a pause is taken back at once, from the same rate.
    fn record(
        &self,
        now: Instant,
        (mut key, shared): (K, K),
        amount: f64,
        (limit, max): (f64, Duration),
        refused_uncounted: bool,
    ) -> Duration {
        let mut rates = self.rates.lock().unwrap_or_else(|e| e.into_inner());
        if !rates.contains_key(&key) && rates.len() >= CLIENTS_MAX {
            rates.retain(|_, rate| now.duration_since(rate.last_used()) < THROTTLE_MAX);
            if rates.len() >= CLIENTS_MAX {
                key = shared;
            }
        }
        let rate = rates.entry(key).or_insert_with(|| Rate::new(now));
        rate.record(now, amount);
        let (per_second, elapsed) = rate.per_second(now);
        let pause = throttle_time(per_second, limit, elapsed, max);
        if refused_uncounted && !pause.is_zero() {
            rate.record(now, -amount);
        }
        pause
    }
}

/// The connections each client address opens, against its `connection_creation_rate` (its
/// own, else the IP default's), as Kafka's connection quotas measure them.
pub struct ConnectionRates {
    rates: RateTable<IpAddr>,
}

impl Default for ConnectionRates {
    fn default() -> ConnectionRates {
        ConnectionRates {
            rates: RateTable::new(),
        }
    }
}

impl ConnectionRates {
    /// Counts a connection from `ip` under `quotas`; answered with zero if it is within the
    /// address's rate (or the address has none), else with how long to hold the connection
    /// before closing it unserved (at most a second, Kafka's bound). A refused connection is
    /// not counted, as Kafka un-records it.
    pub fn admit(&self, quotas: &QuotaTable, ip: IpAddr) -> Duration {
        self.admit_at(Instant::now(), quotas, ip)
    }

    fn admit_at(&self, now: Instant, quotas: &QuotaTable, ip: IpAddr) -> Duration {
        let Some(limit) = quotas.ip_connection_rate(ip) else {
            return Duration::ZERO;
        };
        let keys = (ip.to_canonical(), IpAddr::from([0, 0, 0, 0]));
        self.rates.record(now, keys, 1.0, (limit, SAMPLE), true)
    }
}

/// The `controller_mutation_rate` that holds the client `who` (principal and client id) under
/// `quotas`, as the controller is to apply it: `strict` for the request versions Kafka
/// refuses changes at once the quota is used up.
pub fn mutation_quota(
    quotas: &QuotaTable,
    (principal, client_id): (&str, &str),
    strict: bool,
) -> Option<MutationQuota> {
    let quota = quotas.quota_for(QuotaKey::ControllerMutationRate, user(principal), client_id)?;
    Some(MutationQuota {
        user: quota.user,
        client_id: quota.client_id,
        rate: quota.limit,
        strict,
    })
}

/// Kafka's user of a principal: its name (`User:alice` is `alice`).
fn user(principal: &str) -> &str {
    principal.strip_prefix("User:").unwrap_or(principal)
}

/// Until when a connection is not read, after a response that throttled its client.
#[derive(Debug, Default)]
pub struct Mute {
    until: Mutex<Option<Instant>>,
    /// Whether `until` is set: read without the lock, so an unthrottled connection (nearly
    /// every one) pays one atomic load per request.
    muted: AtomicBool,
}

impl Mute {
    /// Reads nothing more from the connection for `pause` (extending a mute under way).
    pub fn extend(&self, pause: Duration) {
        if pause.is_zero() {
            return;
        }
        let until = Instant::now() + pause;
        let mut current = self.until.lock().unwrap_or_else(|e| e.into_inner());
        *current = Some(current.map_or(until, |c| c.max(until)));
        self.muted.store(true, Ordering::Release);
    }

    /// True while a mute may be under way (then [`Mute::passed`] waits it out).
    pub fn is_muted(&self) -> bool {
        self.muted.load(Ordering::Acquire)
    }

    /// Waits until the connection may be read again.
    pub async fn passed(&self) {
        loop {
            let until = {
                let mut until = self.until.lock().unwrap_or_else(|e| e.into_inner());
                if until.is_some_and(|until| until <= Instant::now()) {
                    *until = None;
                    self.muted.store(false, Ordering::Release);
                }
                *until
            };
            match until {
                Some(until) => tokio::time::sleep_until(until).await,
                None => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use weir_metadata::quota::{check_quota, QuotaAlteration, QuotaEntity};

    use super::*;

    fn quota(components: &[(&str, Option<&str>)], limit: f64) -> QuotaTable {
        quota_of("producer_byte_rate", components, limit)
    }

    fn quota_of(name: &str, components: &[(&str, Option<&str>)], limit: f64) -> QuotaTable {
        let entity = QuotaEntity::new(components.iter().copied()).expect("entity");
        let (key, value) = check_quota(&entity, name, limit).expect("value");
        let mut table = QuotaTable::default();
        table.apply(&QuotaAlteration {
            entity,
            set: BTreeMap::from([(key, value)]),
            remove: Vec::new(),
        });
        table
    }

    #[test]
    fn an_address_above_its_connection_rate_is_refused_and_not_counted() {
        let table = quota_of("connection_creation_rate", &[("ip", Some("10.0.0.1"))], 2.0);
        let connections = ConnectionRates::default();
        let now = Instant::now();
        let (ip, other) = (
            "10.0.0.1".parse().expect("ip"),
            "10.0.0.2".parse().expect("ip"),
        );
        // A new address may open the window's worth (all but one of its samples) at once.
        for _ in 0..20 {
            assert_eq!(connections.admit_at(now, &table, ip), Duration::ZERO);
        }
        let pause = connections.admit_at(now, &table, ip);
        assert!(
            pause > Duration::ZERO && pause <= SAMPLE,
            "held for at most a second: {pause:?}"
        );
        assert_eq!(
            connections.admit_at(now, &table, ip),
            pause,
            "the refused one was not counted"
        );
        assert_eq!(connections.admit_at(now, &table, other), Duration::ZERO);
        // Eleven seconds on, the window has room again.
        let later = now + Duration::from_secs(11);
        assert_eq!(connections.admit_at(later, &table, ip), Duration::ZERO);
    }

    #[test]
    fn a_client_at_its_rate_is_not_throttled_and_one_above_is() {
        let table = quota(&[("client-id", Some("steady"))], 1000.0);
        let quotas = ClientRates::new(QuotaKey::ProducerByteRate);
        let mut now = Instant::now();
        for _ in 0..300 {
            let pause = quotas.record_at(now, &table, ("User:alice", "steady"), 90.0);
            assert_eq!(
                pause,
                Duration::ZERO,
                "900 bytes a second is within the quota"
            );
            now += Duration::from_millis(100);
        }
        assert_eq!(
            quotas.record_at(now, &table, ("User:alice", "other"), 1e6),
            Duration::ZERO,
            "no quota for another client id"
        );
        let pause = quotas.record_at(now, &table, ("User:alice", "steady"), 20_000.0);
        assert!(
            pause > Duration::from_secs(1) && pause <= THROTTLE_MAX,
            "{pause:?}"
        );
    }

    #[test]
    fn a_client_that_pauses_as_told_keeps_to_its_rate() {
        let table = quota(&[("user", Some("alice"))], 10_000.0);
        let quotas = ClientRates::new(QuotaKey::ProducerByteRate);
        let start = Instant::now();
        let mut now = start;
        let mut sent = 0.0;
        while now - start < Duration::from_secs(120) {
            let pause = quotas.record_at(now, &table, ("User:alice", "any"), 4096.0);
            sent += 4096.0;
            now += pause.max(Duration::from_millis(10));
        }
        let rate = sent / (now - start).as_secs_f64();
        assert!(
            (rate - 10_000.0).abs() < 1_500.0,
            "a client pausing as told sends about its quota: {rate:.0} bytes/s"
        );
    }

    #[test]
    fn a_refunded_overage_is_not_counted_and_a_consumer_gets_its_rate() {
        let table = quota_of("consumer_byte_rate", &[("user", None)], 10_000.0);
        let quotas = ClientRates::new(QuotaKey::ConsumerByteRate);
        let who = ("User:bob", "reader");
        assert_eq!(quotas.window_bytes(&table, who), Some(100_000));
        let producer = ClientRates::new(QuotaKey::ProducerByteRate);
        assert_eq!(
            producer.window_bytes(&table, who),
            None,
            "no producer quota"
        );
        let start = Instant::now();
        let pause = quotas.record_at(start, &table, who, 200_000.0);
        assert!(
            !pause.is_zero(),
            "more than a window's bytes at once is throttled"
        );
        quotas.record_at(start, &table, who, -200_000.0);
        assert_eq!(
            quotas.record_at(start, &table, who, 100_000.0),
            Duration::ZERO,
            "the refused response was not counted"
        );
        // A consumer that takes what it is given and pauses as told gets about its quota.
        let mut now = start + Duration::from_millis(10);
        let mut received = 100_000.0;
        while now - start < Duration::from_secs(120) {
            let pause = quotas.record_at(now, &table, who, 8192.0);
            if pause.is_zero() {
                received += 8192.0;
            } else {
                quotas.record_at(now, &table, who, -8192.0);
            }
            now += pause.max(Duration::from_millis(10));
        }
        let rate = received / (now - start).as_secs_f64();
        assert!(
            (rate - 10_000.0).abs() < 1_000.0,
            "a consumer pausing as told receives about its quota: {rate:.0} bytes/s"
        );
    }

    #[test]
    fn throttle_times_grow_with_the_excess_and_are_bounded() {
        let window = Duration::from_secs(10);
        let max = THROTTLE_MAX;
        assert_eq!(throttle_time(100.0, 100.0, window, max), Duration::ZERO);
        assert_eq!(
            throttle_time(150.0, 100.0, window, max),
            Duration::from_secs(5)
        );
        assert_eq!(throttle_time(1e12, 1.0, window, max), THROTTLE_MAX);
        assert_eq!(throttle_time(1.0, 0.0, window, max), THROTTLE_MAX);
        assert_eq!(throttle_time(150.0, 100.0, window, SAMPLE), SAMPLE);
    }

    #[tokio::test]
    async fn a_mute_lasts_its_time() {
        let mute = Mute::default();
        assert!(!mute.is_muted());
        let start = Instant::now();
        mute.extend(Duration::from_millis(80));
        mute.extend(Duration::from_millis(10));
        assert!(mute.is_muted());
        mute.passed().await;
        assert!(
            start.elapsed() >= Duration::from_millis(80),
            "the longer pause holds"
        );
        assert!(!mute.is_muted(), "over once passed");
        mute.passed().await;
    }
}
