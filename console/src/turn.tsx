// One turn: where it sits, its key, labels, links (to turns of any context), overlay state
// and payload.
import { type TurnAnswer, type TurnView, get, when } from "./api";
import { Show, useLoad } from "./load";
import { PayloadBox } from "./payload";

export function Labels({ turn }: { turn: TurnView }) {
  return (
    <>
      {Object.entries(turn.labels ?? {}).map(([key, value]) => (
        <span class="tag" key={key}>
          {key}={value}
        </span>
      ))}
    </>
  );
}

export function TurnDetails({ turnId, asOf, onCompare }: { turnId: number; asOf: number | null; onCompare?: () => void }) {
  const loaded = useLoad(
    () => get<TurnAnswer>(`/api/turns/${turnId}`, { as_of: asOf === null ? undefined : String(asOf) }),
    [turnId, asOf],
  );
  return (
    <Show loaded={loaded}>
      {(answer) => {
        const turn = answer.turn;
        return (
          <article class="turn" data-testid="turn" data-turn-id={turn.turn_id}>
            <h2>
              Turn {turn.turn_id}
              {turn.summary && <span class="mark summary">summary</span>}
              {answer.overlay.redacted && <span class="mark redacted">redacted</span>}
              {answer.overlay.patched && <span class="mark patched">patched (overlay {answer.overlay.overlay_seq})</span>}
            </h2>
            <dl>
              <dt>Context</dt>
              <dd>
                <a href={`/contexts/${turn.context_id}?turn=${turn.turn_id}`}>
                  {answer.context?.name ? `@${answer.context.name}` : `context ${turn.context_id}`}
                </a>
              </dd>
              <dt>Parent</dt>
              <dd>{turn.parent_turn_id ? <a href={`/turns/${turn.parent_turn_id}`}>{turn.parent_turn_id}</a> : "— (a root)"}</dd>
              <dt>Depth</dt>
              <dd>{turn.depth}</dd>
              <dt>Key</dt>
              <dd data-testid="turn-key">{turn.key ?? "—"}</dd>
              <dt>Labels</dt>
              <dd>
                <Labels turn={turn} />
              </dd>
              <dt>Links</dt>
              <dd data-testid="links">
                {answer.links.length === 0 && "—"}
                {answer.links.map((link) =>
                  link.missing ? (
                    <span key={link.turn_id}>turn {link.turn_id} (gone)</span>
                  ) : (
                    <a key={link.turn_id} href={`/turns/${link.turn_id}`}>
                      turn {link.turn_id} in {link.context_name ? `@${link.context_name}` : `context ${link.context_id}`}
                    </a>
                  ),
                )}
              </dd>
              <dt>Codec, type</dt>
              <dd>
                {turn.codec}, {turn.type_tag}
              </dd>
              <dt>Payload hash</dt>
              <dd class="hash">{answer.payload_hash}</dd>
              <dt>Appended</dt>
              <dd>{when(turn.created_at_unix_ms)}</dd>
              <dt>Overlays</dt>
              <dd>
                {answer.overlay.redacted
                  ? "redacted: the payload is gone in every view"
                  : answer.overlay.patched
                    ? `patched; this view is overlay ${answer.overlay.overlay_seq}`
                    : "none"}
                {answer.overlay.patched && asOf === null && (
                  <>
                    {" "}
                    <a href={`/turns/${turn.turn_id}?as_of=0`}>as appended</a>
                  </>
                )}
              </dd>
            </dl>
            <p class="actions">
              <a href={`/turns/${turn.turn_id}`}>Open this turn's page</a>
              {onCompare && (
                <button type="button" onClick={onCompare} data-testid="compare-from">
                  Compare with another turn…
                </button>
              )}
            </p>
            <PayloadBox turnId={turn.turn_id} payload={answer.payload} asOf={asOf} />
          </article>
        );
      }}
    </Show>
  );
}
