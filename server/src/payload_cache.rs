//! Raw payloads one network core has recently appended or read, bounded by bytes.
//!
//! Why: an agent reads its last turns before every model call, and consecutive reads
//! overlap almost entirely. Without this cache every read of a zstd-stored payload is
//! inflated again — by the client (ACCEPT_ZSTD) or by the server — at ~1 ms of CPU per page of
//! 64 × 10 KiB. With it, a hot payload is inflated and verified once per core and then served
//! as a reference-counted buffer: no pack read, no checksum, no inflate.
//!
//! Owned by one network core (single writer, no locks: it lives in the core's `CoreContext`
//! and is never borrowed across an await). Only payloads verified against their BLAKE3 hash
//! enter it: bytes the core hashed itself on APPEND_TURN, or bytes the engine inflated and
//! verified. Content under a hash never changes, so an entry can never be stale (a read looks
//! a blob up in the index, and a purged or redacted one is refused, before the cache). Eviction
//! is CLOCK: one reference bit per entry, a second chance for entries read since the hand last
//! passed them.
//!
//! A core's appended payloads are also offered to the other cores' caches (`CacheFeed`,
//! decision 0015): an agent's connections land on any core, so the read after an append is
//! often served by another core than the append, which would otherwise inflate and hash the
//! payload once more. Only the immutable, reference-counted bytes travel, over a bounded
//! channel per core; each cache stays owned by its core.

use std::collections::{HashMap, VecDeque};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use ctxstore_engine::BlobHash;
use ctxstore_engine::metrics::add_single_writer;

/// Largest share of the budget one payload may take: a single huge payload must not flush
/// the hot set of every agent on the core.
const ENTRY_SHARE_DIVISOR: u64 = 16;

#[derive(Debug)]
struct Entry {
    payload: Bytes,
    referenced: bool,
}

/// Payloads one core appended, offered to another core's cache.
type Offer = (BlobHash, Bytes);

/// A core's side of the feed between the cores' caches: the offers other cores sent it, and
/// a sender to each other core. Bounded: an offer to a full inbox is dropped (a cache may miss).
#[derive(Debug)]
pub struct CacheFeed {
    inbox: flume::Receiver<Offer>,
    peers: Vec<flume::Sender<Offer>>,
}

impl CacheFeed {
    /// Offers that wait at most in one core's inbox; taken at its next read.
    pub const INBOX_DEPTH: usize = 1024;

    /// One feed per core (index = core), each sending to every other core.
    pub fn for_cores(cores: usize) -> Vec<CacheFeed> {
        let channels: Vec<_> = (0..cores)
            .map(|_| flume::bounded(CacheFeed::INBOX_DEPTH))
            .collect();
        (0..cores)
            .map(|core| CacheFeed {
                inbox: channels[core].1.clone(),
                peers: channels
                    .iter()
                    .enumerate()
                    .filter(|(other, _)| *other != core)
                    .map(|(_, (sender, _))| sender.clone())
                    .collect(),
            })
            .collect()
    }
}

#[derive(Debug)]
pub struct PayloadCache {
    bytes_max: u64,
    bytes: u64,
    entries: HashMap<BlobHash, Entry>,
    /// The CLOCK: every cached hash once, oldest insertion (or last second chance) first.
    clock: VecDeque<BlobHash>,
    /// Hits, misses and bytes, for the metrics scraper (written only by the owning core).
    counters: Arc<CacheCounters>,
    /// The other cores' caches: `None` on a server of one core, and in tests.
    feed: Option<CacheFeed>,
}

/// What a payload cache publishes for monitoring; written only by its core's thread.
#[derive(Debug, Default)]
pub struct CacheCounters {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    /// Payload bytes held now.
    pub bytes: AtomicU64,
}

impl PayloadCache {
    /// A cache holding at most `bytes_max` payload bytes (0 disables it).
    pub fn new(bytes_max: u64) -> PayloadCache {
        PayloadCache::with_counters(bytes_max, Arc::default())
    }

    /// A cache that publishes its hits, misses and bytes in `counters`.
    pub fn with_counters(bytes_max: u64, counters: Arc<CacheCounters>) -> PayloadCache {
        PayloadCache {
            bytes_max,
            bytes: 0,
            entries: HashMap::new(),
            clock: VecDeque::new(),
            counters,
            feed: None,
        }
    }

    /// This cache, offering what its core appends to the other cores and taking their offers.
    pub fn with_feed(mut self, feed: CacheFeed) -> PayloadCache {
        self.feed = Some(feed);
        self
    }

    /// Caches a payload this core appended (hashed here, so verified) and offers the cached
    /// copy to the other cores' caches.
    pub fn insert_appended(&mut self, hash: BlobHash, payload: &Bytes) {
        let Some(cached) = self.insert_copy(hash, payload) else {
            return;
        };
        if let Some(feed) = &self.feed {
            for peer in &feed.peers {
                // Full: that core is busy and reads its inbox soon; the offer is only a hint.
                let _ = peer.try_send((hash, cached.clone()));
            }
        }
    }

    /// Takes the other cores' offers into this cache: called before each read.
    pub fn take_offers(&mut self) {
        let offers: Vec<Offer> = match &self.feed {
            Some(feed) => feed.inbox.try_iter().take(CacheFeed::INBOX_DEPTH).collect(),
            None => return,
        };
        for (hash, payload) in offers {
            // Already compact: the offering core copied it out of its frame.
            if self.fits(hash, &payload) {
                self.store(hash, payload);
            }
        }
    }

    pub fn hits(&self) -> u64 {
        self.counters.hits.load(Ordering::Relaxed)
    }

    pub fn misses(&self) -> u64 {
        self.counters.misses.load(Ordering::Relaxed)
    }

    /// Payloads larger than this are not cached.
    pub fn entry_bytes_max(&self) -> u64 {
        self.bytes_max / ENTRY_SHARE_DIVISOR
    }

    pub fn get(&mut self, hash: &BlobHash) -> Option<Bytes> {
        match self.entries.get_mut(hash) {
            Some(entry) => {
                entry.referenced = true;
                add_single_writer(&self.counters.hits, 1);
                Some(entry.payload.clone())
            }
            None => {
                add_single_writer(&self.counters.misses, 1);
                None
            }
        }
    }

    /// Caches `payload`, which the caller has verified hashes to `hash`. Copies it when it is
    /// a slice of a larger buffer (a frame read from a socket), so that the cache accounts
    /// for — and holds — only the payload's own bytes.
    pub fn insert(&mut self, hash: BlobHash, payload: &Bytes) {
        self.insert_copy(hash, payload);
    }

    /// `insert`, returning the cached copy when the payload was not cached before.
    fn insert_copy(&mut self, hash: BlobHash, payload: &Bytes) -> Option<Bytes> {
        if !self.fits(hash, payload) {
            return None;
        }
        let payload = Bytes::copy_from_slice(payload);
        self.store(hash, payload.clone());
        Some(payload)
    }

    fn fits(&self, hash: BlobHash, payload: &Bytes) -> bool {
        payload.len() as u64 <= self.entry_bytes_max() && !self.entries.contains_key(&hash)
    }

    /// Caches `payload` as it is (the caller made it compact and checked that it `fits`).
    fn store(&mut self, hash: BlobHash, payload: Bytes) {
        let len = payload.len() as u64;
        while self.bytes + len > self.bytes_max {
            self.evict_one();
        }
        let replaced = self.entries.insert(
            hash,
            Entry {
                payload,
                referenced: false,
            },
        );
        assert!(replaced.is_none(), "a payload is cached once");
        self.clock.push_back(hash);
        self.bytes += len;
        self.counters.bytes.store(self.bytes, Ordering::Relaxed);
        debug_assert_eq!(self.entries.len(), self.clock.len());
        assert!(self.bytes <= self.bytes_max);
    }

    /// Removes the first entry the hand finds unreferenced, clearing reference bits on the way.
    fn evict_one(&mut self) {
        // Each entry is passed at most twice (once clearing its bit), so this ends.
        while let Some(hash) = self.clock.pop_front() {
            let Some(entry) = self.entries.get_mut(&hash) else {
                unreachable!("the clock and the map hold the same hashes");
            };
            if entry.referenced {
                entry.referenced = false;
                self.clock.push_back(hash);
                continue;
            }
            let len = entry.payload.len() as u64;
            self.entries.remove(&hash);
            self.bytes -= len;
            self.counters.bytes.store(self.bytes, Ordering::Relaxed);
            return;
        }
        unreachable!("evicting from an empty cache: bytes accounting is wrong");
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// The engine's reads go through this cache (`Engine::read_page`, `Engine::read_payload`):
/// they look payloads up here and put what they inflated and verified here.
impl ctxstore_engine::PayloadCache for PayloadCache {
    fn get(&mut self, hash: &BlobHash) -> Option<Bytes> {
        PayloadCache::get(self, hash)
    }

    fn entry_bytes_max(&self) -> u64 {
        PayloadCache::entry_bytes_max(self)
    }

    fn insert(&mut self, hash: BlobHash, payload: &Bytes) {
        PayloadCache::insert(self, hash, payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(seed: u8, len: usize) -> (BlobHash, Bytes) {
        let bytes = Bytes::from(vec![seed; len]);
        (BlobHash::of(&bytes), bytes)
    }

    #[test]
    fn stays_within_its_budget_and_keeps_what_is_read() {
        let mut cache = PayloadCache::new(16 * 1000);
        let (hot, hot_bytes) = payload(0, 1000);
        cache.insert(hot, &hot_bytes);
        for seed in 1..=100u8 {
            let (hash, bytes) = payload(seed, 1000);
            cache.insert(hash, &bytes);
            assert!(cache.bytes() <= 16 * 1000);
            // Read between insertions: the CLOCK gives it a second chance every lap.
            assert_eq!(cache.get(&hot).as_deref(), Some(&hot_bytes[..]));
        }
        assert_eq!(cache.hits(), 100);
        // The oldest unread payloads are gone.
        assert!(cache.get(&payload(1, 1000).0).is_none());
        assert!(cache.get(&payload(100, 1000).0).is_some());
    }

    #[test]
    fn refuses_payloads_over_its_entry_share_and_disabled_caches_hold_nothing() {
        let mut cache = PayloadCache::new(16 * 1000);
        let (big, big_bytes) = payload(1, 1001);
        cache.insert(big, &big_bytes);
        assert!(cache.get(&big).is_none());
        assert_eq!(cache.bytes(), 0);

        let mut disabled = PayloadCache::new(0);
        let (small, small_bytes) = payload(2, 1);
        disabled.insert(small, &small_bytes);
        assert!(disabled.get(&small).is_none());
    }

    fn fed_caches(cores: usize) -> Vec<PayloadCache> {
        CacheFeed::for_cores(cores)
            .into_iter()
            .map(|feed| PayloadCache::new(1 << 20).with_feed(feed))
            .collect()
    }

    #[test]
    fn an_appended_payload_is_offered_to_every_other_core_as_the_same_bytes() {
        let mut caches = fed_caches(3);
        let (hash, bytes) = payload(3, 500);
        caches[1].insert_appended(hash, &bytes);
        let own = caches[1].get(&hash).unwrap();
        // Not before the core takes its offers (at its next read), then the same allocation.
        assert!(caches[0].get(&hash).is_none());
        for core in [0, 2] {
            caches[core].take_offers();
            let offered = caches[core].get(&hash).unwrap();
            assert_eq!(offered, bytes);
            assert_eq!(
                offered.as_ptr(),
                own.as_ptr(),
                "core {core} shares the copy"
            );
        }
        // Nothing comes back to the core that offered it, and a second append offers nothing.
        caches[1].insert_appended(hash, &bytes);
        for cache in &mut caches {
            cache.take_offers();
            assert_eq!(cache.bytes(), 500);
        }
    }

    #[test]
    fn offers_beyond_an_inbox_are_dropped_and_payloads_over_the_share_never_offered() {
        let mut caches = fed_caches(2);
        for index in 0..CacheFeed::INBOX_DEPTH as u64 + 10 {
            let bytes = Bytes::from(index.to_le_bytes().to_vec());
            caches[0].insert_appended(BlobHash::of(&bytes), &bytes);
        }
        let (big, big_bytes) = payload(9, (1 << 20) / 16 + 1);
        caches[0].insert_appended(big, &big_bytes);
        caches[1].take_offers();
        assert_eq!(caches[1].bytes(), CacheFeed::INBOX_DEPTH as u64 * 8);
        assert!(caches[1].get(&big).is_none());
        // Room again once taken.
        let (late, late_bytes) = payload(4, 100);
        caches[0].insert_appended(late, &late_bytes);
        caches[1].take_offers();
        assert!(caches[1].get(&late).is_some());
    }

    #[test]
    fn a_cached_payload_does_not_hold_its_frame() {
        let frame = Bytes::from(vec![7u8; 4096]);
        let payload = frame.slice(100..200);
        let hash = BlobHash::of(&payload);
        let mut cache = PayloadCache::new(1 << 20);
        cache.insert(hash, &payload);
        let cached = cache.get(&hash).unwrap();
        assert_eq!(cached, payload);
        assert_ne!(cached.as_ptr(), payload.as_ptr());
    }
}
