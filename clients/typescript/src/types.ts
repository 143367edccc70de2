/** The public values of the client: what its calls take and return. */

/** A context: its ContextID or its name (version 2). */
export type ContextLike = number | string;
/** A BlobHash: 32 bytes or 64 hex characters. */
export type HashLike = Uint8Array | string;
/** A key-value key or turn key: bytes, or a string (its UTF-8). */
export type KeyLike = Uint8Array | string;
/** Where a turn of APPEND_TURNS hangs: the turn before it (undefined: the head for the first),
 * a new root, or a TurnID the context owns. */
export type ParentLike = undefined | "root" | number;
/** Decision 0015: whether RAW payloads from a loopback server are hashed too. */
export type VerifyPayloads = "when_remote" | "always";
/** When the server acknowledges a write (protocol version 4, decision 0031 §11): `local` once
 * it is durable on the server's disk, `remote` once the object store holds it too (a server
 * without `--replicate-to` refuses it: InvalidArgument, nothing written). Not given: the
 * server's `--ack-after`. A remote write the object store does not confirm in time rejects
 * with Unconfirmed: durable on the server but not confirmed off-host; retry it with the same
 * idempotency key. Refused before sending on a server of version 3 (NotSupported). */
export type Durability = "local" | "remote";
/** Whether a client gives appends without a key one of its own (decision 0031 §11; the
 * option `idempotency`): `off` (the default) sends a turn with the key its caller gave, or
 * none; `auto` gives every turn of `append`, `appendByHash` and `appendTurns` that has no key
 * a fresh one (`ctxstore-auto:` and 32 random hex digits), made once per call, so that a client
 * of several addresses sends the append again with the same key on the new primary after a
 * failover and it lands exactly once instead of rejecting with OutcomeUnknownError (such a
 * retry may answer `existing`: the call's own first write). The key is part of the turn:
 * stored, visible, unique in its context. On a version-1 connection appends go as they are. */
export type Idempotency = "off" | "auto";

/** What HELLO told: the negotiated version, the server's name and limits. */
export interface ServerInfo {
  version: number;
  serverName: string;
  frameBytesMax: number;
  requestsInFlightMax: number;
  blobBytesMax: number;
  readTurnsMax: number;
  hasBlobsMax: number;
}

export interface ContextHead {
  contextId: number;
  /** 0: the context is empty. */
  headTurnId: number;
  headDepth: number;
}

/** A turn. `payload` is set when the read asked for payloads; `redacted` and `overlaySeq`
 * when it was read in an overlay view (`asOf`). */
export interface Turn {
  turnId: number;
  /** 0: a root turn. */
  parentTurnId: number;
  /** The context it was appended to. */
  contextId: number;
  depth: number;
  codec: number;
  /** The caller's u64 tag. */
  typeTag: bigint;
  payloadHash: Uint8Array;
  payloadLen: number;
  /** Bit 0: SUMMARY (version 2). */
  flags: number;
  createdAtUnixMs: number;
  payload?: Uint8Array;
  redacted?: boolean;
  overlaySeq?: number;
}

/** A turn with its extras (version 2): key, labels, links. */
export interface TurnInfo extends Turn {
  key?: Uint8Array;
  labels: Record<string, string>;
  links: number[];
}

export interface Appended {
  turn: Turn;
  /** The payload was stored before this call (nothing new was written for it). */
  deduped: boolean;
  /** APPEND_TURNS: a turn with this key existed already; it is that turn, nothing was
   * written. */
  existing: boolean;
}

/** A page of a chain, oldest first. */
export interface Page<T extends Turn = Turn> {
  turns: T[];
  /** Pass as `before` for the next older page; 0 when the root was reached. */
  nextBefore: number;
  tipDepth: number;
}

export interface LogCursor {
  readonly phase: number;
  readonly next: number;
}

/** A TURN_LOG page, newest first; `nextCursor` undefined: the log is exhausted. */
export interface LogPage {
  turns: TurnInfo[];
  nextCursor: LogCursor | undefined;
}

/** A FIND_TURNS page, newest first; `nextBefore` undefined: no more. */
export interface FoundPage {
  turns: TurnInfo[];
  nextBefore: number | undefined;
}

export interface ContextInfo {
  contextId: number;
  headTurnId: number;
  headDepth: number;
  createdAtUnixMs: number;
  /** The newest head move, tag or key-value change. */
  updatedAtUnixMs: number;
  name: string | undefined;
  tags: Record<string, string>;
}

export interface Opened {
  info: ContextInfo;
  /** This call created it (else GET_OR_CREATE found it). */
  created: boolean;
}

export interface ContextPage {
  contexts: ContextInfo[];
  nextCursor: number | string | undefined;
}

export interface KvItem {
  key: Uint8Array;
  valueHash: Uint8Array;
  valueLen: number;
  /** Milliseconds the entry lives after its put or last refresh (version 3, with `withTtl`
   * or `refresh`; 0: for ever; absent: not asked). */
  ttlMs?: number;
  /** When it expires (unix ms; 0: never; absent: not asked). */
  expiresAtUnixMs?: number;
}

/** A key-value entry with its value (`kvGetEntry`, version 3). */
export interface KvValue {
  value: Uint8Array;
  valueHash: Uint8Array;
  /** Milliseconds the entry lives after its put or last refresh (0: for ever). */
  ttlMs: number;
  /** When it expires (unix ms; 0: never), after the refresh if one was asked. */
  expiresAtUnixMs: number;
}

export interface KvPage {
  items: KvItem[];
  /** Pass as `after` for the next page; undefined: the listing is complete. */
  nextAfter: Uint8Array | undefined;
}

/** A vector index's metric (protocol version 6, decision 0033). Every score is higher for
 * nearer, as LangGraph's PostgresStore scores: `cosine` the cosine similarity (1 − the cosine
 * distance; a zero vector scores 0), `inner_product` the dot product, `l2` minus the Euclidean
 * distance. */
export type VectorMetricName = "cosine" | "inner_product" | "l2";

/** A vector index (protocol version 6, decision 0033): a named space of the connection's
 * tenant, of one dimension and metric. */
export interface VectorIndex {
  name: string;
  /** The tenant's id of the index: a name dropped and created again gets a new one. */
  indexId: number;
  dims: number;
  metric: VectorMetricName;
  /** The graph's search breadth (the server's default is 128). */
  efSearch: number;
  /** Live vectors in it now. */
  vectors: number;
}

/** A vector, as a put or a search takes it: numbers (an array or a Float32Array), each finite
 * as an f32. */
export type VectorLike = ArrayLike<number>;

/** An entry of `kvPutVectors`: its key, value and vectors (up to 64; none: stored without
 * any, an overwrite dropping the old ones). */
export interface VectorEntry {
  key: KeyLike;
  value: Uint8Array;
  vectors?: readonly VectorLike[];
}

/** A hit of `vectorSearch`: the entry's key, the score of its best vector (higher is nearer),
 * its value's hash and length (the value itself: `kvGet`, or `getBlob` of the hash). */
export interface VectorHit {
  key: Uint8Array;
  score: number;
  valueHash: Uint8Array;
  valueLen: number;
}

/** What `vectorSearch` found: the hits best first (equal scores in key order), exactly `k`
 * whenever `k + offset` entries or more pass; how the server searched (`exact`: every
 * candidate compared; `graph`: the index's graph) and how many vectors it compared. */
export interface VectorSearchResult {
  method: "exact" | "graph";
  candidates: number;
  hits: VectorHit[];
}

/** A turn of `appendTurnsVectors` (protocol version 7): what `appendTurns` takes, and the
 * turn's vectors (up to 16, of the index's dimension; none: appended without any). They live as
 * long as the turn: a redaction, its context's deletion or a prune below it takes them. */
export interface VectorTurnSpec extends TurnSpec {
  vectors?: readonly VectorLike[];
}

/** A hit of `vectorSearchTurns`: the turn and the score of its best vector (higher is
 * nearer). */
export interface TurnHit {
  turn: Turn;
  score: number;
}

/** What `vectorSearchTurns` found (protocol version 7): the hits best first (equal scores in
 * TurnID order), exactly `k` whenever `k + offset` turns or more pass; how the server searched
 * (`exact` true, `method` `exact`: every candidate compared; else the index's graph) and how
 * many vectors it compared. */
export interface TurnSearchResult {
  exact: boolean;
  method: "exact" | "graph";
  candidates: number;
  hits: TurnHit[];
}

export interface Retention {
  info: ContextInfo;
  /** Turns below it are not read through the context (0: all). */
  floorDepth: number;
  /** The context's own time to live; undefined: none. */
  ttlMs: number | undefined;
}

export interface Stats {
  turns: number;
  contexts: number;
  blobs: number;
  logicalBytes: number;
  uniqueBytes: number;
  storedBytes: number;
  dedupHits: number;
  connections: number;
  requestsTotal: number;
  errorsTotal: number;
  uptimeMs: number;
  readOnly: boolean;
  /** The garbage collector's (STATS_EX); undefined from a server without it. */
  liveBytes?: number;
  deadBytes?: number;
  gcRuns?: number;
  bytesReclaimedTotal?: number;
}

/** This server's side of its replica (REPLICATION_STATS, protocol version 3, issue 31): the
 * fields as docs/operations.md ("Replication in `ctxstore stats`") describes them. A server
 * that does not replicate has role and state "off" and zeros. */
export interface ReplicationStats {
  role: "off" | "primary" | "standby";
  state: "off" | "shipping" | "failing" | "fenced" | "stopped" | "following" | "stalled" | "waiting";
  /** Why the state is failing, fenced or stalled (the last error), or what a waiting standby waits for; else empty. */
  reason: string;
  /** A standby that found its promote request is becoming the primary. */
  promoting: boolean;
  /** The replica's URL, without credentials. */
  target: string;
  /** A standby: the primary it names; a fenced primary: who took the prefix. */
  primary: string;
  epoch: number;
  generation: number;
  /** The last segment shipped (or applied). */
  seq: number;
  /** The record id of the last turn record shipped (or applied). */
  records: number;
  /** When the cut holding them was taken on the primary (0: none yet). */
  recordsUnixMs: number;
  lagMs: number;
  /** Bytes durable but not shipped (a standby: listed, not applied): the backlog's bytes. */
  lagBytes: number;
  objectsTotal: number;
  bytesTotal: number;
  lastSuccessUnixMs: number;
  backlogObjects: number;
  /** The backlog's only bound: it ships in segments of at most this many bytes. */
  segmentBytesMax: number;
  /** Failed cycles (or polls) by kind since the server started, every kind listed. */
  failures: Record<string, number>;
}

/** What this server is in its replica's failover now (ROLE, protocol version 4, decision 0031).
 * A lease figure of 0 means no lease; an empty text, unknown. */
export interface Role {
  role: "off" | "primary" | "standby" | "fenced" | "lapsed" | "taking_over" | "rejoining";
  /** Whether a write sent here now would be taken. */
  acceptsWrites: boolean;
  /** When a write that does not say is acknowledged. */
  ackAfter: "local" | "remote";
  /** The epoch this primary took (a standby: the newest it knows); 0 without a replica. */
  epoch: number;
  leaseMs: number;
  /** Since the lease holder's last renewal, as this server knows it. */
  leaseAgeMs: number;
  /** A primary: how long its acknowledgements stay open without another renewal. */
  ackOpenMs: number;
  failovers: number;
  lastFailoverMs: number;
  /** Writes waiting for a remote acknowledgement now. */
  remoteWaiting: number;
  remoteAcksTotal: number;
  remoteUnconfirmedTotal: number;
  remoteAckUsP50: number;
  remoteAckUsP99: number;
  /** Where writes go: the primary's HOST:PORT (empty: unknown). */
  primary: string;
  /** Who holds the lease, `host:pid` (empty: unknown, or no lease). */
  holder: string;
}

/** One tenant of the server as its operator sees it (TENANT_LIST, protocol version 5, decision
 * 0032 §8): who it is, what it may do, what it uses, its quotas and how often they refused it.
 * A quota of undefined is no limit. */
export interface Tenant {
  name: string;
  /** Its TenantId; undefined while the store has not registered the name (a standby that has
   * not seen its record yet). */
  tenantId: number | undefined;
  /** The tenants file in force names it (a tenant removed from the file keeps its data and is
   * listed without it). */
  inTenantsFile: boolean;
  /** The store has its tenant record. */
  registered: boolean;
  /** Deleted (`deleteTenant`, TENANT_DELETE): its contexts are gone, its tokens refused, its
   * name and id never given again. */
  deleted: boolean;
  /** Its tokens' rights (none when not in the file). */
  rights: Array<"read" | "write" | "admin">;
  /** Live contexts. */
  contexts: number;
  streamsOpen: number;
  /** Its blobs' records in the packs (what `quotaBytes` counts). */
  storedBytes: number;
  /** Open now, over every core of the server. */
  connections: number;
  quotaBytes: number | undefined;
  quotaContexts: number | undefined;
  quotaAppendsPerS: number | undefined;
  quotaConnections: number | undefined;
  quotaStreams: number | undefined;
  /** QUOTA_EXCEEDED answers since the server started. */
  quotaRefusals: number;
}

/** What deleting a tenant did (TENANT_DELETE, protocol version 5, decision 0032 §6): its
 * contexts are deleted and its tokens refused from then on, whatever the flags say. */
export interface TenantDeleted {
  /** The deleted tenant's TenantId (the same each time the name is deleted again). */
  tenantId: number;
  /** The store seals payloads and the tenant's keys are destroyed in its keyring: what it
   * stored opens nowhere any more (false on a store that does not seal). */
  keysDestroyed: boolean;
  /** The server replicates and the object store holds the deletion, so no restore brings the
   * tenant back (false on a server that does not replicate). */
  replicaUpdated: boolean;
}

/** A new version of a tenant's data key (TENANT_ROTATE_KEY, protocol version 5, decision 0032
 * §7), durable in the store's keyring: the tenant's new payloads are sealed under it, what it
 * stored before keeps its version and reads as before. */
export interface TenantKeyRotated {
  /** The tenant's TenantId (0: the operator's own data key). */
  tenantId: number;
  /** The new version, 1 or more (a tenant's first key is version 0). */
  keyVersion: number;
}

export interface GcReport {
  turnsDead: number;
  blobsDead: number;
  bytesReclaimed: number;
  packsCompacted: number;
  liveBytes: number;
  deadBytes: number;
  durationMs: number;
}

export interface BackupReport {
  dir: string;
  turns: number;
  blobs: number;
  bytes: number;
  linkedBytes: number;
  durationMs: number;
}

export interface Patched {
  turnId: number;
  overlaySeq: number;
  payloadHash: Uint8Array;
  payloadLen: number;
}

export interface Redacted {
  turnId: number;
  overlaySeq: number;
}

export interface Purged {
  payloadHash: Uint8Array;
  turnsRedacted: number;
  overlaySeq: number;
}

export interface ChunkedStored {
  payloadHash: Uint8Array;
  payloadLen: number;
  /** Stored before this request; nothing new was written. */
  alreadyStored: boolean;
}

/** One turn of `appendTurns`: a payload (bytes) or the hash of a stored blob, and where and
 * how it hangs. */
export interface TurnSpec {
  payload?: Uint8Array;
  payloadHash?: HashLike;
  parent?: ParentLike;
  typeTag?: number | bigint;
  codec?: number;
  /** Unique within the context; a retry of a turn with a key answers the earlier turn. */
  key?: KeyLike;
  labels?: Record<string, string>;
  links?: number[];
  /** Everything before this turn is summarised in its payload (WINDOW reads start here). */
  summary?: boolean;
}
