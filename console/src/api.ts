// The console's JSON API (docs/console-api.md), typed. Every call goes to the same origin;
// a 401 sends the browser to the login form.

export interface ContextView {
  context_id: number;
  name: string | null;
  tags: Record<string, string>;
  head_turn_id: number;
  head_depth: number;
  created_at_unix_ms: number;
  updated_at_unix_ms: number;
  floor_depth: number;
  ttl_ms: number;
}

export interface TurnView {
  turn_id: number;
  parent_turn_id: number;
  context_id: number;
  depth: number;
  type_tag: number;
  codec: string;
  payload_len: number;
  created_at_unix_ms: number;
  summary?: boolean;
  redacted?: boolean;
  overlay_seq?: number;
  key?: string;
  labels?: Record<string, string>;
  links?: number[];
}

export interface HeadMark {
  context_id: number;
  name: string | null;
  head_turn_id: number;
}

export interface TreeAnswer {
  context: ContextView;
  nodes: TurnView[];
  truncated: boolean;
  heads: HeadMark[];
}

export interface PayloadView {
  kind: "json" | "text" | "image" | "binary" | "empty";
  bytes: number;
  shown_bytes: number;
  truncated: boolean;
  text?: string;
  base64?: string;
  media_type?: string;
}

export interface TurnAnswer {
  turn: TurnView;
  payload_hash: string;
  context: ContextView | null;
  links: { turn_id: number; context_id?: number; context_name?: string | null; missing?: boolean }[];
  overlay: { redacted: boolean; patched: boolean; overlay_seq: number; as_of: number | null };
  payload: PayloadView;
}

export interface ContextsAnswer {
  contexts: ContextView[];
  next_cursor: string | null;
  scanned: number;
  truncated: boolean;
}

export interface FindAnswer {
  turns: TurnView[];
  next_before: number | null;
}

export interface StoreAnswer {
  version: string;
  now_unix_ms: number;
  uptime_s: number;
  turns: number;
  contexts: number;
  blobs: number;
  logical_bytes: number;
  unique_bytes: number;
  stored_bytes: number;
  dedup_hits: number;
  dedup_ratio: number | null;
  chunked_blobs: number;
  read_only: boolean;
  gc_runs: number;
  bytes_reclaimed_total: number;
  live_bytes: number;
  dead_bytes: number;
  replication: null | {
    state: string;
    lag_ms: number;
    lag_bytes: number;
    last_success_unix_ms: number;
    generation: number;
    objects_total: number;
    bytes_total: number;
    /** ROLE's figures (decision 0031): off, primary, standby, fenced, taking_over. */
    role: string;
    accepts_writes: boolean;
    epoch: number;
    /** The lease's holder ("" without a lease), its length and the time since its renewal. */
    lease_holder: string;
    lease_ms: number;
    lease_age_ms: number;
    /** How long acknowledgements stay open without another shipped cut (0: closed). */
    ack_open_ms: number;
    failovers: number;
    last_failover_ms: number;
    /** Remote acknowledgements: null when the console has no figures of them. */
    remote_acks: null | {
      waiting: number;
      total: number;
      unconfirmed: number;
      p50_us: number;
      p99_us: number;
    };
  };
  history: { columns: string[]; samples: number[][] };
}

/** `GET /api/me`: whose console this is: the operator's (the store), or a tenant's (its own
 * data only, decision 0032 §2). */
export type MeAnswer = { viewer: "operator" } | { viewer: "tenant"; tenant: string; tenant_id: number };

/** One tenant's usage, quotas (null: none) and refusals, as `ctxstore tenant list --json`. */
export interface TenantUsage {
  name: string;
  tenant_id: number | null;
  in_tenants_file: boolean;
  deleted: boolean;
  rights: string[];
  contexts: number;
  streams_open: number;
  stored_bytes: number;
  connections: number;
  quota_bytes: number | null;
  quota_contexts: number | null;
  quota_appends_per_s: number | null;
  quota_connections: number | null;
  quota_streams: number | null;
  quota_refusals: number;
}

/** `GET /api/tenants`: every tenant for the operator, its own entry for a tenant. */
export interface TenantsAnswer {
  tenants: TenantUsage[];
}

/** An API error: the HTTP status and the server's typed error. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export async function get<T>(path: string, params?: Record<string, string | string[] | undefined>): Promise<T> {
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(params ?? {})) {
    if (value === undefined) continue;
    for (const one of Array.isArray(value) ? value : [value]) query.append(name, one);
  }
  const url = query.size > 0 ? `${path}?${query}` : path;
  const response = await fetch(url, { headers: { Accept: "application/json" } });
  if (response.status === 401) {
    window.location.assign("/login");
    throw new ApiError(401, "UNAUTHORIZED", "log in first");
  }
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    const error = body?.error ?? {};
    throw new ApiError(response.status, error.code ?? "HTTP", error.message ?? response.statusText);
  }
  return body as T;
}

export function humanBytes(bytes: number): string {
  const units = ["KiB", "MiB", "GiB", "TiB"];
  if (bytes < 1024) return `${Math.round(bytes)} B`;
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit + 1 < units.length) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(1)} ${units[unit]}`;
}

export function when(unixMs: number): string {
  if (!unixMs) return "—";
  return new Date(unixMs).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}
