/**
 * A deterministic fake embedding for the tests: `CharacterEmbeddings`, ported from LangGraph's
 * `libs/checkpoint-postgres/tests/embed_test_utils.py` (langchain-ai/langgraph, MIT License,
 * Copyright (c) LangChain, Inc.): character-frequency vectors through a random projection per
 * character, normalized. Its randomness is Python's `random.Random(seed).gauss`, ported too (the
 * Mersenne Twister MT19937 seeded as CPython seeds an int, and CPython's `random()` and `gauss`),
 * so a text embeds here as it does in LangGraph's own PostgresStore tests (the projections are
 * drawn lazily, in the order characters are first met, as there).
 */

import { Embeddings } from "@langchain/core/embeddings";

/** CPython's `random.Random(seed)` for a non-negative int seed below 2^32: `random()` and
 * `gauss()`. */
export class PythonRandom {
  private readonly mt = new Uint32Array(624);
  private index = 625;
  private gaussNext: number | undefined;

  constructor(seed: number) {
    if (!Number.isInteger(seed) || seed < 0 || seed > 0xffff_ffff) throw new RangeError("a seed is a u32 here");
    this.initByArray([seed]);
  }

  private initGenrand(s: number): void {
    const mt = this.mt;
    mt[0] = s >>> 0;
    for (let i = 1; i < 624; i++) {
      const prev = mt[i - 1]! ^ (mt[i - 1]! >>> 30);
      mt[i] = (Math.imul(1812433253, prev) + i) >>> 0;
    }
    this.index = 624;
  }

  private initByArray(key: number[]): void {
    const mt = this.mt;
    this.initGenrand(19650218);
    let i = 1;
    let j = 0;
    for (let k = Math.max(624, key.length); k > 0; k--) {
      const prev = mt[i - 1]! ^ (mt[i - 1]! >>> 30);
      mt[i] = ((mt[i]! ^ Math.imul(prev, 1664525)) + key[j]! + j) >>> 0;
      i++;
      j++;
      if (i >= 624) {
        mt[0] = mt[623]!;
        i = 1;
      }
      if (j >= key.length) j = 0;
    }
    for (let k = 623; k > 0; k--) {
      const prev = mt[i - 1]! ^ (mt[i - 1]! >>> 30);
      mt[i] = ((mt[i]! ^ Math.imul(prev, 1566083941)) - i) >>> 0;
      i++;
      if (i >= 624) {
        mt[0] = mt[623]!;
        i = 1;
      }
    }
    mt[0] = 0x8000_0000;
  }

  private int32(): number {
    const mt = this.mt;
    if (this.index >= 624) {
      for (let k = 0; k < 624; k++) {
        const y = (mt[k]! & 0x8000_0000) | (mt[(k + 1) % 624]! & 0x7fff_ffff);
        mt[k] = mt[(k + 397) % 624]! ^ (y >>> 1) ^ (y & 1 ? 0x9908_b0df : 0);
      }
      this.index = 0;
    }
    let y = mt[this.index++]!;
    y ^= y >>> 11;
    y ^= (y << 7) & 0x9d2c_5680;
    y ^= (y << 15) & 0xefc6_0000;
    y ^= y >>> 18;
    return y >>> 0;
  }

  /** A float in [0, 1) with 53 random bits, as CPython's `random()`. */
  random(): number {
    const a = this.int32() >>> 5;
    const b = this.int32() >>> 6;
    return (a * 67108864 + b) / 9007199254740992;
  }

  /** CPython's `gauss(mu, sigma)` (Box-Muller, the second value kept for the next call). */
  gauss(mu: number, sigma: number): number {
    let z = this.gaussNext;
    this.gaussNext = undefined;
    if (z === undefined) {
      const x2pi = this.random() * 2 * Math.PI;
      const g2rad = Math.sqrt(-2 * Math.log(1 - this.random()));
      z = Math.cos(x2pi) * g2rad;
      this.gaussNext = Math.sin(x2pi) * g2rad;
    }
    return mu + z * sigma;
  }
}

/** Simple character-frequency based embeddings using random projections (LangGraph's test
 * `CharacterEmbeddings`). */
export class CharacterEmbeddings extends Embeddings {
  readonly dims: number;
  private readonly rng: PythonRandom;
  private readonly projections = new Map<string, number[]>();

  constructor(dims = 50, seed = 42) {
    super({});
    this.dims = dims;
    this.rng = new PythonRandom(seed);
  }

  private projection(char: string): number[] {
    let found = this.projections.get(char);
    if (found === undefined) {
      found = Array.from({ length: this.dims }, () => this.rng.gauss(0, 1 / Math.sqrt(this.dims)));
      this.projections.set(char, found);
    }
    return found;
  }

  /** Embed a single text. */
  embedOne(text: string): number[] {
    const counts = new Map<string, number>();
    for (const char of text) counts.set(char, (counts.get(char) ?? 0) + 1);
    let total = 0;
    for (const count of counts.values()) total += count;
    if (total === 0) return new Array<number>(this.dims).fill(0);
    let embedding = new Array<number>(this.dims).fill(0);
    for (const [char, count] of counts) {
      const weight = count / total;
      this.projection(char).forEach((proj, i) => (embedding[i]! += weight * proj));
    }
    const norm = Math.sqrt(embedding.reduce((sum, x) => sum + x * x, 0));
    if (norm > 0) embedding = embedding.map((x) => x / norm);
    return embedding;
  }

  embedDocuments(texts: string[]): Promise<number[][]> {
    return Promise.resolve(texts.map((text) => this.embedOne(text)));
  }

  embedQuery(text: string): Promise<number[]> {
    return Promise.resolve(this.embedOne(text));
  }
}
