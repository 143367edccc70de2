//! The quotas the server counts itself (decision 0032 §3): a tenant's connections and its
//! appends per second. Neither is state of the store (a restart starts both from zero), so
//! they live here, not in the engine, which counts contexts and open streams
//! (`ctxstore_engine::quota`).
//!
//! One `Meter` per tenant name, shared by every core's connections of the tenant: atomics
//! only, no lock on a request's path. The limits are set from the tenants file at start and
//! on every reload, so a reload applies to the connections already open.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ctxstore_engine::EngineError;
use ctxstore_engine::quota::{Quota, QuotaExceeded};
use ctxstore_protocol::{AppendsRequest, KvRequest, StreamsRequest, VectorsRequest, appends};
use ctxstore_protocol::{ErrorCode, Request, Response};

use crate::tenants_file::TenantsFile;

/// A second, the window `quota_appends_per_s` counts over and the burst it allows.
const SECOND_NS: u64 = 1_000_000_000;

/// One tenant's connections and appends.
#[derive(Debug)]
pub struct Meter {
    tenant: String,
    /// The server's clock origin for `appends_tat_ns`.
    epoch: Instant,
    /// `quota_connections`; 0: none.
    connections_max: AtomicU64,
    /// `quota_appends_per_s`; 0: none.
    appends_per_s_max: AtomicU64,
    connections: AtomicU64,
    /// The generic cell rate algorithm's theoretical arrival time, in ns since `epoch`: a
    /// token bucket of one second's worth in one word, so a charge is one compare-and-swap.
    appends_tat_ns: AtomicU64,
    /// Requests refused with QUOTA_EXCEEDED, per `Quota::index`, for `/metrics`.
    refused: [AtomicU64; Quota::ALL.len()],
}

impl Meter {
    fn new(tenant: &str, epoch: Instant) -> Meter {
        Meter {
            tenant: tenant.to_string(),
            epoch,
            connections_max: AtomicU64::new(0),
            appends_per_s_max: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            appends_tat_ns: AtomicU64::new(0),
            refused: Default::default(),
        }
    }

    /// Takes one of the tenant's connections, given back when the slot drops.
    pub fn connect(self: &Arc<Meter>) -> Result<ConnectionSlot, QuotaExceeded> {
        let limit = self.connections_max.load(Ordering::Relaxed);
        let before = self.connections.fetch_add(1, Ordering::AcqRel);
        if limit != 0 && before >= limit {
            self.connections.fetch_sub(1, Ordering::AcqRel);
            return Err(self.exceeded(Quota::Connections, limit, before));
        }
        Ok(ConnectionSlot {
            meter: self.clone(),
        })
    }

    /// Charges `count` appends against `quota_appends_per_s`: all of them, or none (a batch
    /// that does not fit is refused whole, and charges nothing).
    pub fn charge_appends(&self, count: u64) -> Result<(), QuotaExceeded> {
        let rate = self.appends_per_s_max.load(Ordering::Relaxed);
        if rate == 0 || count == 0 {
            return Ok(());
        }
        // An append costs 1/rate of a second; the bucket holds one second.
        let interval_ns = (SECOND_NS / rate).max(1);
        let cost_ns = count.saturating_mul(interval_ns);
        let now_ns = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let mut tat_ns = self.appends_tat_ns.load(Ordering::Acquire);
        loop {
            let start_ns = tat_ns.max(now_ns);
            let next_ns = start_ns.saturating_add(cost_ns);
            if next_ns - now_ns > SECOND_NS {
                let usage = (start_ns - now_ns) / interval_ns;
                return Err(self.exceeded(Quota::AppendsPerS, rate, usage));
            }
            match self.appends_tat_ns.compare_exchange_weak(
                tat_ns,
                next_ns,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(()),
                Err(current) => tat_ns = current,
            }
        }
    }

    /// Its open connections now.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Counts an answer when it is a QUOTA_EXCEEDED (whichever quota, the engine's or this
    /// meter's, refused it: the message names it).
    pub fn note(&self, response: &Response) {
        if let Response::Error {
            code: ErrorCode::QuotaExceeded,
            message,
            ..
        } = response
            && let Some(quota) = QuotaExceeded::quota_in(message)
        {
            self.refused[quota.index()].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Requests refused at `quota` so far.
    pub fn refused(&self, quota: Quota) -> u64 {
        self.refused[quota.index()].load(Ordering::Relaxed)
    }

    /// `quota`'s limit in force, for the limits this meter holds (`None`: none, or not this
    /// meter's).
    pub fn limit(&self, quota: Quota) -> Option<u64> {
        let limit = match quota {
            Quota::Connections => &self.connections_max,
            Quota::AppendsPerS => &self.appends_per_s_max,
            _ => return None,
        };
        Some(limit.load(Ordering::Relaxed)).filter(|limit| *limit > 0)
    }

    fn exceeded(&self, quota: Quota, limit: u64, usage: u64) -> QuotaExceeded {
        QuotaExceeded {
            tenant: self.tenant.clone(),
            quota,
            limit,
            usage,
        }
    }
}

/// One connection of a tenant, counted while it lives.
#[derive(Debug)]
pub struct ConnectionSlot {
    meter: Arc<Meter>,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let before = self.meter.connections.fetch_sub(1, Ordering::AcqRel);
        assert!(before > 0, "a slot was counted");
    }
}

/// Every tenant's meter, by name. Locked at HELLO and reload only, never per request.
#[derive(Debug)]
pub struct Meters {
    epoch: Instant,
    by_tenant: Mutex<HashMap<String, Arc<Meter>>>,
}

impl Meters {
    pub fn new(file: &TenantsFile) -> Meters {
        let meters = Meters {
            epoch: Instant::now(),
            by_tenant: Mutex::new(HashMap::new()),
        };
        meters.set_limits(file);
        meters
    }

    /// Every tenant's limits from `file` (a tenant it does not name keeps its meter, with no
    /// limits, while its connections live).
    pub fn set_limits(&self, file: &TenantsFile) {
        let mut by_tenant = self
            .by_tenant
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for meter in by_tenant.values() {
            meter.connections_max.store(0, Ordering::Relaxed);
            meter.appends_per_s_max.store(0, Ordering::Relaxed);
        }
        for entry in &file.tenants {
            let meter = by_tenant
                .entry(entry.name.clone())
                .or_insert_with(|| Arc::new(Meter::new(&entry.name, self.epoch)));
            let quotas = entry.quotas;
            let connections = quotas.connections.unwrap_or(0);
            meter.connections_max.store(connections, Ordering::Relaxed);
            let appends = quotas.appends_per_s.unwrap_or(0);
            meter.appends_per_s_max.store(appends, Ordering::Relaxed);
        }
    }

    /// The meter of the tenant named `tenant`, if it has one yet.
    pub fn get(&self, tenant: &str) -> Option<Arc<Meter>> {
        let by_tenant = self
            .by_tenant
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        by_tenant.get(tenant).cloned()
    }

    /// The meter of the tenant named `tenant`.
    pub fn of(&self, tenant: &str) -> Arc<Meter> {
        let mut by_tenant = self
            .by_tenant
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        by_tenant
            .entry(tenant.to_string())
            .or_insert_with(|| Arc::new(Meter::new(tenant, self.epoch)))
            .clone()
    }
}

/// The ERROR a refusal is answered with (QUOTA_EXCEEDED, `detail` the limit).
pub fn answer(refused: QuotaExceeded) -> Response {
    crate::dispatch::engine_error(EngineError::QuotaExceeded(refused))
}

/// The appends a request makes, as `quota_appends_per_s` counts them: each turn appended
/// (a stream's seal appends one), each stream delta, each key-value entry put.
pub fn appends_in(request: &Request) -> u64 {
    match request {
        Request::Appends(AppendsRequest::AppendTurn(_) | AppendsRequest::AppendTurnByHash(_)) => 1,
        Request::Appends(AppendsRequest::AppendTurns(appends::AppendTurns { turns, .. })) => {
            turns.len() as u64
        }
        Request::Streams(StreamsRequest::StreamAppend(_) | StreamsRequest::StreamSeal(_)) => 1,
        Request::Kv(KvRequest::KvPut(put)) => put.entries.len() as u64,
        Request::Kv(KvRequest::KvPutEx(put)) => put.entries.len() as u64,
        Request::Vectors(VectorsRequest::KvPutVectors(put)) => put.entries.len() as u64,
        Request::Vectors(VectorsRequest::AppendTurnsVectors(append)) => append.turns.len() as u64,
        Request::AckAfter { request, .. } => appends_in(request),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meter(connections: u64, appends_per_s: u64) -> Arc<Meter> {
        let meter = Arc::new(Meter::new("acme", Instant::now()));
        meter.connections_max.store(connections, Ordering::Relaxed);
        meter
            .appends_per_s_max
            .store(appends_per_s, Ordering::Relaxed);
        meter
    }

    #[test]
    fn connections_are_counted_while_their_slots_live() {
        let meter = meter(2, 0);
        let first = meter.connect().unwrap();
        let _second = meter.connect().unwrap();
        let refused = meter.connect().unwrap_err();
        assert_eq!(
            (refused.quota, refused.limit, refused.usage),
            (Quota::Connections, 2, 2)
        );
        assert_eq!(
            meter.connections(),
            2,
            "a refused connection is not counted"
        );
        drop(first);
        assert!(meter.connect().is_ok());
    }

    #[test]
    fn appends_pass_up_to_one_seconds_worth_and_a_batch_fits_whole_or_not_at_all() {
        // Margins of hundreds of milliseconds: a slow machine refills little between calls.
        let meter = meter(0, 100);
        meter.charge_appends(90).unwrap();
        let refused = meter.charge_appends(50).unwrap_err();
        assert_eq!((refused.quota, refused.limit), (Quota::AppendsPerS, 100));
        assert!((80..=90).contains(&refused.usage), "{}", refused.usage);
        // The refused batch charged nothing: what is left still fits.
        meter.charge_appends(10).unwrap();
        assert!(meter.charge_appends(50).is_err());
        // A batch larger than a second's worth never fits.
        assert!(self::meter(0, 10).charge_appends(11).is_err());
        // No limit: anything goes.
        self::meter(0, 0).charge_appends(u64::MAX).unwrap();
    }

    #[test]
    fn concurrent_appends_pass_exactly_a_seconds_worth() {
        let meter = meter(0, 1_000);
        let passed = AtomicU64::new(0);
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..2_500 {
                        if meter.charge_appends(1).is_ok() {
                            passed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        // A second's worth at once, plus what refilled while the threads ran (all 10,000 only
        // if they took 9 s).
        let passed = passed.load(Ordering::Relaxed);
        assert!((1_000..10_000).contains(&passed), "{passed}");
    }
}
