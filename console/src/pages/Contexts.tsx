// The first page: contexts by name prefix and tags, newest update first, paged.
import { useState } from "preact/hooks";
import { type ContextsAnswer, get, when } from "../api";
import { Show, useLoad } from "../load";
import { navigate } from "../router";

export function ContextsPage({ query }: { query: URLSearchParams }) {
  const prefix = query.get("name_prefix") ?? "";
  const tags = query.getAll("tag");
  const cursor = query.get("cursor") ?? undefined;
  const [prefixInput, setPrefixInput] = useState(prefix);
  const [tagsInput, setTagsInput] = useState(tags.join(" "));
  const loaded = useLoad(
    () => get<ContextsAnswer>("/api/contexts", { name_prefix: prefix || undefined, tag: tags, cursor }),
    [query.toString()],
  );
  const search = (event: Event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    if (prefixInput.trim()) next.set("name_prefix", prefixInput.trim());
    for (const tag of tagsInput.split(/\s+/).filter(Boolean)) next.append("tag", tag);
    navigate(next.size > 0 ? `/?${next}` : "/");
  };
  const firstPage = () => {
    const params = new URLSearchParams(query);
    params.delete("cursor");
    return params.size > 0 ? `/?${params}` : "/";
  };
  const pageAfter = (next: string) => {
    const params = new URLSearchParams(query);
    params.set("cursor", next);
    return `/?${params}`;
  };
  return (
    <section>
      <h1>Contexts</h1>
      <form class="search" onSubmit={search} data-testid="contexts-search">
        <label>
          Name starts with
          <input name="name_prefix" value={prefixInput} onInput={(e) => setPrefixInput(e.currentTarget.value)} />
        </label>
        <label>
          Tags (KEY=VALUE …)
          <input name="tags" value={tagsInput} onInput={(e) => setTagsInput(e.currentTarget.value)} />
        </label>
        <button type="submit">Search</button>
      </form>
      <Show loaded={loaded}>
        {(answer) => (
          <>
            {answer.truncated && (
              <p class="note">Only the first {answer.scanned} matching contexts were looked at; narrow the search.</p>
            )}
            <table class="list" data-testid="contexts">
              <thead>
                <tr>
                  <th>Name</th>
                  <th>ContextID</th>
                  <th>Head</th>
                  <th>Depth</th>
                  <th>Tags</th>
                  <th>Updated</th>
                </tr>
              </thead>
              <tbody>
                {answer.contexts.map((context) => (
                  <tr key={context.context_id}>
                    <td>
                      <a href={`/contexts/${context.context_id}`}>{context.name ?? `context ${context.context_id}`}</a>
                    </td>
                    <td>{context.context_id}</td>
                    <td>{context.head_turn_id || "—"}</td>
                    <td>{context.head_depth}</td>
                    <td>
                      {Object.entries(context.tags).map(([key, value]) => (
                        <span class="tag" key={key}>
                          {key}={value}
                        </span>
                      ))}
                    </td>
                    <td>{when(context.updated_at_unix_ms)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
            {answer.contexts.length === 0 && <p class="note">No context matches.</p>}
            <p class="pager">
              {cursor && <a href={firstPage()}>First page</a>}
              {answer.next_cursor && <a href={pageAfter(answer.next_cursor)}>Next page</a>}
            </p>
          </>
        )}
      </Show>
    </section>
  );
}
