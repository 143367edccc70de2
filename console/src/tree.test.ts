import { describe, expect, it } from "vitest";
import type { TurnView } from "./api";
import { type DrawNode, type Placed, drawTree, forestOf, layOut, visible } from "./tree";

function turn(turn_id: number, parent_turn_id: number): TurnView {
  return {
    turn_id,
    parent_turn_id,
    context_id: 1,
    depth: 0,
    type_tag: 0,
    codec: "json",
    payload_len: 1,
    created_at_unix_ms: 0,
  };
}

/** A chain 1 → 2 → … → n. */
function chain(n: number, from = 1): TurnView[] {
  return Array.from({ length: n }, (_, index) => turn(from + index, index === 0 ? 0 : from + index - 1));
}

function keys(node: DrawNode): string[] {
  const out: string[] = [];
  const stack = [node];
  while (stack.length > 0) {
    const next = stack.pop() as DrawNode;
    out.push(next.key);
    for (let index = next.children.length - 1; index >= 0; index -= 1) stack.push(next.children[index]);
  }
  return out.slice(1);
}

describe("drawTree", () => {
  it("folds the inside of a long chain, keeping its ends", () => {
    const forest = forestOf(chain(10));
    expect(keys(drawTree(forest, new Set(), new Set()))).toEqual(["t-1", "run-2", "t-10"]);
    const folded = drawTree(forest, new Set(), new Set()).children[0].children[0];
    expect(folded.hidden).toBe(8);
  });

  it("unfolds a run on request and never folds a kept turn", () => {
    const forest = forestOf(chain(10));
    expect(keys(drawTree(forest, new Set(), new Set([2])))).toHaveLength(10);
    // Turn 6 kept (a head): the runs on each side are 4 and 3 long, under the fold minimum.
    expect(keys(drawTree(forest, new Set([6]), new Set()))).toHaveLength(10);
  });

  it("keeps branch points and their children, oldest first", () => {
    // 1 → 2 → … → 8, and 3 → 20 → 21
    const forest = forestOf([...chain(8), turn(20, 3), turn(21, 20)]);
    expect(keys(drawTree(forest, new Set(), new Set()))).toEqual([
      "t-1",
      "t-2",
      "t-3",
      "t-4",
      "t-5",
      "t-6",
      "t-7",
      "t-8",
      "t-20",
      "t-21",
    ]);
    expect(forest.children.get(3)).toEqual([4, 20]);
  });

  it("draws a 100,000-turn chain without recursion and lays it out", () => {
    const forest = forestOf(chain(100_000));
    const top = drawTree(forest, new Set(), new Set());
    expect(keys(top)).toEqual(["t-1", "run-2", "t-100000"]);
    const unfolded = drawTree(forest, new Set(), new Set([2]));
    const layout = layOut(unfolded);
    expect(layout.nodes).toHaveLength(100_000);
    expect(layout.edges).toHaveLength(99_999);
    expect(layout.maxY).toBeGreaterThan(0);
    const shown = visible(layout, -500, 0, 500, 1000);
    expect(shown.nodes.length).toBeLessThan(100);
  });

  it("lays a parent over its children, older children left, a chain straight down", () => {
    const layout = layOut(drawTree(forestOf([turn(1, 0), turn(2, 1), turn(3, 1), turn(4, 3)]), new Set(), new Set()));
    const at = (id: number) => layout.nodes.find((placed) => placed.node.turn?.turn_id === id) as Placed;
    expect(at(2).x).toBeLessThan(at(3).x);
    expect(at(1).x).toBe((at(2).x + at(3).x) / 2);
    expect(at(4).x).toBe(at(3).x);
    expect(at(4).y).toBeGreaterThan(at(3).y);
    expect(at(1).y).toBe(0);
    expect(layout.edges).toHaveLength(3);
  });

  it("treats turns whose parent is missing as roots", () => {
    const forest = forestOf([turn(5, 4), turn(6, 5), turn(9, 0)]);
    expect(forest.roots).toEqual([5, 9]);
  });
});
