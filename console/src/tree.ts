// A context's turns as a drawable tree: the forest of parent links, long linear runs folded
// into one node each (unfolded on request), and a layout, oldest at the top: each tip its
// own column, a parent centred over its children, a chain straight down (a dendrogram, as
// d3-hierarchy's cluster lays it out). Written here, iterative and O(n) however deep: d3's
// `hierarchy()` computes heights by walking from every node up to the root, O(n²) on a
// chain (an unfolded 8,000-turn run took 0.4 s, 100,000 turns over a minute). Pure
// functions: tested by vitest (tree.test.ts), no DOM.
import type { TurnView } from "./api";

/** Turns of a run of single children shorter than this are drawn one by one. */
export const RUN_FOLD_MIN = 5;
/** Horizontal and vertical distance between laid-out nodes, in SVG units. */
export const NODE_WIDTH = 150;
export const NODE_HEIGHT = 56;

export interface Forest {
  byId: Map<number, TurnView>;
  children: Map<number, number[]>;
  roots: number[];
}

/** A node as drawn: one turn, or a folded run of `hidden` turns starting at `runStart`. */
export interface DrawNode {
  key: string;
  turn?: TurnView;
  hidden?: number;
  runStart?: number;
  children: DrawNode[];
}

export interface Placed {
  node: DrawNode;
  x: number;
  y: number;
}

export interface Layout {
  nodes: Placed[];
  edges: [Placed, Placed][];
  minX: number;
  maxX: number;
  maxY: number;
}

/** Parent links → children lists (oldest first) and roots (turns whose parent is absent). */
export function forestOf(turns: TurnView[]): Forest {
  const byId = new Map<number, TurnView>();
  for (const turn of turns) byId.set(turn.turn_id, turn);
  const children = new Map<number, number[]>();
  const roots: number[] = [];
  for (const turn of turns) {
    if (byId.has(turn.parent_turn_id)) {
      const list = children.get(turn.parent_turn_id);
      if (list) list.push(turn.turn_id);
      else children.set(turn.parent_turn_id, [turn.turn_id]);
    } else {
      roots.push(turn.turn_id);
    }
  }
  for (const list of children.values()) list.sort((a, b) => a - b);
  roots.sort((a, b) => a - b);
  return { byId, children, roots };
}

/**
 * The drawn tree under a virtual root: runs of at least `foldMin` turns that each have one
 * child and whose parent has one child are folded into one node, unless the run (named by
 * its first turn) is in `unfolded` or holds a turn of `keep` (heads, the selected turn).
 * Iterative: a chain may be 100,000 turns long.
 */
export function drawTree(
  forest: Forest,
  keep: Set<number>,
  unfolded: Set<number>,
  foldMin = RUN_FOLD_MIN,
): DrawNode {
  const { byId, children } = forest;
  const onlyChild = (id: number) => {
    const list = children.get(id);
    return list && list.length === 1 ? list[0] : undefined;
  };
  const interior = (id: number) => {
    const turn = byId.get(id);
    if (!turn || keep.has(id) || onlyChild(id) === undefined) return false;
    return onlyChild(turn.parent_turn_id) === id;
  };
  const top: DrawNode = { key: "top", children: [] };
  const stack: [number, DrawNode][] = [...forest.roots].reverse().map((id) => [id, top]);
  while (stack.length > 0) {
    const popped = stack.pop();
    if (!popped) break;
    let [id, parent] = popped;
    const run: number[] = [];
    let next = id;
    while (interior(next)) {
      run.push(next);
      next = onlyChild(next) as number;
    }
    if (run.length >= foldMin && !unfolded.has(run[0])) {
      const folded: DrawNode = { key: `run-${run[0]}`, hidden: run.length, runStart: run[0], children: [] };
      parent.children.push(folded);
      parent = folded;
    } else {
      for (const member of run) {
        const drawn: DrawNode = { key: `t-${member}`, turn: byId.get(member), children: [] };
        parent.children.push(drawn);
        parent = drawn;
      }
    }
    id = next;
    const drawn: DrawNode = { key: `t-${id}`, turn: byId.get(id), children: [] };
    parent.children.push(drawn);
    const below = children.get(id) ?? [];
    for (let index = below.length - 1; index >= 0; index -= 1) stack.push([below[index], drawn]);
  }
  return top;
}

/** Positions: breadth on x, depth on y (oldest at the top); the virtual root left out. */
export function layOut(top: DrawNode): Layout {
  // Pre-order (each node after its parent, tips left to right), with depth and parent.
  const order: { node: DrawNode; depth: number; parent: number }[] = [];
  const stack: { node: DrawNode; depth: number; parent: number }[] = [{ node: top, depth: 0, parent: -1 }];
  while (stack.length > 0) {
    const entry = stack.pop() as (typeof stack)[number];
    const index = order.length;
    order.push(entry);
    const children = entry.node.children;
    for (let child = children.length - 1; child >= 0; child -= 1) {
      stack.push({ node: children[child], depth: entry.depth + 1, parent: index });
    }
  }
  const x = new Float64Array(order.length);
  const low = new Float64Array(order.length).fill(Infinity);
  const high = new Float64Array(order.length).fill(-Infinity);
  let column = 0;
  for (let index = 0; index < order.length; index += 1) {
    if (order[index].node.children.length === 0) {
      x[index] = column * NODE_WIDTH;
      column += 1;
    }
  }
  // Children before parents: each parent centred over its children's span.
  for (let index = order.length - 1; index >= 0; index -= 1) {
    if (order[index].node.children.length > 0) x[index] = (low[index] + high[index]) / 2;
    const parent = order[index].parent;
    if (parent >= 0) {
      low[parent] = Math.min(low[parent], x[index]);
      high[parent] = Math.max(high[parent], x[index]);
    }
  }
  const placed: (Placed | null)[] = order.map((entry, index) =>
    entry.depth === 0 ? null : { node: entry.node, x: x[index], y: (entry.depth - 1) * NODE_HEIGHT },
  );
  const nodes: Placed[] = [];
  const edges: [Placed, Placed][] = [];
  let minX = 0;
  let maxX = 0;
  let maxY = 0;
  for (let index = 0; index < order.length; index += 1) {
    const at = placed[index];
    if (!at) continue;
    nodes.push(at);
    minX = Math.min(minX, at.x);
    maxX = Math.max(maxX, at.x);
    maxY = Math.max(maxY, at.y);
    const parent = placed[order[index].parent];
    if (parent) edges.push([parent, at]);
  }
  return { nodes, edges, minX, maxX, maxY };
}

/** The nodes and edges inside a view box (in layout units), with a margin. */
export function visible(layout: Layout, left: number, top: number, right: number, bottom: number) {
  const margin = NODE_WIDTH;
  const inside = (at: Placed) =>
    at.x >= left - margin && at.x <= right + margin && at.y >= top - margin && at.y <= bottom + margin;
  const crosses = ([from, to]: [Placed, Placed]) =>
    Math.max(from.x, to.x) >= left - margin &&
    Math.min(from.x, to.x) <= right + margin &&
    Math.max(from.y, to.y) >= top - margin &&
    Math.min(from.y, to.y) <= bottom + margin;
  return { nodes: layout.nodes.filter(inside), edges: layout.edges.filter(crosses) };
}
