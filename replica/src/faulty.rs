//! A fault-injecting `ObjectStore` for tests (issue 31 item 8): wraps a real store and, while a
//! fault is set, makes its requests fail the ways object stores fail — refused (a 5xx or 429
//! before anything landed), landed but answered with an error (a reset after the write), slow,
//! or unreachable altogether. Public so that integration tests and benchmarks use the one
//! definition; it is never configured by the server.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

/// What goes wrong, until changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    None,
    /// PUTs fail before anything lands (a 503 or 429).
    RefusePuts,
    /// PUTs land, then the answer is an error (a connection reset after the write).
    LandThenFail,
    /// The next PUT lands, its answer is an error, and the endpoint is gone from then on
    /// (`Unreachable`): the read-back that would find the bytes fails too.
    LandThenGone,
    /// Every request waits this long first.
    Slow(Duration),
    /// Every request fails (the endpoint is gone).
    Unreachable,
    /// After this many more PUTs go through, PUTs wait, before anything lands, until the
    /// fault changes (then go on under the new one); other requests go through. A request in
    /// flight while another writer acts (a primary paused between its fencing check and its
    /// PUT, or in the middle of a cut shipped as several segments).
    HoldPutsAfter(u64),
    /// Listings leave segments out (a listing that lags behind the newest PUTs, as
    /// SeaweedFS's filer's may); reads of a key by name still find them.
    HideSegmentListings,
}

/// The switch tests turn, shared with the store.
#[derive(Debug)]
pub struct Faults {
    fault: Mutex<Fault>,
    /// Requests a fault changed.
    pub injected: AtomicU64,
    /// PUTs waiting now under `HoldPuts`.
    pub held: AtomicU64,
}

impl Faults {
    pub fn set(&self, fault: Fault) {
        *self
            .fault
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = fault;
    }

    /// Sets `to` only if the fault is still `from`, in one step under the lock.
    fn replace(&self, from: Fault, to: Fault) {
        let mut fault = self
            .fault
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if *fault == from {
            *fault = to;
        }
    }

    fn get(&self) -> Fault {
        *self
            .fault
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[derive(Debug)]
pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    pub faults: Arc<Faults>,
}

impl FaultyStore {
    pub fn new(inner: Arc<dyn ObjectStore>) -> FaultyStore {
        FaultyStore {
            inner,
            faults: Arc::new(Faults {
                fault: Mutex::new(Fault::None),
                injected: AtomicU64::new(0),
                held: AtomicU64::new(0),
            }),
        }
    }

    fn injected(&self, what: &'static str) -> object_store::Error {
        self.faults.injected.fetch_add(1, Ordering::Relaxed);
        object_store::Error::Generic {
            store: "faulty",
            source: format!("injected fault: {what}").into(),
        }
    }

    /// The fault for any request: delay, or fail when unreachable.
    async fn before(&self) -> object_store::Result<()> {
        match self.faults.get() {
            Fault::Slow(delay) => {
                self.faults.injected.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(delay).await;
                Ok(())
            }
            Fault::Unreachable => Err(self.injected("connection refused")),
            _ => Ok(()),
        }
    }
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({})", self.inner)
    }
}

/// A listing with the segments (`…/s/…`) left out.
fn without_segments(
    listing: BoxStream<'static, object_store::Result<ObjectMeta>>,
) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
    use futures_util::StreamExt;
    Box::pin(listing.filter(|item| {
        let segment = item
            .as_ref()
            .is_ok_and(|meta| meta.location.as_ref().contains("/s/"));
        std::future::ready(!segment)
    }))
}

#[async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        if let Fault::HoldPutsAfter(passing) = self.faults.get() {
            if passing > 0 {
                self.faults.replace(
                    Fault::HoldPutsAfter(passing),
                    Fault::HoldPutsAfter(passing - 1),
                );
            } else {
                self.faults.injected.fetch_add(1, Ordering::Relaxed);
                self.faults.held.fetch_add(1, Ordering::Relaxed);
                while self.faults.get() == Fault::HoldPutsAfter(0) {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                self.faults.held.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.before().await?;
        match self.faults.get() {
            Fault::RefusePuts => Err(self.injected("503 Slow Down")),
            Fault::LandThenFail => {
                self.inner.put_opts(location, payload, opts).await?;
                Err(self.injected("connection reset after the PUT landed"))
            }
            Fault::LandThenGone => {
                self.inner.put_opts(location, payload, opts).await?;
                // Unless the test switched the fault meanwhile (its switch wins).
                self.faults.replace(Fault::LandThenGone, Fault::Unreachable);
                Err(self.injected("connection reset after the PUT landed, then the endpoint went"))
            }
            _ => self.inner.put_opts(location, payload, opts).await,
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.before().await?;
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.before().await?;
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        self.before().await?;
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        if self.faults.get() == Fault::HideSegmentListings {
            return without_segments(self.inner.list(prefix));
        }
        if self.faults.get() == Fault::Unreachable {
            let error = self.injected("connection refused");
            return Box::pin(futures_util::stream::once(async move { Err(error) }));
        }
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        if self.faults.get() == Fault::HideSegmentListings {
            return without_segments(self.inner.list_with_offset(prefix, offset));
        }
        if self.faults.get() == Fault::Unreachable {
            let error = self.injected("connection refused");
            return Box::pin(futures_util::stream::once(async move { Err(error) }));
        }
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.before().await?;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.before().await?;
        self.inner.copy_opts(from, to, options).await
    }
}
