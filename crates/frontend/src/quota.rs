//! Client quota enforcement, as Kafka's `ClientQuotaManager` does it: each quota type (produce
//! bytes, fetch bytes, request time) keeps one rate per client as Kafka's default quota callback
//! tags it — (user, client id) when the quota that applies names both or their defaults, the user
//! alone for a user quota, the client id alone for a client-id quota; a request records its value, and when the rate is then above
//! the quota the answer carries `throttle_time_ms` and the connection reads nothing more until
//! that time has passed (KIP-219's muting).
//!
//! The rate is Kafka's: `quota.window.num` samples of `quota.window.size.seconds` (11 of 1 s by
//! default), divided by the time they span, at least `samples - 1` windows, so a new client may
//! burst before it is throttled, as with Kafka. The throttle time is
//! `(rate - quota) / quota × window`.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use millrace_cluster::image::MetadataImage;
use millrace_cluster::quota::{
    quota_for, QuotaEntity, CONSUMER_BYTE_RATE, ENTITY_CLIENT_ID, ENTITY_USER, PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
};
use parking_lot::Mutex;

/// Kafka's `quota.window.num` and `quota.window.size.seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaWindow {
    pub samples: u64,
    pub window_ms: u64,
}

impl Default for QuotaWindow {
    /// Kafka's defaults: 11 samples of 1 s.
    fn default() -> Self {
        Self {
            samples: 11,
            window_ms: 1000,
        }
    }
}
/// A rate nobody recorded into for this long is dropped (Kafka expires quota sensors after an
/// hour of inactivity).
const RATE_IDLE_MS: u64 = 3_600_000;
/// Most rates kept per quota type; past it, idle ones are dropped first, then the oldest.
const RATES_MAX: usize = 10_000;

/// What a quota limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuotaType {
    /// Record bytes a client produces (`producer_byte_rate`).
    Produce,
    /// Record bytes a client fetches (`consumer_byte_rate`).
    Fetch,
    /// Request handling time, in percent of one thread (`request_percentage`).
    Request,
}

impl QuotaType {
    fn key(self) -> &'static str {
        match self {
            QuotaType::Produce => PRODUCER_BYTE_RATE,
            QuotaType::Fetch => CONSUMER_BYTE_RATE,
            QuotaType::Request => REQUEST_PERCENTAGE,
        }
    }
}

/// When a connection may read its next request: set by a throttled answer, obeyed by the
/// connection before it dispatches anything more (Kafka mutes the channel).
#[derive(Debug, Clone, Default)]
pub struct Throttle(std::sync::Arc<Mutex<Option<Instant>>>);

impl Throttle {
    /// Mutes the connection for `ms` from now (a later end wins over an earlier one).
    pub fn extend(&self, ms: i32) {
        if ms <= 0 {
            return;
        }
        let end = Instant::now() + std::time::Duration::from_millis(ms.unsigned_abs().into());
        let mut until = self.0.lock();
        if until.is_none_or(|u| u < end) {
            *until = Some(end);
        }
    }

    /// The end of the current mute, if it is still ahead.
    pub fn until(&self) -> Option<Instant> {
        let until = *self.0.lock();
        until.filter(|u| *u > Instant::now())
    }
}

/// One sample: when its window started (ms since the manager's epoch) and what it holds.
#[derive(Debug, Clone, Copy)]
struct Sample {
    start_ms: u64,
    value: f64,
}

/// Kafka's `Rate` over a `SampledTotal`.
#[derive(Debug, Default)]
struct Rate {
    samples: VecDeque<Sample>,
    last_record_ms: u64,
}

impl Rate {
    fn purge(&mut self, w: QuotaWindow, now_ms: u64) {
        let expire = w.samples * w.window_ms;
        self.samples
            .retain(|s| now_ms.saturating_sub(s.start_ms) < expire);
    }

    fn record(&mut self, w: QuotaWindow, value: f64, now_ms: u64) {
        self.purge(w, now_ms);
        self.last_record_ms = now_ms;
        match self.samples.back_mut() {
            Some(s) if now_ms.saturating_sub(s.start_ms) < w.window_ms => s.value += value,
            _ => {
                if self.samples.len() as u64 >= w.samples {
                    self.samples.pop_front();
                }
                self.samples.push_back(Sample {
                    start_ms: now_ms,
                    value,
                });
            }
        }
    }

    /// The time the rate is measured over, ms: at least `samples - 1` windows.
    fn window_ms(&self, w: QuotaWindow, now_ms: u64) -> u64 {
        let oldest = self.samples.front().map_or(now_ms, |s| s.start_ms);
        let elapsed = now_ms.saturating_sub(oldest);
        let full = elapsed / w.window_ms;
        let min_full = w.samples.saturating_sub(1);
        let window = if full < min_full {
            elapsed + (min_full - full) * w.window_ms
        } else {
            elapsed
        };
        // At the very start of a window with nothing before it: 1 ms, as Kafka (never 0).
        window.max(1)
    }

    /// Per second.
    fn measure(&mut self, w: QuotaWindow, now_ms: u64) -> f64 {
        self.purge(w, now_ms);
        let total: f64 = self.samples.iter().map(|s| s.value).sum();
        let window_s = self.window_ms(w, now_ms) as f64 / 1000.0;
        total / window_s
    }
}

/// A rate's identity: the quota type, the user tag and the client-id tag ("" when the quota that
/// applies does not name that entity type).
type RateKey = (QuotaType, String, String);

/// The rate a client's requests count against, for a quota set on `entity`.
fn rate_key(kind: QuotaType, entity: &QuotaEntity, user: &str, client_id: &str) -> RateKey {
    let tag = |entity_type: &str, value: &str| {
        if entity.contains_key(entity_type) {
            value.to_string()
        } else {
            String::new()
        }
    };
    (
        kind,
        tag(ENTITY_USER, user),
        tag(ENTITY_CLIENT_ID, client_id),
    )
}

/// The rates of every client that has a quota, per quota type.
pub struct QuotaManager {
    window: QuotaWindow,
    epoch: Instant,
    rates: Mutex<HashMap<RateKey, Rate>>,
}

impl Default for QuotaManager {
    fn default() -> Self {
        Self::new(QuotaWindow::default())
    }
}

impl QuotaManager {
    pub fn new(window: QuotaWindow) -> Self {
        Self {
            window,
            epoch: Instant::now(),
            rates: Mutex::new(HashMap::new()),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Records `value` for a client of `user` (`""` when not authenticated) with `client_id`,
    /// and returns how long to throttle it, ms (0: within its quota, or none applies).
    pub fn record(
        &self,
        image: &MetadataImage,
        kind: QuotaType,
        user: &str,
        client_id: &str,
        value: f64,
    ) -> i32 {
        let Some((entity, quota)) = quota_for(&image.client_quotas, user, client_id, kind.key())
        else {
            return 0;
        };
        let now = self.now_ms();
        let key = rate_key(kind, entity, user, client_id);
        let mut rates = self.rates.lock();
        if rates.len() >= RATES_MAX && !rates.contains_key(&key) {
            evict(&mut rates, now);
        }
        let rate = rates.entry(key).or_default();
        rate.record(self.window, value, now);
        let measured = rate.measure(self.window, now);
        if measured <= quota {
            return 0;
        }
        let mut throttle = (measured - quota) / quota * rate.window_ms(self.window, now) as f64;
        if kind == QuotaType::Request {
            // Kafka bounds a request quota's throttle to one window (`boundedThrottleTime`).
            throttle = throttle.min(self.window.window_ms as f64);
        }
        throttle.round().clamp(0.0, f64::from(i32::MAX)) as i32
    }

    /// Takes back a recorded value (a throttled fetch sends no records: Kafka does not charge it).
    pub fn unrecord(
        &self,
        image: &MetadataImage,
        kind: QuotaType,
        user: &str,
        client_id: &str,
        value: f64,
    ) {
        if let Some((entity, _)) = quota_for(&image.client_quotas, user, client_id, kind.key()) {
            let now = self.now_ms();
            let key = rate_key(kind, entity, user, client_id);
            if let Some(rate) = self.rates.lock().get_mut(&key) {
                rate.record(self.window, -value, now);
            }
        }
    }

    /// The most bytes a fetch may return without overshooting the client's fetch quota by more
    /// than a window's worth (Kafka's `getMaxValueInQuotaWindow`).
    pub fn fetch_bytes_max(
        &self,
        image: &MetadataImage,
        user: &str,
        client_id: &str,
    ) -> Option<usize> {
        let w = self.window;
        quota_for(&image.client_quotas, user, client_id, CONSUMER_BYTE_RATE).map(|(_, quota)| {
            let most = quota * w.samples.saturating_sub(1) as f64 * (w.window_ms as f64 / 1000.0);
            most.clamp(1.0, usize::MAX as f64) as usize
        })
    }
}

/// Drops idle rates, or the least recently used one when none is idle.
fn evict(rates: &mut HashMap<RateKey, Rate>, now_ms: u64) {
    rates.retain(|_, r| now_ms.saturating_sub(r.last_record_ms) < RATE_IDLE_MS);
    if rates.len() >= RATES_MAX {
        if let Some(key) = rates
            .iter()
            .min_by_key(|(_, r)| r.last_record_ms)
            .map(|(k, _)| k.clone())
        {
            rates.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_rate_spans_ten_windows_and_forgets_old_samples() {
        let w = QuotaWindow::default();
        let mut rate = Rate::default();
        rate.record(w, 10_000.0, 0);
        // One sample, ten windows: 1,000 per second.
        assert_eq!(rate.window_ms(w, 0), 10_000);
        assert!((rate.measure(w, 0) - 1000.0).abs() < 1e-9);
        for s in 1..=20u64 {
            rate.record(w, 1000.0, s * 1000);
        }
        // 11 samples of 1,000 over 10 s.
        assert!(
            (rate.measure(w, 20_000) - 1100.0).abs() < 1e-9,
            "{}",
            rate.measure(w, 20_000)
        );
        // All gone after 11 windows of silence.
        assert_eq!(rate.measure(w, 40_000), 0.0);
    }

    #[test]
    fn throttle_time_is_kafkas() {
        use millrace_cluster::quota::EntityName;
        let mut image = MetadataImage::default();
        let mut entity = QuotaEntity::new();
        entity.insert("client-id".into(), EntityName::Named("app".into()));
        std::sync::Arc::make_mut(&mut image.client_quotas)
            .entry(entity)
            .or_default()
            .insert(PRODUCER_BYTE_RATE.into(), 1000.0);
        let quotas = QuotaManager::default();
        // 10,000 bytes over the minimum 10 s window is exactly the quota: not throttled.
        assert_eq!(
            quotas.record(&image, QuotaType::Produce, "", "app", 10_000.0),
            0
        );
        // 10,000 more: 2,000/s against 1,000/s → (2000-1000)/1000 × 10 s.
        let throttle = quotas.record(&image, QuotaType::Produce, "", "app", 10_000.0);
        assert!((9_990..=10_000).contains(&throttle), "{throttle}");
        // A default client-id quota: each client id has its own rate, as in Kafka.
        let mut default = QuotaEntity::new();
        default.insert("client-id".into(), EntityName::Default);
        std::sync::Arc::make_mut(&mut image.client_quotas)
            .entry(default)
            .or_default()
            .insert(CONSUMER_BYTE_RATE.into(), 1000.0);
        assert_eq!(
            quotas.record(&image, QuotaType::Fetch, "", "a", 10_000.0),
            0
        );
        assert_eq!(
            quotas.record(&image, QuotaType::Fetch, "", "b", 10_000.0),
            0
        );
        assert!(quotas.record(&image, QuotaType::Fetch, "", "a", 10_000.0) > 0);
        // Another client id has no quota.
        assert_eq!(
            quotas.record(&image, QuotaType::Produce, "", "other", 1e9),
            0
        );
        // A produce quota is not a fetch quota.
        assert_eq!(
            quotas.record(&image, QuotaType::Fetch, "", "app", 5_000.0),
            0
        );
    }
}
