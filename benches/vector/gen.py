#!/usr/bin/env python3
"""The data set of issue 49's vector figures: clustered unit vectors, queries, exact answers.

The same distribution as decision 0033's spike (``benches/vector-spike``): ``--clusters``
(1,000) random unit centres in 384 dimensions; each vector is a centre picked uniformly plus
Gaussian noise of norm ~0.7 (sigma = 0.7 / sqrt(dims) per component), normalized to unit
length. The queries are drawn the same way from the same centres. Item ``i`` carries
``bucket = i % 100``, so the filter ``{"bucket": 7}`` passes 1% of the items.

The numbers come from numpy's PCG64 from a fixed seed, not the spike's xorshift: the same
distribution, not the same bits. Centres, assignments, noise and queries each draw from their
own child stream of the seed, so the centres and the queries do not depend on N.

Written to ``DIR`` (``np.save`` format, row ``i`` is item ``i``):

- ``base.npy``: N x dims float32, unit length
- ``queries.npy``: Q x dims float32, unit length
- ``bucket.npy``: N int32, ``i % 100``
- ``gt.npy``: Q x 10 int64, the exact top 10 by cosine (the vectors are unit length: the dot
  product), best first
- ``gt_filtered.npy``: Q x 10 int64, the exact top 10 among the items with ``bucket == 7``
- ``meta.json``: the parameters, and ``complete: true`` once everything above is written

Memory stays bounded at large N: the base vectors are generated and written in chunks to a
memory-mapped file, and the ground truth is a running top 10 over chunks of the base.

    python gen.py --n 100000 --queries 1000 --dir /tmp/vecbench/data-100000
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

DIMS = 384
CLUSTERS = 1_000
NOISE_NORM = 0.7
SEED = 0x5EED_0033
K = 10
BUCKETS = 100
FILTER_BUCKET = 7
FORMAT = "ctxstore-vector-data/1"

#: rows generated at a time
CHUNK_ROWS = 50_000
#: rows scored against all the queries at a time (Q x this many scores in memory)
GT_CHUNK_ROWS = 20_000


def _normalize(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return x / norms


def _clustered(
    centres: np.ndarray, assign: np.ndarray, noise_rng: np.random.Generator, dims: int
) -> np.ndarray:
    sigma = NOISE_NORM / np.sqrt(dims)
    noise = noise_rng.standard_normal((len(assign), dims), dtype=np.float32)
    return _normalize(centres[assign] + np.float32(sigma) * noise).astype(np.float32)


class TopK:
    """A running exact top ``k`` (largest score) per query over chunks of candidates."""

    def __init__(self, queries: int, k: int) -> None:
        self.k = k
        self.scores = np.full((queries, 0), -np.inf, dtype=np.float32)
        self.ids = np.zeros((queries, 0), dtype=np.int64)

    def add(self, scores: np.ndarray, ids: np.ndarray) -> None:
        """``scores``: Q x C, ``ids``: C (the item ids of the chunk's columns)."""
        if scores.shape[1] > self.k:
            keep = np.argpartition(-scores, self.k - 1, axis=1)[:, : self.k]
            scores = np.take_along_axis(scores, keep, axis=1)
            chunk_ids = ids[keep]
        else:
            chunk_ids = np.broadcast_to(ids, scores.shape)
        all_scores = np.concatenate([self.scores, scores], axis=1)
        all_ids = np.concatenate([self.ids, chunk_ids], axis=1)
        if all_scores.shape[1] > self.k:
            keep = np.argpartition(-all_scores, self.k - 1, axis=1)[:, : self.k]
            all_scores = np.take_along_axis(all_scores, keep, axis=1)
            all_ids = np.take_along_axis(all_ids, keep, axis=1)
        self.scores, self.ids = all_scores, all_ids

    def result(self) -> np.ndarray:
        # best first; equal scores in id order
        order = np.lexsort((self.ids, -self.scores), axis=1)
        return np.take_along_axis(self.ids, order, axis=1)


def exact_topk(base: np.ndarray, queries: np.ndarray, mask_of: Any | None, k: int) -> np.ndarray:
    """Q x k ids: each query's exact top ``k`` by dot product among the rows of ``base`` whose
    ids ``mask_of(ids)`` keeps (all, if None), best first; fewer columns if fewer rows pass."""
    top = TopK(len(queries), k)
    for start in range(0, len(base), GT_CHUNK_ROWS):
        stop = min(start + GT_CHUNK_ROWS, len(base))
        ids = np.arange(start, stop, dtype=np.int64)
        chunk = np.asarray(base[start:stop])
        if mask_of is not None:
            keep = mask_of(ids)
            ids, chunk = ids[keep], chunk[keep]
            if len(ids) == 0:
                continue
        top.add(queries @ chunk.T, ids)
    return top.result()


def generate(
    out: Path,
    n: int,
    queries: int,
    *,
    seed: int = SEED,
    dims: int = DIMS,
    clusters: int = CLUSTERS,
    quiet: bool = False,
) -> dict[str, Any]:
    """Writes the data set to ``out`` (created) and answers its meta.json."""
    if n < K:
        raise SystemExit(f"--n must be at least {K}")
    out.mkdir(parents=True, exist_ok=True)
    meta_path = out / "meta.json"
    meta_path.unlink(missing_ok=True)
    log = (lambda *_: None) if quiet else (lambda *a: print(*a, file=sys.stderr, flush=True))

    seq = np.random.SeedSequence(seed)
    centre_ss, assign_ss, noise_ss, query_ss = seq.spawn(4)
    centres = _normalize(np.random.default_rng(centre_ss).standard_normal((clusters, dims))).astype(
        np.float32
    )

    started = time.monotonic()
    assign = np.random.default_rng(assign_ss).integers(0, clusters, size=n)
    noise_rng = np.random.default_rng(noise_ss)
    base = np.lib.format.open_memmap(out / "base.npy", mode="w+", dtype=np.float32, shape=(n, dims))
    for start in range(0, n, CHUNK_ROWS):
        stop = min(start + CHUNK_ROWS, n)
        base[start:stop] = _clustered(centres, assign[start:stop], noise_rng, dims)
    base.flush()
    bucket = (np.arange(n) % BUCKETS).astype(np.int32)
    np.save(out / "bucket.npy", bucket)

    query_rng = np.random.default_rng(query_ss)
    q_assign = query_rng.integers(0, clusters, size=queries)
    q = _clustered(centres, q_assign, query_rng, dims)
    np.save(out / "queries.npy", q)
    log(f"gen: {n} vectors and {queries} queries in {time.monotonic() - started:.1f} s")

    started = time.monotonic()
    gt = exact_topk(base, q, None, K)
    np.save(out / "gt.npy", gt)
    gt_filtered = exact_topk(base, q, lambda ids: ids % BUCKETS == FILTER_BUCKET, K)
    np.save(out / "gt_filtered.npy", gt_filtered)
    log(f"gen: exact top {K} (unfiltered and filtered) in {time.monotonic() - started:.1f} s")
    del base

    meta: dict[str, Any] = {
        "format": FORMAT,
        "n": n,
        "queries": queries,
        "dims": dims,
        "clusters": clusters,
        "noise_norm": NOISE_NORM,
        "seed": seed,
        "k": K,
        "metric": "cosine",
        "bucket": f"i % {BUCKETS}",
        "filter": {"bucket": FILTER_BUCKET},
        "filter_passing": int(np.count_nonzero(bucket == FILTER_BUCKET)),
        "complete": True,
    }
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def ensure(
    out: Path, n: int, queries: int, *, seed: int = SEED, quiet: bool = False
) -> dict[str, Any]:
    """The data set in ``out``, generated unless a complete one of these parameters is there."""
    meta_path = out / "meta.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if (
            meta.get("format") == FORMAT
            and meta.get("complete")
            and (meta["n"], meta["queries"], meta["seed"]) == (n, queries, seed)
        ):
            return meta
    return generate(out, n, queries, seed=seed, quiet=quiet)


def load(out: Path, *, mmap: bool = True) -> dict[str, Any]:
    """The arrays of a generated data set (the base memory-mapped unless ``mmap`` is false)."""
    mode = "r" if mmap else None
    return {
        "meta": json.loads((out / "meta.json").read_text()),
        "base": np.load(out / "base.npy", mmap_mode=mode),
        "bucket": np.load(out / "bucket.npy"),
        "queries": np.load(out / "queries.npy"),
        "gt": np.load(out / "gt.npy"),
        "gt_filtered": np.load(out / "gt_filtered.npy"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, required=True, help="base vectors")
    parser.add_argument("--queries", type=int, default=1000, help="query vectors")
    parser.add_argument("--dir", type=Path, required=True, help="output directory")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument(
        "--force", action="store_true", help="regenerate even when a matching set is there"
    )
    args = parser.parse_args()
    if args.force:
        meta = generate(args.dir, args.n, args.queries, seed=args.seed)
    else:
        meta = ensure(args.dir, args.n, args.queries, seed=args.seed)
    print(json.dumps(meta, indent=2))


if __name__ == "__main__":
    main()
