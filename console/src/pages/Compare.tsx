// Two turns side by side: a line diff of their payloads (JSON pretty-printed first).
import { diffLines } from "diff";
import { type TurnAnswer, get } from "../api";
import { Show, useLoad } from "../load";
import { payloadText } from "../payload";
import { NotFound } from "./NotFound";

export function ComparePage({ left, right }: { left: string; right: string }) {
  const ids = [Number(left), Number(right)];
  const valid = ids.every((id) => Number.isSafeInteger(id) && id > 0);
  const loaded = useLoad(
    () => (valid ? Promise.all(ids.map((id) => get<TurnAnswer>(`/api/turns/${id}`))) : Promise.resolve([])),
    [left, right],
  );
  if (!valid) return <NotFound what="Compare two TurnIDs: /compare/A/B." />;
  return (
    <section>
      <h1>
        Turn <a href={`/turns/${left}`}>{left}</a> → turn <a href={`/turns/${right}`}>{right}</a>
      </h1>
      <Show loaded={loaded}>
        {([a, b]) => {
          const before = payloadText(a.payload) ?? `(${a.payload.kind}, ${a.payload.bytes} bytes)`;
          const after = payloadText(b.payload) ?? `(${b.payload.kind}, ${b.payload.bytes} bytes)`;
          const parts = diffLines(before, after);
          return (
            <>
              {(a.payload.truncated || b.payload.truncated) && (
                <p class="note">A payload is truncated: the diff covers what is shown of it.</p>
              )}
              {before === after && <p class="note">The payloads are the same.</p>}
              <pre class="diff" data-testid="diff">
                {parts.map((part, index) => (
                  <span key={index} class={part.added ? "added" : part.removed ? "removed" : "same"}>
                    {part.value
                      .replace(/\n$/, "")
                      .split("\n")
                      .map((line) => `${part.added ? "+ " : part.removed ? "- " : "  "}${line}\n`)
                      .join("")}
                  </span>
                ))}
              </pre>
            </>
          );
        }}
      </Show>
    </section>
  );
}
