// One context: its branch tree as a graph (zoom and pan; long linear runs folded, unfolded
// by a click; only what is in view is drawn), the heads that point into it, and the turn a
// click selects. Two turns can be compared.
import { select } from "d3-selection";
import { type ZoomTransform, zoom, zoomIdentity } from "d3-zoom";
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { type HeadMark, type TreeAnswer, get } from "../api";
import { Show, useLoad } from "../load";
import { navigate } from "../router";
import { type Placed, NODE_WIDTH, drawTree, forestOf, layOut, visible } from "../tree";
import { TurnDetails } from "../turn";

export function ContextPage({ reference, selected }: { reference: string; selected: number | null }) {
  const loaded = useLoad(() => get<TreeAnswer>(`/api/contexts/${encodeURIComponent(reference)}/tree`), [reference]);
  return <Show loaded={loaded}>{(answer) => <ContextView answer={answer} reference={reference} initial={selected} />}</Show>;
}

function headLabel(head: HeadMark) {
  return head.name ? `@${head.name}` : `context ${head.context_id}`;
}

function ContextView({ answer, reference, initial }: { answer: TreeAnswer; reference: string; initial: number | null }) {
  const context = answer.context;
  const [selected, setSelected] = useState<number | null>(initial);
  const [compareFrom, setCompareFrom] = useState<number | null>(null);
  const [unfolded, setUnfolded] = useState<Set<number>>(new Set());
  const forest = useMemo(() => forestOf(answer.nodes), [answer]);
  const headsAt = useMemo(() => {
    const at = new Map<number, HeadMark[]>();
    for (const head of answer.heads) at.set(head.head_turn_id, [...(at.get(head.head_turn_id) ?? []), head]);
    return at;
  }, [answer]);
  const layout = useMemo(() => {
    const keep = new Set<number>(headsAt.keys());
    if (selected !== null) keep.add(selected);
    if (compareFrom !== null) keep.add(compareFrom);
    return layOut(drawTree(forest, keep, unfolded));
  }, [forest, headsAt, unfolded, selected, compareFrom]);
  // A branch per tip: turns without children.
  const branches = answer.nodes.filter((turn) => !forest.children.has(turn.turn_id)).length;

  const choose = (turnId: number) => {
    if (compareFrom !== null && compareFrom !== turnId) {
      navigate(`/compare/${compareFrom}/${turnId}`);
      return;
    }
    setSelected(turnId);
    window.history.replaceState(null, "", `/contexts/${encodeURIComponent(reference)}?turn=${turnId}`);
  };

  return (
    <section class="context">
      <header class="context-head">
        <h1 data-testid="context-title">{context.name ? `@${context.name}` : `context ${context.context_id}`}</h1>
        <p>
          ContextID {context.context_id} · head {context.head_turn_id || "— (empty)"} · {answer.nodes.length} turns ·{" "}
          <span data-testid="branch-count">
            {branches} {branches === 1 ? "branch" : "branches"}
          </span>
          {answer.truncated && " · truncated to the newest turns"}
        </p>
        <p>
          {Object.entries(context.tags).map(([key, value]) => (
            <span class="tag" key={key}>
              {key}={value}
            </span>
          ))}
        </p>
        {answer.heads.filter((head) => head.context_id !== context.context_id).length > 0 && (
          <p data-testid="other-heads">
            Other heads here:{" "}
            {answer.heads
              .filter((head) => head.context_id !== context.context_id)
              .map((head) => (
                <a key={head.context_id} href={`/contexts/${head.context_id}`} class="head-link">
                  {headLabel(head)} at turn {head.head_turn_id}
                </a>
              ))}
          </p>
        )}
        {compareFrom !== null && (
          <p class="note" role="status">
            Comparing from turn {compareFrom}: click another turn.{" "}
            <button type="button" onClick={() => setCompareFrom(null)}>
              Cancel
            </button>
          </p>
        )}
      </header>
      <div class="context-body">
        {answer.nodes.length === 0 ? (
          <p class="note">This context has no turns yet.</p>
        ) : (
          <Graph
            layout={layout}
            headsAt={headsAt}
            contextId={context.context_id}
            selected={selected}
            onChoose={choose}
            onUnfold={(runStart) => setUnfolded(new Set([...unfolded, runStart]))}
          />
        )}
        <aside class="details">
          {selected === null ? (
            <p class="note">Click a turn to see its payload.</p>
          ) : (
            <TurnDetails turnId={selected} asOf={null} onCompare={() => setCompareFrom(selected)} />
          )}
        </aside>
      </div>
    </section>
  );
}

interface GraphProps {
  layout: ReturnType<typeof layOut>;
  headsAt: Map<number, HeadMark[]>;
  contextId: number;
  selected: number | null;
  onChoose: (turnId: number) => void;
  onUnfold: (runStart: number) => void;
}

function Graph({ layout, headsAt, contextId, selected, onChoose, onUnfold }: GraphProps) {
  const svgRef = useRef<SVGSVGElement>(null);
  const [view, setView] = useState<ZoomTransform>(zoomIdentity);
  const [size, setSize] = useState({ width: 800, height: 600 });
  useEffect(() => {
    const svg = svgRef.current;
    if (!svg) return;
    const box = svg.getBoundingClientRect();
    setSize({ width: box.width || 800, height: box.height || 600 });
    let frame = 0;
    let pending: ZoomTransform | null = null;
    const behaviour = zoom<SVGSVGElement, unknown>()
      .scaleExtent([0.02, 3])
      .on("zoom", (event: { transform: ZoomTransform }) => {
        pending = event.transform;
        if (frame === 0) {
          frame = window.requestAnimationFrame(() => {
            frame = 0;
            if (pending) setView(pending);
          });
        }
      });
    const selection = select(svg);
    selection.call(behaviour);
    // The top of the tree, centred.
    selection.call(behaviour.transform, zoomIdentity.translate((box.width || 800) / 2, 40));
    return () => {
      selection.on(".zoom", null);
      if (frame !== 0) window.cancelAnimationFrame(frame);
    };
  }, []);
  useEffect(() => {
    performance.mark("ctxstore:tree-ready");
    svgRef.current?.setAttribute("data-ready", "true");
  }, []);
  const left = -view.x / view.k;
  const top = -view.y / view.k;
  const shown = visible(layout, left, top, left + size.width / view.k, top + size.height / view.k);
  const labelOf = (at: Placed) => {
    const turn = at.node.turn;
    if (!turn) return `⋯ ${at.node.hidden} turns`;
    return turn.key ? `${turn.turn_id} · ${turn.key.slice(0, 14)}` : String(turn.turn_id);
  };
  return (
    <svg ref={svgRef} class="graph" data-testid="graph" data-nodes={layout.nodes.length}>
      <g transform={`translate(${view.x},${view.y}) scale(${view.k})`}>
        {shown.edges.map(([from, to]) => (
          <path
            key={`${from.node.key}>${to.node.key}`}
            class="edge"
            d={`M${from.x},${from.y + 10} C${from.x},${(from.y + to.y) / 2} ${to.x},${(from.y + to.y) / 2} ${to.x},${to.y - 10}`}
          />
        ))}
        {shown.nodes.map((at) => {
          const turn = at.node.turn;
          if (!turn) {
            return (
              <g
                key={at.node.key}
                class="run"
                transform={`translate(${at.x},${at.y})`}
                onClick={() => at.node.runStart !== undefined && onUnfold(at.node.runStart)}
                data-testid="run"
              >
                <rect x={-NODE_WIDTH / 2 + 10} y={-11} width={NODE_WIDTH - 20} height={22} rx={11} />
                <text y={4}>{labelOf(at)}</text>
              </g>
            );
          }
          const heads = headsAt.get(turn.turn_id) ?? [];
          const classes = [
            "node",
            turn.summary ? "summary" : "",
            turn.redacted ? "redacted" : "",
            selected === turn.turn_id ? "selected" : "",
            heads.length > 0 ? "head" : "",
          ].join(" ");
          return (
            <g
              key={at.node.key}
              class={classes}
              transform={`translate(${at.x},${at.y})`}
              onClick={() => onChoose(turn.turn_id)}
              data-turn-id={turn.turn_id}
              data-testid="node"
            >
              <title>
                {`turn ${turn.turn_id}, depth ${turn.depth}, ${turn.codec} ${turn.payload_len} bytes`}
              </title>
              <rect class="hit" x={-12} y={-12} width={NODE_WIDTH - 24} height={24 + heads.length * 12} />
              <circle r={9} />
              <text x={14} y={4}>
                {labelOf(at)}
              </text>
              {heads.map((head, index) => (
                <text key={head.context_id} class="head-mark" x={14} y={18 + index * 12}>
                  {head.context_id === contextId ? "◀ head" : `◀ ${head.name ? `@${head.name}` : `context ${head.context_id}`}`}
                </text>
              ))}
            </g>
          );
        })}
      </g>
    </svg>
  );
}

