// The store-wide find: turns of every context carrying the given labels, newest first.
import { useState } from "preact/hooks";
import { type FindAnswer, get, when } from "../api";
import { Show, useLoad } from "../load";
import { navigate } from "../router";
import { Labels } from "../turn";

export function FindPage({ query }: { query: URLSearchParams }) {
  const labels = query.getAll("label");
  const before = query.get("before") ?? undefined;
  const [input, setInput] = useState(labels.join(" "));
  const loaded = useLoad(
    () => (labels.length > 0 ? get<FindAnswer>("/api/find", { label: labels, before }) : Promise.resolve(null)),
    [query.toString()],
  );
  const search = (event: Event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    for (const label of input.split(/\s+/).filter(Boolean)) next.append("label", label);
    navigate(`/find?${next}`);
  };
  return (
    <section>
      <h1>Find turns by label</h1>
      <form class="search" onSubmit={search} data-testid="find-search">
        <label>
          Labels (KEY=VALUE …; the first indexed key — run_id, thread_id, idx.* — is looked up)
          <input name="labels" value={input} onInput={(e) => setInput(e.currentTarget.value)} placeholder="run_id=r42" />
        </label>
        <button type="submit">Find</button>
      </form>
      <Show loaded={loaded}>
        {(answer) =>
          answer && (
            <>
              <table class="list" data-testid="found">
                <thead>
                  <tr>
                    <th>Turn</th>
                    <th>Context</th>
                    <th>Key</th>
                    <th>Labels</th>
                    <th>Appended</th>
                  </tr>
                </thead>
                <tbody>
                  {answer.turns.map((turn) => (
                    <tr key={turn.turn_id}>
                      <td>
                        <a href={`/turns/${turn.turn_id}`}>{turn.turn_id}</a>
                      </td>
                      <td>
                        <a href={`/contexts/${turn.context_id}?turn=${turn.turn_id}`}>context {turn.context_id}</a>
                      </td>
                      <td>{turn.key ?? "—"}</td>
                      <td>
                        <Labels turn={turn} />
                      </td>
                      <td>{when(turn.created_at_unix_ms)}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
              {answer.turns.length === 0 && <p class="note">No turn carries these labels.</p>}
              {answer.next_before !== null && (
                <p class="pager">
                  <a href={`/find?${new URLSearchParams([...labels.map((l) => ["label", l]), ["before", String(answer.next_before)]])}`}>
                    Next page
                  </a>
                </p>
              )}
            </>
          )
        }
      </Show>
    </section>
  );
}
