// The store at a glance: sizes, dedup, garbage collection, replication and failover, and
// small charts of the recent rates (from the server's samples of its counters).
import { useEffect, useState } from "preact/hooks";
import { type StoreAnswer, get, humanBytes } from "../api";
import { Show, useLoad } from "../load";
import { TenantsTable } from "./Usage";

/** Per-second rates of column `column` between neighbouring samples. */
export function rates(samples: number[][], column: number): number[] {
  const out: number[] = [];
  for (let index = 1; index < samples.length; index += 1) {
    const seconds = (samples[index][0] - samples[index - 1][0]) / 1000;
    if (seconds <= 0) continue;
    out.push(Math.max(0, samples[index][column] - samples[index - 1][column]) / seconds);
  }
  return out;
}

function Chart({ title, values, unit }: { title: string; values: number[]; unit: (v: number) => string }) {
  const width = 240;
  const height = 60;
  const max = Math.max(1e-9, ...values);
  const points = values
    .map((value, index) => `${(index / Math.max(1, values.length - 1)) * width},${height - (value / max) * height}`)
    .join(" ");
  const last = values.length > 0 ? values[values.length - 1] : 0;
  return (
    <figure class="chart">
      <figcaption>
        {title}: {unit(last)}/s now, {unit(max === 1e-9 ? 0 : max)}/s peak
      </figcaption>
      <svg viewBox={`0 0 ${width} ${height}`} width={width} height={height} role="img" aria-label={title}>
        {values.length > 1 && <polyline points={points} class="line" />}
      </svg>
    </figure>
  );
}

/** A duration in milliseconds as people read it: "850 ms", "4.0 s", "3 min". */
export function humanMs(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 120_000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.round(ms / 60_000)} min`;
}

/** A latency in microseconds: "850 µs", "12.3 ms", "1.2 s". */
export function humanUs(us: number): string {
  return us < 1000 ? `${Math.round(us)} µs` : humanMs(us / 1000);
}

type Replication = NonNullable<StoreAnswer["replication"]>;

/** Replication and failover (decision 0031): the shipper's state and lag, then ROLE's figures:
 * the role and epoch, the lease, the acknowledgement gate, failovers, remote acknowledgements. */
function ReplicationCards({ replication: r }: { replication: Replication }) {
  const lease = r.lease_ms === 0 ? "none" : `${r.lease_holder || "—"}, renewed ${humanMs(r.lease_age_ms)} ago (of ${humanMs(r.lease_ms)})`;
  const acks = r.remote_acks;
  return (
    <dl class="cards" data-testid="replication">
      <div>
        <dt>Role</dt>
        <dd>
          {r.role.replace("_", " ")}, epoch {r.epoch}
          {r.accepts_writes ? "" : " (takes no writes)"}
        </dd>
      </div>
      <div>
        <dt>Shipping</dt>
        <dd>
          {r.state}, lag {humanMs(r.lag_ms)} ({humanBytes(r.lag_bytes)})
        </dd>
      </div>
      <div>
        <dt>Lease</dt>
        <dd>{lease}</dd>
      </div>
      <div>
        <dt>Acknowledgements</dt>
        <dd>{r.ack_open_ms > 0 ? `open ${humanMs(r.ack_open_ms)} more` : "closed"}</dd>
      </div>
      <div>
        <dt>Failovers</dt>
        <dd>
          {r.failovers}
          {r.failovers > 0 ? `, the last took ${humanMs(r.last_failover_ms)}` : ""}
        </dd>
      </div>
      <div>
        <dt>Remote acks waiting</dt>
        <dd>{acks === null ? "—" : `${acks.waiting} (${acks.total} confirmed, ${acks.unconfirmed} unconfirmed)`}</dd>
      </div>
      <div>
        <dt>Remote ack latency</dt>
        <dd>{acks === null ? "—" : `p50 ${humanUs(acks.p50_us)}, p99 ${humanUs(acks.p99_us)}`}</dd>
      </div>
    </dl>
  );
}

export function StorePage() {
  const [tick, setTick] = useState(0);
  useEffect(() => {
    const timer = window.setInterval(() => setTick((value) => value + 1), 5000);
    return () => window.clearInterval(timer);
  }, []);
  const loaded = useLoad(() => get<StoreAnswer>("/api/store"), [tick]);
  return (
    <section>
      <h1>Store</h1>
      <Show loaded={loaded}>
        {(store) => {
          const column = (name: string) => store.history.columns.indexOf(name);
          const samples = store.history.samples;
          const count = (value: number) => value.toFixed(value < 10 ? 1 : 0);
          return (
            <>
              <dl class="cards" data-testid="store">
                <div>
                  <dt>Turns</dt>
                  <dd>{store.turns}</dd>
                </div>
                <div>
                  <dt>Contexts</dt>
                  <dd>{store.contexts}</dd>
                </div>
                <div>
                  <dt>Blobs</dt>
                  <dd>{store.blobs}</dd>
                </div>
                <div>
                  <dt>Payload bytes written</dt>
                  <dd>{humanBytes(store.logical_bytes)}</dd>
                </div>
                <div>
                  <dt>Bytes stored</dt>
                  <dd>{humanBytes(store.stored_bytes)}</dd>
                </div>
                <div>
                  <dt>Dedup and compression</dt>
                  <dd>{store.dedup_ratio === null ? "—" : `${store.dedup_ratio.toFixed(2)}×`}</dd>
                </div>
                <div>
                  <dt>Dedup hits</dt>
                  <dd>{store.dedup_hits}</dd>
                </div>
                <div>
                  <dt>GC runs</dt>
                  <dd>{store.gc_runs}</dd>
                </div>
                <div>
                  <dt>Reclaimed by GC</dt>
                  <dd>{humanBytes(store.bytes_reclaimed_total)}</dd>
                </div>
                <div>
                  <dt>Replication</dt>
                  <dd>
                    {store.replication
                      ? `${store.replication.role.replace("_", " ")}, ${store.replication.state}, lag ${(store.replication.lag_ms / 1000).toFixed(1)} s (${humanBytes(store.replication.lag_bytes)})`
                      : "off"}
                  </dd>
                </div>
                <div>
                  <dt>State</dt>
                  <dd>{store.read_only ? "READ-ONLY (see the server log)" : "writable"}</dd>
                </div>
                <div>
                  <dt>Server</dt>
                  <dd>
                    {store.version}, up {Math.floor(store.uptime_s / 60)} min
                  </dd>
                </div>
              </dl>
              {store.replication && (
                <>
                  <h2>Replication and failover</h2>
                  <ReplicationCards replication={store.replication} />
                </>
              )}
              <TenantsTable />
              <div class="charts">
                <Chart title="Turns" values={rates(samples, column("turns"))} unit={count} />
                <Chart title="Payload bytes" values={rates(samples, column("logical_bytes"))} unit={humanBytes} />
                <Chart title="Bytes stored" values={rates(samples, column("stored_bytes"))} unit={humanBytes} />
                <Chart title="Dedup hits" values={rates(samples, column("dedup_hits"))} unit={count} />
              </div>
            </>
          );
        }}
      </Show>
    </section>
  );
}
