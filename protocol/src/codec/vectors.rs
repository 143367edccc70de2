//! Vector search (version 6, decision 0033): VECTOR_INDEX_CREATE, VECTOR_INDEX_DROP,
//! VECTOR_INDEX_LIST, VECTOR_SEARCH and KV_PUT_VECTORS; version 7: APPEND_TURNS_VECTORS and
//! VECTOR_SEARCH_TURNS. Layouts in docs/protocol.md, *Vector
//! search*. Components are read as they are: a NaN or an infinity, an unknown metric, a
//! dimension the index does not have are the store's to refuse with INVALID_ARGUMENT (the
//! connection stays open), not a broken frame.

use bytes::Bytes;

use super::answer::{ERROR_ANSWER_BYTES_MAX, FIXED_ANSWER_BYTES, TURN_ENTRY_BYTES};
use super::appends::{
    AppendedTurns, check_spec, read_appended_turns, read_turns_target, write_appended_turns,
    write_turns_target,
};
use super::check::{EncodeError, SHORT, TINY, context, within};
use super::cursor::Cursor;
use super::writer::{ChunkWriter, short_len};
use crate::error::DecodeError;
use crate::message::*;

/// The vector messages (`Family::of` in codec/mod.rs maps message types to them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    VectorIndexCreate,
    VectorIndexDrop,
    VectorIndexList,
    VectorSearch,
    KvPutVectors,
    AppendTurnsVectors,
    VectorSearchTurns,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VectorsRequest {
    VectorIndexCreate(VectorIndexCreate),
    VectorIndexDrop(VectorIndexDrop),
    VectorIndexList(VectorIndexList),
    VectorSearch(VectorSearch),
    KvPutVectors(KvPutVectors),
    AppendTurnsVectors(AppendTurnsVectors),
    VectorSearchTurns(VectorSearchTurns),
}

/// APPEND_TURNS with each turn's vectors, all of `index`, each of `dims` components.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppendTurnsVectors {
    pub context: ContextRef,
    pub expected_head: Option<u64>,
    pub index: String,
    pub dims: u16,
    pub turns: Vec<VectorTurnWire>,
}

/// A turn of APPEND_TURNS_VECTORS: its TURN_SPEC and its vectors (none: stored without any).
/// Equal when equal on the wire (`wire_eq`).
#[derive(Clone, Debug)]
pub struct VectorTurnWire {
    pub spec: TurnSpec,
    pub vectors: Vec<Vec<f32>>,
}

/// The `k` turns nearest `vector`, after `offset`, among the turns of the contexts it names
/// (`context`, `Id(0)`: none; `name_prefix`, empty: none; `tags`; none of the three: every
/// context of the tenant) with every one of `labels` and, with the flag TYPE_TAG, of
/// `type_tag`. Equal when equal on the wire (`wire_eq`).
#[derive(Clone, Debug)]
pub struct VectorSearchTurns {
    pub index: String,
    pub vector: Vec<f32>,
    pub k: u16,
    pub offset: u16,
    /// `vector_search_flags`.
    pub search_flags: u8,
    pub ef_search: u16,
    pub context: ContextRef,
    pub name_prefix: String,
    pub tags: Vec<(String, String)>,
    pub labels: Vec<(String, String)>,
    pub type_tag: u64,
}

/// Creates an index of the connection's tenant, or answers the one of that name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VectorIndexCreate {
    pub name: String,
    pub dims: u16,
    /// `Metric::code` (1 cosine, 2 inner product, 3 L2); another is the store's to refuse.
    pub metric: u8,
    /// 0: the server's default.
    pub ef_search: u16,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VectorIndexDrop {
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VectorIndexList {}

/// The `k` entries of one context nearest `vector`, after `offset`, among those under
/// `prefix` whose value passes `filter` (JSON; empty: none). Equal when equal on the wire
/// (components compared bit for bit, so a NaN equals itself: `wire_eq`).
#[derive(Clone, Debug)]
pub struct VectorSearch {
    pub context: ContextRef,
    pub index: String,
    pub vector: Vec<f32>,
    pub k: u16,
    pub offset: u16,
    /// `vector_search_flags`.
    pub search_flags: u8,
    pub ef_search: u16,
    pub prefix: Bytes,
    pub filter: Bytes,
}

/// KV_PUT_EX with each entry's vectors, all of `index`, each of `dims` components.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvPutVectors {
    pub context: ContextRef,
    /// `kv_put_flags`.
    pub put_flags: u8,
    pub ttl_ms: u64,
    pub index: String,
    pub dims: u16,
    pub entries: Vec<VectorEntryWire>,
}

/// An entry of KV_PUT_VECTORS: its key, value and vectors (none: stored without any). Equal
/// when equal on the wire (`wire_eq`).
#[derive(Clone, Debug)]
pub struct VectorEntryWire {
    pub key: Bytes,
    pub value: Bytes,
    pub vectors: Vec<Vec<f32>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VectorsResponse {
    VectorIndex(VectorIndexWire),
    VectorIndexDropped(VectorIndexWire),
    VectorIndexes(VectorIndexes),
    VectorHits(VectorHits),
    Stored(Stored),
    TurnsStored(AppendedTurns),
    TurnHits(TurnHits),
}

/// VECTOR_SEARCH_TURNS' answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnHits {
    /// `vector_search_method`.
    pub method: u8,
    /// Vectors compared.
    pub candidates: u32,
    pub hits: Vec<TurnHitWire>,
}

/// A turn hit; equal when equal on the wire (the score bit for bit).
#[derive(Clone, Debug)]
pub struct TurnHitWire {
    pub turn: TurnWire,
    pub score: f32,
}

impl PartialEq for TurnHitWire {
    fn eq(&self, other: &Self) -> bool {
        self.turn == other.turn && self.score.to_bits() == other.score.to_bits()
    }
}

impl Eq for TurnHitWire {}

impl PartialEq for VectorTurnWire {
    fn eq(&self, other: &Self) -> bool {
        self.spec == other.spec
            && self.vectors.len() == other.vectors.len()
            && self
                .vectors
                .iter()
                .zip(&other.vectors)
                .all(|(a, b)| wire_eq(a, b))
    }
}

impl Eq for VectorTurnWire {}

impl PartialEq for VectorSearchTurns {
    fn eq(&self, other: &Self) -> bool {
        self.index == other.index
            && wire_eq(&self.vector, &other.vector)
            && self.k == other.k
            && self.offset == other.offset
            && self.search_flags == other.search_flags
            && self.ef_search == other.ef_search
            && self.context == other.context
            && self.name_prefix == other.name_prefix
            && self.tags == other.tags
            && self.labels == other.labels
            && self.type_tag == other.type_tag
    }
}

impl Eq for VectorSearchTurns {}

/// VECTOR_INDEX_INFO.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VectorIndexWire {
    pub index_id: u32,
    pub dims: u16,
    pub metric: u8,
    pub ef_search: u16,
    pub vectors: u64,
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VectorIndexes {
    pub indexes: Vec<VectorIndexWire>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VectorHits {
    /// `vector_search_method`.
    pub method: u8,
    /// Vectors compared.
    pub candidates: u32,
    pub hits: Vec<VectorHitWire>,
}

/// A hit; equal when equal on the wire (the score bit for bit).
#[derive(Clone, Debug)]
pub struct VectorHitWire {
    pub key: Bytes,
    pub score: f32,
    pub value_hash: BlobHash,
    pub value_len: u32,
}

/// Components equal on the wire: bit for bit, so that equality is an equivalence (a NaN equals
/// the same NaN) and a decoded message equals the one it was encoded from.
fn wire_eq(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits())
}

impl PartialEq for VectorSearch {
    fn eq(&self, other: &Self) -> bool {
        self.context == other.context
            && self.index == other.index
            && wire_eq(&self.vector, &other.vector)
            && self.k == other.k
            && self.offset == other.offset
            && self.search_flags == other.search_flags
            && self.ef_search == other.ef_search
            && self.prefix == other.prefix
            && self.filter == other.filter
    }
}

impl Eq for VectorSearch {}

impl PartialEq for VectorEntryWire {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
            && self.value == other.value
            && self.vectors.len() == other.vectors.len()
            && self
                .vectors
                .iter()
                .zip(&other.vectors)
                .all(|(a, b)| wire_eq(a, b))
    }
}

impl Eq for VectorEntryWire {}

impl PartialEq for VectorHitWire {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
            && self.score.to_bits() == other.score.to_bits()
            && self.value_hash == other.value_hash
            && self.value_len == other.value_len
    }
}

impl Eq for VectorHitWire {}

/// KV_PUT_VECTORS' answer: an empty body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {}

/// Bits of VECTOR_SEARCH's `search_flags`.
pub mod vector_search_flags {
    /// Compare every candidate exactly, never the graph.
    pub const EXACT: u8 = 1;
    pub const KNOWN: u8 = EXACT;
    /// VECTOR_SEARCH_TURNS: only turns of `type_tag`.
    pub const TYPE_TAG: u8 = 1 << 1;
    /// VECTOR_SEARCH_TURNS' known bits.
    pub const TURNS_KNOWN: u8 = EXACT | TYPE_TAG;
}

/// VECTOR_HITS' `method`.
pub mod vector_search_method {
    pub const EXACT: u8 = 0;
    pub const GRAPH: u8 = 1;
}

/// VECTOR_INDEX_INFO's fixed bytes (the name follows).
pub const VECTOR_INDEX_WIRE_BYTES: usize = 20;
/// Most bytes of an index name.
pub const VECTOR_INDEX_NAME_BYTES_LIMIT: u64 = 64;
/// Most hits one answer carries (`k`, and `k + offset`).
pub const VECTOR_HITS_MAX: u64 = 1000;
/// Most indexes a listing answers.
pub const VECTOR_INDEXES_MAX: u64 = 64;
/// A hit at its largest: a 256-byte key and its length, the score, hash and length.
const VECTOR_HIT_BYTES_MAX: u64 = 2 + 256 + 4 + 32 + 4;
/// Most labels a turn search asks for (a turn carries at most 16).
pub const TURN_SEARCH_LABELS_LIMIT: u64 = 16;
/// Most tags a turn search asks for (a context carries at most 32).
pub const TURN_SEARCH_TAGS_LIMIT: u64 = 32;

/// The family's enums under the names the message table uses (`message_table!`).
pub type Requests = VectorsRequest;
pub type Answers = VectorsResponse;

impl VectorsRequest {
    pub fn message_type(&self) -> MessageType {
        match self {
            VectorsRequest::VectorIndexCreate(VectorIndexCreate { .. }) => {
                MessageType::VectorIndexCreate
            }
            VectorsRequest::VectorIndexDrop(VectorIndexDrop { .. }) => MessageType::VectorIndexDrop,
            VectorsRequest::VectorIndexList(VectorIndexList {}) => MessageType::VectorIndexList,
            VectorsRequest::VectorSearch(VectorSearch { .. }) => MessageType::VectorSearch,
            VectorsRequest::KvPutVectors(KvPutVectors { .. }) => MessageType::KvPutVectors,
            VectorsRequest::AppendTurnsVectors(_) => MessageType::AppendTurnsVectors,
            VectorsRequest::VectorSearchTurns(_) => MessageType::VectorSearchTurns,
        }
    }

    /// The largest answer (see `codec/answer.rs`).
    pub fn answer_bytes_max(&self) -> u64 {
        let index = VECTOR_INDEX_WIRE_BYTES as u64 + VECTOR_INDEX_NAME_BYTES_LIMIT;
        match self {
            VectorsRequest::VectorIndexCreate(_) | VectorsRequest::VectorIndexDrop(_) => {
                16 + index + ERROR_ANSWER_BYTES_MAX
            }
            VectorsRequest::VectorIndexList(_) => {
                16 + 2 + VECTOR_INDEXES_MAX * index + ERROR_ANSWER_BYTES_MAX
            }
            VectorsRequest::VectorSearch(search) => {
                let hits = u64::from(search.k).min(VECTOR_HITS_MAX);
                16 + 8 + hits * VECTOR_HIT_BYTES_MAX + ERROR_ANSWER_BYTES_MAX
            }
            VectorsRequest::KvPutVectors(_) => FIXED_ANSWER_BYTES,
            VectorsRequest::AppendTurnsVectors(append) => {
                append.turns.len() as u64 * (TURN_ENTRY_BYTES + 16) + ERROR_ANSWER_BYTES_MAX
            }
            VectorsRequest::VectorSearchTurns(search) => {
                let hits = u64::from(search.k).min(VECTOR_HITS_MAX);
                16 + 8 + hits * (TURN_ENTRY_BYTES + 4) + ERROR_ANSWER_BYTES_MAX
            }
        }
    }

    pub(super) fn read(kind: Kind, cursor: &mut Cursor) -> Result<VectorsRequest, DecodeError> {
        Ok(match kind {
            Kind::VectorIndexCreate => {
                let name = cursor.short_string("index name")?;
                let dims = cursor.u16()?;
                let metric = cursor.u8()?;
                cursor.zero(1, "reserved")?;
                VectorsRequest::VectorIndexCreate(VectorIndexCreate {
                    name,
                    dims,
                    metric,
                    ef_search: cursor.u16()?,
                })
            }
            Kind::VectorIndexDrop => VectorsRequest::VectorIndexDrop(VectorIndexDrop {
                name: cursor.short_string("index name")?,
            }),
            Kind::VectorIndexList => VectorsRequest::VectorIndexList(VectorIndexList {}),
            Kind::VectorSearch => VectorsRequest::VectorSearch(read_search(cursor)?),
            Kind::KvPutVectors => VectorsRequest::KvPutVectors(read_put(cursor)?),
            Kind::AppendTurnsVectors => {
                VectorsRequest::AppendTurnsVectors(read_append_vectors(cursor)?)
            }
            Kind::VectorSearchTurns => VectorsRequest::VectorSearchTurns(read_turn_search(cursor)?),
        })
    }

    /// What the wire cannot carry (`check_request`).
    pub(super) fn check(&self) -> Result<(), EncodeError> {
        match self {
            VectorsRequest::VectorIndexCreate(VectorIndexCreate { name, .. })
            | VectorsRequest::VectorIndexDrop(VectorIndexDrop { name }) => {
                within("index name", name.len(), 0, SHORT, "bytes")
            }
            VectorsRequest::VectorIndexList(_) => Ok(()),
            VectorsRequest::VectorSearch(search) => {
                context(&search.context)?;
                within("index name", search.index.len(), 0, SHORT, "bytes")?;
                within("query", search.vector.len(), 0, SHORT, "components")?;
                within("prefix", search.prefix.len(), 0, SHORT, "bytes")?;
                within(
                    "filter",
                    search.filter.len(),
                    0,
                    u64::from(u32::MAX),
                    "bytes",
                )
            }
            VectorsRequest::KvPutVectors(put) => {
                context(&put.context)?;
                within("index name", put.index.len(), 0, SHORT, "bytes")?;
                within("entries", put.entries.len(), 0, SHORT, "entries")?;
                put.entries.iter().try_for_each(|entry| {
                    within("key", entry.key.len(), 0, SHORT, "bytes")?;
                    within("value", entry.value.len(), 0, u64::from(u32::MAX), "bytes")?;
                    within("vectors", entry.vectors.len(), 0, TINY, "vectors")?;
                    entry.vectors.iter().try_for_each(|vector| {
                        let dims = usize::from(put.dims);
                        within(
                            "vector",
                            vector.len(),
                            dims as u64,
                            dims as u64,
                            "components",
                        )
                    })
                })
            }
            VectorsRequest::AppendTurnsVectors(append) => {
                context(&append.context)?;
                within("index name", append.index.len(), 0, SHORT, "bytes")?;
                within("turns", append.turns.len(), 1, SHORT, "turns")?;
                append.turns.iter().try_for_each(|turn| {
                    check_spec(&turn.spec)?;
                    within("vectors", turn.vectors.len(), 0, TINY, "vectors")?;
                    let dims = u64::from(append.dims);
                    turn.vectors.iter().try_for_each(|vector| {
                        within("vector", vector.len(), dims, dims, "components")
                    })
                })
            }
            VectorsRequest::VectorSearchTurns(search) => check_turn_search(search),
        }
    }

    /// The body (`check` passed).
    pub(super) fn write(&self, w: &mut ChunkWriter) {
        match self {
            VectorsRequest::VectorIndexCreate(create) => {
                w.short(create.name.as_bytes());
                w.u16(create.dims);
                w.u8(create.metric);
                w.zero(1);
                w.u16(create.ef_search);
            }
            VectorsRequest::VectorIndexDrop(drop) => w.short(drop.name.as_bytes()),
            VectorsRequest::VectorIndexList(_) => {}
            VectorsRequest::VectorSearch(search) => {
                w.context_ref(&search.context);
                w.short(search.index.as_bytes());
                w.u16(short_len(search.vector.len()));
                write_vector(w, &search.vector);
                w.u16(search.k);
                w.u16(search.offset);
                w.u8(search.search_flags);
                w.zero(1);
                w.u16(search.ef_search);
                w.short(&search.prefix);
                w.u32(search.filter.len() as u32);
                w.data(&search.filter);
            }
            VectorsRequest::KvPutVectors(put) => {
                w.context_ref(&put.context);
                w.u8(put.put_flags);
                w.u64(put.ttl_ms);
                w.short(put.index.as_bytes());
                w.u16(put.dims);
                w.u16(short_len(put.entries.len()));
                for entry in &put.entries {
                    w.short(&entry.key);
                    w.u32(entry.value.len() as u32);
                    w.data(&entry.value);
                    w.u8(entry.vectors.len() as u8);
                    for vector in &entry.vectors {
                        write_vector(w, vector);
                    }
                }
            }
            VectorsRequest::AppendTurnsVectors(append) => {
                write_turns_target(w, &append.context, append.expected_head);
                w.short(append.index.as_bytes());
                w.u16(append.dims);
                w.u16(short_len(append.turns.len()));
                for turn in &append.turns {
                    w.turn_spec(&turn.spec);
                    w.u8(turn.vectors.len() as u8);
                    for vector in &turn.vectors {
                        write_vector(w, vector);
                    }
                }
            }
            VectorsRequest::VectorSearchTurns(search) => {
                w.short(search.index.as_bytes());
                w.u16(short_len(search.vector.len()));
                write_vector(w, &search.vector);
                w.u16(search.k);
                w.u16(search.offset);
                w.u8(search.search_flags);
                w.zero(1);
                w.u16(search.ef_search);
                w.context_ref(&search.context);
                w.short(search.name_prefix.as_bytes());
                w.tags(&search.tags);
                w.tags(&search.labels);
                w.u64(search.type_tag);
            }
        }
    }
}

/// What the wire cannot carry of a VECTOR_SEARCH_TURNS.
fn check_turn_search(search: &VectorSearchTurns) -> Result<(), EncodeError> {
    if search.context != ContextRef::Id(0) {
        context(&search.context)?;
    }
    within("index name", search.index.len(), 0, SHORT, "bytes")?;
    within("query", search.vector.len(), 0, SHORT, "components")?;
    within("name prefix", search.name_prefix.len(), 0, SHORT, "bytes")?;
    within("tags", search.tags.len(), 0, TURN_SEARCH_TAGS_LIMIT, "tags")?;
    within(
        "labels",
        search.labels.len(),
        0,
        TURN_SEARCH_LABELS_LIMIT,
        "labels",
    )?;
    search
        .tags
        .iter()
        .chain(&search.labels)
        .try_for_each(|(key, value)| {
            within("tag or label key", key.len(), 0, SHORT, "bytes")?;
            within("tag or label value", value.len(), 0, SHORT, "bytes")
        })
}

/// APPEND_TURNS_VECTORS' body: as APPEND_TURNS', with the index and dimension after the
/// expected head, and each TURN_SPEC followed by its vectors.
fn read_append_vectors(cursor: &mut Cursor) -> Result<AppendTurnsVectors, DecodeError> {
    let (context, expected_head) = read_turns_target(cursor)?;
    let index = cursor.short_string("index name")?;
    let dims = cursor.u16()?;
    let count = usize::from(cursor.u16()?);
    if count == 0 {
        return Err(cursor.invalid("count", "no turns"));
    }
    let mut turns = Vec::with_capacity(cursor.list_capacity(count, 28));
    for _ in 0..count {
        let spec = cursor.turn_spec()?;
        let vector_count = usize::from(cursor.u8()?);
        let row_bytes = usize::from(dims) * 4;
        let mut vectors = Vec::with_capacity(cursor.list_capacity(vector_count, row_bytes));
        for _ in 0..vector_count {
            vectors.push(read_vector(cursor, usize::from(dims))?);
        }
        turns.push(VectorTurnWire { spec, vectors });
    }
    Ok(AppendTurnsVectors {
        context,
        expected_head,
        index,
        dims,
        turns,
    })
}

/// VECTOR_SEARCH_TURNS' body.
fn read_turn_search(cursor: &mut Cursor) -> Result<VectorSearchTurns, DecodeError> {
    let index = cursor.short_string("index name")?;
    let dims = usize::from(cursor.u16()?);
    let vector = read_vector(cursor, dims)?;
    let k = cursor.u16()?;
    let offset = cursor.u16()?;
    let search_flags = cursor.flags_u8(vector_search_flags::TURNS_KNOWN, "search_flags")?;
    cursor.zero(1, "reserved")?;
    let ef_search = cursor.u16()?;
    let context = cursor.context_ref()?;
    let name_prefix = cursor.short_string("name prefix")?;
    let tags = cursor.tags()?;
    if tags.len() as u64 > TURN_SEARCH_TAGS_LIMIT {
        return Err(cursor.too_large("tags", tags.len() as u64, TURN_SEARCH_TAGS_LIMIT));
    }
    let labels = cursor.tags()?;
    if labels.len() as u64 > TURN_SEARCH_LABELS_LIMIT {
        return Err(cursor.too_large("labels", labels.len() as u64, TURN_SEARCH_LABELS_LIMIT));
    }
    let type_tag = cursor.u64()?;
    if search_flags & vector_search_flags::TYPE_TAG == 0 && type_tag != 0 {
        return Err(cursor.invalid("type_tag", "set without TYPE_TAG"));
    }
    Ok(VectorSearchTurns {
        index,
        vector,
        k,
        offset,
        search_flags,
        ef_search,
        context,
        name_prefix,
        tags,
        labels,
        type_tag,
    })
}

/// VECTOR_SEARCH's body.
fn read_search(cursor: &mut Cursor) -> Result<VectorSearch, DecodeError> {
    let context = cursor.context_ref()?;
    let index = cursor.short_string("index name")?;
    let dims = usize::from(cursor.u16()?);
    let vector = read_vector(cursor, dims)?;
    let k = cursor.u16()?;
    let offset = cursor.u16()?;
    let search_flags = cursor.flags_u8(vector_search_flags::KNOWN, "search_flags")?;
    cursor.zero(1, "reserved")?;
    let ef_search = cursor.u16()?;
    let prefix = cursor.short_bytes()?;
    let filter_len = cursor.u32()? as usize;
    Ok(VectorSearch {
        context,
        index,
        vector,
        k,
        offset,
        search_flags,
        ef_search,
        prefix,
        filter: cursor.bytes(filter_len)?,
    })
}

/// KV_PUT_VECTORS' body.
fn read_put(cursor: &mut Cursor) -> Result<KvPutVectors, DecodeError> {
    let context = cursor.context_ref()?;
    let put_flags = cursor.flags_u8(kv_put_flags::KNOWN, "put_flags")?;
    let ttl_ms = cursor.u64()?;
    let index = cursor.short_string("index name")?;
    let dims = cursor.u16()?;
    let count = usize::from(cursor.u16()?);
    let mut entries = Vec::with_capacity(cursor.list_capacity(count, 7));
    for _ in 0..count {
        let key = cursor.short_bytes()?;
        let value_len = cursor.u32()? as usize;
        let value = cursor.bytes(value_len)?;
        let vector_count = usize::from(cursor.u8()?);
        let row_bytes = usize::from(dims) * 4;
        let mut vectors = Vec::with_capacity(cursor.list_capacity(vector_count, row_bytes));
        for _ in 0..vector_count {
            vectors.push(read_vector(cursor, usize::from(dims))?);
        }
        entries.push(VectorEntryWire {
            key,
            value,
            vectors,
        });
    }
    Ok(KvPutVectors {
        context,
        put_flags,
        ttl_ms,
        index,
        dims,
        entries,
    })
}

/// `dims` little-endian f32s (the cursor checks they are there before any is kept).
fn read_vector(cursor: &mut Cursor, dims: usize) -> Result<Vec<f32>, DecodeError> {
    let bytes = cursor.take(dims * 4)?;
    let mut reader = ctxstore_vocab::le::LeReader::new(bytes);
    let mut vector = Vec::with_capacity(dims);
    for _ in 0..dims {
        let Ok(component) = reader.f32() else {
            unreachable!("took dims × 4 bytes just above");
        };
        vector.push(component);
    }
    Ok(vector)
}

fn write_vector(w: &mut ChunkWriter, vector: &[f32]) {
    for component in vector {
        w.u32(component.to_bits());
    }
}

impl VectorsResponse {
    /// The request type this answers.
    pub fn message_type(&self) -> MessageType {
        match self {
            VectorsResponse::VectorIndex(_) => MessageType::VectorIndexCreate,
            VectorsResponse::VectorIndexDropped(_) => MessageType::VectorIndexDrop,
            VectorsResponse::VectorIndexes(_) => MessageType::VectorIndexList,
            VectorsResponse::VectorHits(_) => MessageType::VectorSearch,
            VectorsResponse::Stored(_) => MessageType::KvPutVectors,
            VectorsResponse::TurnsStored(_) => MessageType::AppendTurnsVectors,
            VectorsResponse::TurnHits(_) => MessageType::VectorSearchTurns,
        }
    }

    pub(super) fn read(kind: Kind, cursor: &mut Cursor) -> Result<VectorsResponse, DecodeError> {
        Ok(match kind {
            Kind::VectorIndexCreate => VectorsResponse::VectorIndex(read_index(cursor)?),
            Kind::VectorIndexDrop => VectorsResponse::VectorIndexDropped(read_index(cursor)?),
            Kind::VectorIndexList => {
                let count = u64::from(cursor.u16()?);
                if count > VECTOR_INDEXES_MAX {
                    return Err(cursor.too_large("count", count, VECTOR_INDEXES_MAX));
                }
                let mut indexes = Vec::with_capacity(
                    cursor.list_capacity(count as usize, VECTOR_INDEX_WIRE_BYTES),
                );
                for _ in 0..count {
                    indexes.push(read_index(cursor)?);
                }
                VectorsResponse::VectorIndexes(VectorIndexes { indexes })
            }
            Kind::VectorSearch => VectorsResponse::VectorHits(read_hits(cursor)?),
            Kind::KvPutVectors => VectorsResponse::Stored(Stored {}),
            Kind::AppendTurnsVectors => VectorsResponse::TurnsStored(read_appended_turns(cursor)?),
            Kind::VectorSearchTurns => VectorsResponse::TurnHits(read_turn_hits(cursor)?),
        })
    }

    pub(super) fn write(&self, w: &mut ChunkWriter) {
        match self {
            VectorsResponse::VectorIndex(index) | VectorsResponse::VectorIndexDropped(index) => {
                write_index(w, index)
            }
            VectorsResponse::VectorIndexes(VectorIndexes { indexes }) => {
                w.u16(short_len(indexes.len()));
                for index in indexes {
                    write_index(w, index);
                }
            }
            VectorsResponse::VectorHits(hits) => {
                write_hits_head(w, hits.method, hits.candidates, hits.hits.len());
                for hit in &hits.hits {
                    w.short(&hit.key);
                    w.u32(hit.score.to_bits());
                    w.slice(&hit.value_hash.0);
                    w.u32(hit.value_len);
                }
            }
            VectorsResponse::Stored(Stored {}) => {}
            VectorsResponse::TurnsStored(appended) => write_appended_turns(w, appended),
            VectorsResponse::TurnHits(hits) => {
                write_hits_head(w, hits.method, hits.candidates, hits.hits.len());
                for hit in &hits.hits {
                    w.turn(&hit.turn);
                    w.u32(hit.score.to_bits());
                }
            }
        }
    }
}

fn read_turn_hits(cursor: &mut Cursor) -> Result<TurnHits, DecodeError> {
    let (method, candidates, count) = read_hits_head(cursor)?;
    let mut hits = Vec::with_capacity(cursor.list_capacity(count, 92));
    for _ in 0..count {
        let turn = cursor.turn()?;
        let score = f32::from_bits(cursor.u32()?);
        hits.push(TurnHitWire { turn, score });
    }
    Ok(TurnHits {
        method,
        candidates,
        hits,
    })
}

/// What VECTOR_HITS and TURN_HITS begin with: `method u8`, `reserved u8`, `candidates u32`,
/// `count u16` (≤ 1,000).
fn read_hits_head(cursor: &mut Cursor) -> Result<(u8, u32, usize), DecodeError> {
    let method = cursor.u8()?;
    if method > vector_search_method::GRAPH {
        return Err(cursor.invalid("method", "not 0 (exact) or 1 (graph)"));
    }
    cursor.zero(1, "reserved")?;
    let candidates = cursor.u32()?;
    let count = u64::from(cursor.u16()?);
    if count > VECTOR_HITS_MAX {
        return Err(cursor.too_large("count", count, VECTOR_HITS_MAX));
    }
    Ok((method, candidates, count as usize))
}

fn write_hits_head(w: &mut ChunkWriter, method: u8, candidates: u32, count: usize) {
    w.u8(method);
    w.zero(1);
    w.u32(candidates);
    w.u16(short_len(count));
}

fn read_index(cursor: &mut Cursor) -> Result<VectorIndexWire, DecodeError> {
    let index_id = cursor.u32()?;
    let dims = cursor.u16()?;
    let metric = cursor.u8()?;
    cursor.zero(1, "reserved")?;
    let ef_search = cursor.u16()?;
    let vectors = cursor.u64()?;
    let name = cursor.short_string("index name")?;
    Ok(VectorIndexWire {
        index_id,
        dims,
        metric,
        ef_search,
        vectors,
        name,
    })
}

fn write_index(w: &mut ChunkWriter, index: &VectorIndexWire) {
    w.u32(index.index_id);
    w.u16(index.dims);
    w.u8(index.metric);
    w.zero(1);
    w.u16(index.ef_search);
    w.u64(index.vectors);
    w.short(index.name.as_bytes());
}

fn read_hits(cursor: &mut Cursor) -> Result<VectorHits, DecodeError> {
    let (method, candidates, count) = read_hits_head(cursor)?;
    let mut hits = Vec::with_capacity(cursor.list_capacity(count, 42));
    for _ in 0..count {
        let key = cursor.short_bytes()?;
        let score = f32::from_bits(cursor.u32()?);
        hits.push(VectorHitWire {
            key,
            score,
            value_hash: cursor.hash()?,
            value_len: cursor.u32()?,
        });
    }
    Ok(VectorHits {
        method,
        candidates,
        hits,
    })
}
