// Tenants' usage (decision 0032 §3, §8): a tenant's console shows its own usage against its
// quotas in place of the store's figures (which count every tenant's data and are the
// operator's); the operator's store page lists every tenant.
import { type TenantUsage, type TenantsAnswer, get, humanBytes } from "../api";
import { Show, useLoad } from "../load";

/** `used`, or `used of limit` where the tenant has that quota. */
function ofLimit(used: string, limit: number | null, shown: (value: number) => string): string {
  return limit === null ? used : `${used} of ${shown(limit)}`;
}

const count = (value: number) => String(value);

/** One tenant's usage as cards. */
function UsageCards({ tenant }: { tenant: TenantUsage }) {
  return (
    <dl class="cards" data-testid="usage">
      <div>
        <dt>Tenant</dt>
        <dd>
          {tenant.name} (id {tenant.tenant_id ?? "—"})
        </dd>
      </div>
      <div>
        <dt>Rights</dt>
        <dd>{tenant.rights.join(", ") || "none"}</dd>
      </div>
      <div>
        <dt>Contexts</dt>
        <dd>{ofLimit(count(tenant.contexts), tenant.quota_contexts, count)}</dd>
      </div>
      <div>
        <dt>Open streams</dt>
        <dd>{ofLimit(count(tenant.streams_open), tenant.quota_streams, count)}</dd>
      </div>
      <div>
        <dt>Bytes stored</dt>
        <dd>{ofLimit(humanBytes(tenant.stored_bytes), tenant.quota_bytes, humanBytes)}</dd>
      </div>
      <div>
        <dt>Connections</dt>
        <dd>{ofLimit(count(tenant.connections), tenant.quota_connections, count)}</dd>
      </div>
      <div>
        <dt>Appends per second</dt>
        <dd>{tenant.quota_appends_per_s === null ? "no limit" : `at most ${tenant.quota_appends_per_s}`}</dd>
      </div>
      <div>
        <dt>Refused by a quota</dt>
        <dd>{tenant.quota_refusals}</dd>
      </div>
    </dl>
  );
}

/** A tenant's own page: its usage and quotas. */
export function UsagePage({ tenant }: { tenant: string }) {
  const loaded = useLoad(() => get<TenantsAnswer>("/api/tenants"), []);
  return (
    <section>
      <h1>Usage of {tenant}</h1>
      <Show loaded={loaded}>
        {(answer) =>
          answer.tenants.length === 1 ? (
            <UsageCards tenant={answer.tenants[0]} />
          ) : (
            <p class="error" role="alert">
              The server listed {answer.tenants.length} tenants for this session; expected its own alone.
            </p>
          )
        }
      </Show>
    </section>
  );
}

/** The operator's table of every tenant (none without a tenants file: nothing drawn). */
export function TenantsTable() {
  const loaded = useLoad(() => get<TenantsAnswer>("/api/tenants"), []);
  if (loaded.state !== "done" || loaded.value.tenants.length === 0) return null;
  return (
    <>
      <h2>Tenants</h2>
      <table class="list" data-testid="tenants">
        <thead>
          <tr>
            <th>Name</th>
            <th>Id</th>
            <th>Contexts</th>
            <th>Open streams</th>
            <th>Bytes stored</th>
            <th>Connections</th>
            <th>Refusals</th>
            <th>State</th>
          </tr>
        </thead>
        <tbody>
          {loaded.value.tenants.map((tenant) => (
            <tr key={tenant.name}>
              <td>{tenant.name}</td>
              <td>{tenant.tenant_id ?? "—"}</td>
              <td>{ofLimit(count(tenant.contexts), tenant.quota_contexts, count)}</td>
              <td>{ofLimit(count(tenant.streams_open), tenant.quota_streams, count)}</td>
              <td>{ofLimit(humanBytes(tenant.stored_bytes), tenant.quota_bytes, humanBytes)}</td>
              <td>{ofLimit(count(tenant.connections), tenant.quota_connections, count)}</td>
              <td>{tenant.quota_refusals}</td>
              <td>{tenant.deleted ? "deleted" : tenant.in_tenants_file ? "active" : "not in the tenants file"}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </>
  );
}
