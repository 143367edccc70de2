#!/usr/bin/env python3
"""Issue 49's vector figures: pgvector's HNSW (and LangGraph's PostgresStore on it).

One run: generate (or reuse) the data set of ``gen.py`` in ``DIR/data-N-Q-SEED``, start
PostgreSQL with pgvector from the ``pgserver`` wheel in ``DIR/pg``, and for each backend of
``--backends``:

1. ``setup`` an empty table or index, ``insert`` the N vectors in batches (timed), ``build``
   the index (timed; a backend that indexes while it inserts does nothing here);
2. the disk it takes;
3. for each ``--ef-search``: recall@10 and latency of the queries from one client, unfiltered
   and with the filter ``{"bucket": 7}`` (1% pass), then the unfiltered queries from
   ``--clients`` processes at once, each with its own connection.

It writes one JSON report (``--json``, default ``DIR/report-N.json``; format in README.md)
and prints a summary. Backends (``--backends``):

- ``pgvector``: a table ``(id bigint, bucket int, embedding vector(384))`` loaded by binary
  COPY, then ``CREATE INDEX ... USING hnsw (embedding vector_cosine_ops)
  WITH (m, ef_construction)``, searched by ``ORDER BY embedding <=> $1 LIMIT 10``
  (``WHERE bucket = 7`` filtered, both as the planner chooses and with the HNSW index forced);
- ``langgraph``: LangGraph's ``PostgresStore`` with ``index={"dims": 384, "embed": ...}``
  (the embedding function answers the precomputed vectors), the first ``--langgraph-n`` items,
  put through ``store.batch`` and searched through ``store.search``: what a builder runs;
- ``ctxstore``: ``ctxstore-server`` (the release build of this checkout) started on a fresh
  ``DIR/ctxstore``; one context ``bench``, entries ``i/0000042`` with value ``{"bucket": B}``
  and one vector each, put through the Python client's ``kv_put_vectors`` (128 entries a
  request) and searched with ``vector_search`` (the filter evaluated by the server); then the
  server's memory, and a restart on the loaded data timed until a first search is answered.

A backend is a class with the interface of ``Backend`` below, registered in ``BACKENDS``.

    python pgvector_bench.py --n 10000 --queries 200 --clients 32 --dir /tmp/vecbench
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import multiprocessing as mp
import os
import platform
import re
import shlex
import socket
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen  # noqa: E402

SCHEMA = "ctxstore-vector-bench/1"
K = 10


# -- the backend interface -------------------------------------------------------------------


@dataclass
class Batch:
    """Items ``ids[i]`` with vector ``vectors[i]`` and attribute ``buckets[i]`` (their value is
    ``{"bucket": buckets[i]}``)."""

    ids: np.ndarray  # int64
    vectors: np.ndarray  # float32, len(ids) x dims, unit length
    buckets: np.ndarray  # int32


class Backend:
    """What the harness asks of a store. ``config`` is a JSON-able dict: the harness builds it
    (``make_config``), and a client process builds its own instance from
    ``session_config()`` to search the same data over its own connection.

    Order of calls in the loading process: ``__init__`` (connects, changes nothing),
    ``setup``, ``insert`` × batches, ``build``, ``disk``, then searches, ``info``, ``close``.
    A client process: ``__init__(session_config())``, ``prepare`` × its queries, searches,
    ``close``.
    """

    name: ClassVar[str] = "?"
    #: services (keys of ``SERVICES``) the harness starts before ``make_config``
    requires: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config

    @classmethod
    def make_config(cls, args: argparse.Namespace, env: dict[str, Any]) -> dict[str, Any]:
        """The config of this run (``env`` holds what the harness started, e.g. ``pg_uri``)."""
        return {}

    def setup(self, dims: int) -> None:
        """An empty store of ``dims``-dimensional cosine vectors (anything of an earlier run
        dropped)."""
        raise NotImplementedError

    def insert(self, batch: Batch) -> None:
        """Stores the batch durably (acknowledged as the store acknowledges a write)."""
        raise NotImplementedError

    def build(self) -> None:
        """After the last insert: whatever makes the vectors searchable (an index build)."""

    def prepare(self, q: np.ndarray) -> Any:
        """A query vector in the form ``search`` takes, made outside the timed section."""
        return q

    def search(
        self,
        q: Any,
        k: int,
        filter: dict[str, Any] | None = None,
        ef_search: int | None = None,
        **variant: Any,
    ) -> list[int]:
        """The ids of the ``k`` (or fewer) items nearest ``q`` that pass ``filter`` (a
        LangGraph filter: ``{"bucket": 7}``), best first, at breadth ``ef_search`` (None: the
        store's default). ``variant``: one of ``filtered_variants()``."""
        raise NotImplementedError

    def session_config(self) -> dict[str, Any]:
        """The config a client process opens the same data with (default: ``config``)."""
        return self.config

    def filtered_variants(self) -> list[dict[str, Any]]:
        """The ways to run a filtered query worth reporting apart; ``{}`` is the default."""
        return [{}]

    def plan(
        self, q: Any, k: int, filter: dict[str, Any] | None, ef_search: int | None, **variant: Any
    ) -> str | None:
        """How the store answers this search (a query plan), when it can tell."""
        return None

    def disk(self) -> dict[str, int]:
        """Bytes on disk of what ``insert`` and ``build`` made: ``total_bytes`` at least."""
        return {}

    def memory(self) -> dict[str, Any]:
        """The server's memory after the load (e.g. ``vmrss_bytes``), when it can tell."""
        return {}

    def restart(self, q: Any, k: int) -> dict[str, Any]:
        """After the searches: stop the server, start it on the loaded data and time it until
        ready and until the search of ``q`` is answered, when the harness runs the server."""
        return {}

    def info(self) -> dict[str, Any]:
        """Versions and settings worth reporting."""
        return {}

    def close(self) -> None:
        pass


# -- pgvector, raw SQL -----------------------------------------------------------------------


def vector_literal(q: np.ndarray) -> str:
    """pgvector's text form; ``repr`` of each float32 widened to a double reads back as the
    same float32."""
    return "[" + ",".join(map(repr, np.asarray(q, dtype=np.float32).tolist())) + "]"


_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + (0).to_bytes(4, "big") + (0).to_bytes(4, "big")
_COPY_TRAILER = (-1).to_bytes(2, "big", signed=True)


def copy_rows_binary(batch: Batch) -> bytes:
    """The batch as COPY ... (FORMAT BINARY) data: (id int8, bucket int4, embedding vector).
    pgvector's binary form: dim int16, unused int16, dim × float4, big endian."""
    dims = batch.vectors.shape[1]
    row = np.dtype(
        [
            ("fields", ">i2"),
            ("id_len", ">i4"),
            ("id", ">i8"),
            ("bucket_len", ">i4"),
            ("bucket", ">i4"),
            ("vec_len", ">i4"),
            ("dim", ">i2"),
            ("unused", ">i2"),
            ("vec", ">f4", (dims,)),
        ]
    )
    rows = np.empty(len(batch.ids), dtype=row)
    rows["fields"] = 3
    rows["id_len"] = 8
    rows["id"] = batch.ids
    rows["bucket_len"] = 4
    rows["bucket"] = batch.buckets
    rows["vec_len"] = 4 + 4 * dims
    rows["dim"] = dims
    rows["unused"] = 0
    rows["vec"] = batch.vectors
    return _COPY_HEADER + rows.tobytes() + _COPY_TRAILER


class PgvectorBackend(Backend):
    """pgvector's HNSW through plain SQL: the ceiling of what PostgreSQL does."""

    name = "pgvector"
    requires = ("postgres",)
    TABLE = "vbench_items"
    INDEX = "vbench_items_embedding_idx"
    FILTER_COLUMNS = ("bucket",)

    def __init__(self, config: dict[str, Any]) -> None:
        import psycopg

        super().__init__(config)
        self.conn = psycopg.connect(config["uri"], autocommit=True)
        self.notices: list[str] = []
        self.conn.add_notice_handler(lambda d: self.notices.append(d.message_primary))
        self._ef: int | None = None
        self._seqscan = True

    @classmethod
    def make_config(cls, args: argparse.Namespace, env: dict[str, Any]) -> dict[str, Any]:
        return {
            "uri": env["pg_uri"],
            "m": args.m,
            "ef_construction": args.ef_construction,
            "insert_mode": args.insert_mode,
            "maintenance_work_mem": args.pg_maintenance_work_mem,
            "parallel_workers": args.pg_parallel_workers,
            "index_first": args.pg_index_first,
        }

    def setup(self, dims: int) -> None:
        self.dims = dims
        self.conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        self.conn.execute(f"DROP TABLE IF EXISTS {self.TABLE}")
        self.conn.execute(
            f"CREATE TABLE {self.TABLE} (id bigint PRIMARY KEY, bucket int NOT NULL, "
            f"embedding vector({dims}) NOT NULL)"
        )
        if self.config["index_first"]:
            self._create_index()

    def insert(self, batch: Batch) -> None:
        if self.config["insert_mode"] == "copy":
            with self.conn.cursor() as cur:
                with cur.copy(
                    f"COPY {self.TABLE} (id, bucket, embedding) FROM STDIN (FORMAT BINARY)"
                ) as copy:
                    copy.write(copy_rows_binary(batch))
        else:
            with self.conn.transaction(), self.conn.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO {self.TABLE} (id, bucket, embedding) VALUES (%s, %s, %s::vector)",
                    [
                        (int(i), int(b), vector_literal(v))
                        for i, b, v in zip(batch.ids, batch.buckets, batch.vectors, strict=True)
                    ],
                )

    def build(self) -> None:
        self.notices.clear()  # keep what the build says (e.g. the graph outgrew memory)
        if not self.config["index_first"]:
            self._create_index()
        self.conn.execute(f"ANALYZE {self.TABLE}")

    def _create_index(self) -> None:
        c = self.config
        self.conn.execute(f"SET maintenance_work_mem = '{c['maintenance_work_mem']}'")
        if c["parallel_workers"] is not None:
            self.conn.execute(
                f"SET max_parallel_maintenance_workers = {int(c['parallel_workers'])}"
            )
        self.conn.execute(
            f"CREATE INDEX {self.INDEX} ON {self.TABLE} USING hnsw (embedding vector_cosine_ops) "
            f"WITH (m = {int(c['m'])}, ef_construction = {int(c['ef_construction'])})"
        )

    def prepare(self, q: np.ndarray) -> str:
        return vector_literal(q)

    def _sql(
        self, k: int, filter: dict[str, Any] | None, force_index: bool, numbered: bool = False
    ) -> tuple[str, list[Any]]:
        """The search's SQL and its parameters but the query vector (the last placeholder).
        Each variant has its own text (a comment), so that psycopg's prepared statements (it
        prepares a query from its fifth execution) never carry one variant's plan into
        another's: PostgreSQL does not replan a cached plan when enable_seqscan changes."""
        where, params, n = "", [], 0

        def placeholder() -> str:
            nonlocal n
            n += 1
            return f"${n}" if numbered else "%s"

        if filter:
            clauses = []
            for key, value in filter.items():
                if key not in self.FILTER_COLUMNS or isinstance(value, dict):
                    raise ValueError(f"pgvector backend: no column for the filter {key}={value!r}")
                clauses.append(f"{key} = {placeholder()}::int")
                params.append(int(value))
            where = " WHERE " + " AND ".join(clauses)
        tag = "/* hnsw forced */ " if force_index else ""
        sql = (
            f"SELECT {tag}id FROM {self.TABLE}{where} "
            f"ORDER BY embedding <=> {placeholder()}::vector LIMIT {int(k)}"
        )
        return sql, params

    def _session(self, ef_search: int | None, force_index: bool) -> None:
        if ef_search != self._ef:
            if ef_search is None:
                self.conn.execute("RESET hnsw.ef_search")
            else:
                self.conn.execute(f"SET hnsw.ef_search = {int(ef_search)}")
            self._ef = ef_search
        if force_index == self._seqscan:
            self.conn.execute(f"SET enable_seqscan = {'off' if force_index else 'on'}")
            self._seqscan = not force_index

    def search(
        self,
        q: Any,
        k: int,
        filter: dict[str, Any] | None = None,
        ef_search: int | None = None,
        force_index: bool = False,
        **_: Any,
    ) -> list[int]:
        self._session(ef_search, force_index)
        sql, params = self._sql(k, filter, force_index)
        return [row[0] for row in self.conn.execute(sql, [*params, q]).fetchall()]

    def filtered_variants(self) -> list[dict[str, Any]]:
        # the planner's choice (a sequential scan is exact), and the HNSW index forced (what a
        # large table gets; pgvector 0.6 filters the ef_search candidates after the scan)
        return [{}, {"force_index": True}]

    def plan(
        self,
        q: Any,
        k: int,
        filter: dict[str, Any] | None,
        ef_search: int | None,
        force_index: bool = False,
        **_: Any,
    ) -> str | None:
        """The plan the search runs with: the statement prepared and executed six times
        (PostgreSQL plans a prepared statement's first five executions with their values, then
        may keep a generic plan), as psycopg's automatic preparation does, then explained."""
        from psycopg import sql as pgsql

        self._session(ef_search, force_index)
        text, params = self._sql(k, filter, force_index, numbered=True)
        args = pgsql.SQL(", ").join(pgsql.Literal(p) for p in [*params, q])
        self.conn.execute(f"PREPARE vbench_plan AS {text}")
        try:
            for _ in range(6):
                self.conn.execute(pgsql.SQL("EXECUTE vbench_plan ({})").format(args)).fetchall()
            rows = self.conn.execute(
                pgsql.SQL("EXPLAIN EXECUTE vbench_plan ({})").format(args)
            ).fetchall()
        finally:
            self.conn.execute("DEALLOCATE vbench_plan")
        return compact_plan(r[0] for r in rows)

    def disk(self) -> dict[str, int]:
        self.conn.execute("CHECKPOINT")
        t = self.TABLE
        row = self.conn.execute(
            f"SELECT pg_relation_size('{t}'), pg_total_relation_size('{t}') - "
            f"pg_relation_size('{t}') - pg_indexes_size('{t}'), "
            f"pg_relation_size('{self.INDEX}'), pg_indexes_size('{t}'), "
            f"pg_total_relation_size('{t}')"
        ).fetchone()
        assert row is not None
        heap, toast, hnsw, indexes, total = (int(x) for x in row)
        return {
            "table_bytes": heap,
            "toast_bytes": toast,
            "hnsw_index_bytes": hnsw,
            "all_indexes_bytes": indexes,
            "total_bytes": total,
        }

    def info(self) -> dict[str, Any]:
        import psycopg

        with psycopg.connect(self.config["uri"], autocommit=True) as fresh:  # the defaults
            found = pg_info(fresh)
        return found | {
            "m": self.config["m"],
            "ef_construction": self.config["ef_construction"],
            "insert_mode": self.config["insert_mode"],
            "index_while_inserting": self.config["index_first"],
            "build_notices": sorted(set(self.notices)),
        }

    def close(self) -> None:
        self.conn.close()


def compact_plan(lines: Iterable[str]) -> str:
    """EXPLAIN's lines without costs, the query vector shown as $q, joined by " / "."""
    out = []
    for line in lines:
        line = re.sub(r"'\[[^\]]*\]'::vector", "$q", line.strip())
        line = re.sub(r"\s*\(cost=[^)]*\)", "", line)
        out.append(line)
    return " / ".join(out)


def pg_info(conn: Any) -> dict[str, Any]:
    import psycopg

    def one(sql: str) -> Any:
        row = conn.execute(sql).fetchone()
        return row[0] if row else None

    one("SELECT '[1]'::vector")  # loads pgvector, which defines hnsw.ef_search
    settings = {
        name: one(f"SHOW {name}")
        for name in (
            "shared_buffers",
            "maintenance_work_mem",
            "max_parallel_maintenance_workers",
            "work_mem",
            "effective_cache_size",
            "synchronous_commit",
            "fsync",
            "hnsw.ef_search",
        )
    }
    import importlib.metadata as md

    return {
        "pgserver": md.version("pgserver"),
        "postgres": one("SHOW server_version"),
        "pgvector": one("SELECT extversion FROM pg_extension WHERE extname = 'vector'"),
        "psycopg": psycopg.__version__,
        "settings": settings,
    }


# -- LangGraph's PostgresStore ---------------------------------------------------------------


class LangGraphBackend(Backend):
    """LangGraph's PostgresStore with ``index=``: what a LangGraph builder runs today. Items
    ``("bench",) / str(id)`` with value ``{"text": "v:ID", "bucket": B}``; the embedding
    function maps ``v:ID`` to the data set's vector ID and ``q:TOKEN`` to a prepared query."""

    name = "langgraph"
    requires = ("postgres",)
    NAMESPACE = ("bench",)
    BATCH = 100  # puts per store.batch call

    def __init__(self, config: dict[str, Any]) -> None:
        from langgraph.store.postgres import PostgresStore

        super().__init__(config)
        self.base = np.load(Path(config["data_dir"]) / "base.npy", mmap_mode="r")
        self.queries: dict[str, np.ndarray] = {}
        index = {
            "dims": config["dims"],
            "embed": self._embed,
            "fields": ["text"],
            "ann_index_config": {
                "kind": "hnsw",
                "m": config["m"],
                "ef_construction": config["ef_construction"],
            },
        }
        self._stack = contextlib.ExitStack()
        self.store = self._stack.enter_context(
            PostgresStore.from_conn_string(config["uri"], index=index)  # type: ignore[arg-type]
        )
        self._ef: int | None = None

    @classmethod
    def make_config(cls, args: argparse.Namespace, env: dict[str, Any]) -> dict[str, Any]:
        return {
            "uri": env["pg_uri_langgraph"],
            "data_dir": str(env["data_dir"]),
            "dims": env["dims"],
            "m": args.m,
            "ef_construction": args.ef_construction,
        }

    def _embed(self, texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            kind, _, token = text.partition(":")
            vector = self.base[int(token)] if kind == "v" else self.queries[token]
            out.append(vector.tolist())
        return out

    def setup(self, dims: int) -> None:
        with self.store._cursor() as cur:
            cur.execute(
                "DROP TABLE IF EXISTS store_vectors, store, store_migrations, "
                "vector_migrations CASCADE"
            )
        self.store.setup()

    def insert(self, batch: Batch) -> None:
        from langgraph.store.base import PutOp

        ops = [
            PutOp(self.NAMESPACE, str(int(i)), {"text": f"v:{int(i)}", "bucket": int(b)})
            for i, b in zip(batch.ids, batch.buckets, strict=True)
        ]
        for start in range(0, len(ops), self.BATCH):
            self.store.batch(ops[start : start + self.BATCH])

    def prepare(self, q: np.ndarray) -> str:
        token = str(len(self.queries))
        self.queries[token] = np.asarray(q, dtype=np.float32)
        return f"q:{token}"

    def _set_ef(self, ef_search: int | None) -> None:
        if ef_search != self._ef:
            with self.store._cursor() as cur:
                if ef_search is None:
                    cur.execute("RESET hnsw.ef_search")
                else:
                    cur.execute(f"SET hnsw.ef_search = {int(ef_search)}")
            self._ef = ef_search

    def search(
        self,
        q: Any,
        k: int,
        filter: dict[str, Any] | None = None,
        ef_search: int | None = None,
        **_: Any,
    ) -> list[int]:
        self._set_ef(ef_search)
        hits = self.store.search(self.NAMESPACE, query=q, filter=filter, limit=k)
        return [int(h.key) for h in hits]

    def plan(
        self, q: Any, k: int, filter: dict[str, Any] | None, ef_search: int | None, **_: Any
    ) -> str | None:
        """The store's own search SQL for this query, explained with the query's values (the
        store prepares its statements; PostgreSQL may later switch to a generic plan)."""
        from langgraph.store.base import SearchOp
        from langgraph.store.postgres import base as pg_base

        self._set_ef(ef_search)
        op = SearchOp(self.NAMESPACE, filter=filter, limit=k, query=q)
        queries, _ = self.store._prepare_batch_search_queries([(0, op)])
        text, params = queries[0]
        vector = self._embed([q])[0]
        params = [vector if p is pg_base.PLACEHOLDER else p for p in params]
        with self.store._cursor() as cur:
            cur.execute("EXPLAIN " + text, params)
            rows = cur.fetchall()
        return compact_plan(next(iter(r.values())) for r in rows)

    def disk(self) -> dict[str, int]:
        with self.store._cursor() as cur:
            cur.execute("CHECKPOINT")
            cur.execute(
                "SELECT pg_total_relation_size('store') AS store, "
                "pg_total_relation_size('store_vectors') AS vectors, "
                "pg_relation_size('store_vectors_embedding_idx') AS hnsw"
            )
            row = cur.fetchone()
        assert row is not None
        store, vectors, hnsw = int(row["store"]), int(row["vectors"]), int(row["hnsw"])
        return {
            "store_bytes": store,
            "store_vectors_bytes": vectors,
            "hnsw_index_bytes": hnsw,
            "total_bytes": store + vectors,
        }

    def info(self) -> dict[str, Any]:
        import importlib.metadata as md

        import psycopg

        with psycopg.connect(self.config["uri"], autocommit=True) as conn:
            found = pg_info(conn)
        found["langgraph-checkpoint-postgres"] = md.version("langgraph-checkpoint-postgres")
        found["m"] = self.config["m"]
        found["ef_construction"] = self.config["ef_construction"]
        found["index_while_inserting"] = True
        return found

    def close(self) -> None:
        self._stack.close()


# -- ctxstore --------------------------------------------------------------------------------


class CtxstoreServer:
    """A ``ctxstore-server`` this harness runs on a data directory of its own: started,
    stopped, restarted on the same directory and port, and its memory read from /proc."""

    def __init__(self, binary: Path, data: Path, flags: list[str], log_dir: Path) -> None:
        self.binary, self.data, self.flags, self.log_dir = binary, data, flags, log_dir
        self.listen = "127.0.0.1:0"  # the first start picks a port; a restart keeps it
        self.addr = ""
        self.proc: Any = None
        self.starts = 0
        self.log_path: Path | None = None

    def command(self) -> list[str]:
        return [
            str(self.binary),
            "--data",
            str(self.data),
            "--listen",
            self.listen,
            "--ready-file",
            str(self.log_dir / "ctxstore.ready"),
            *self.flags,
        ]

    def start(self, timeout: float = 600.0) -> float:
        """Starts the server and waits for its ready file (written once it accepts
        connections); returns the seconds from the spawn to the ready file."""
        import subprocess

        ready = self.log_dir / "ctxstore.ready"
        ready.unlink(missing_ok=True)
        self.starts += 1
        self.log_path = self.log_dir / f"ctxstore-{self.starts}.log"
        with self.log_path.open("wb") as log:
            started = time.perf_counter()
            self.proc = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        while not (ready.exists() and ready.read_text().endswith("\n")):
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"ctxstore-server exited with {self.proc.returncode} before it was ready; "
                    f"its log: {self.log_path}\n{self.log_tail()}"
                )
            if time.perf_counter() - started > timeout:
                self.proc.kill()
                raise RuntimeError(f"ctxstore-server not ready in {timeout} s: {self.log_path}")
            time.sleep(0.002)
        seconds = time.perf_counter() - started
        self.addr = ready.read_text().strip()
        self.listen = self.addr
        return seconds

    def stop(self, timeout: float = 60.0) -> dict[str, Any]:
        """SIGTERM (the server drains, syncs and exits 0); SIGKILL after ``timeout``."""
        import subprocess

        if self.proc is None or self.proc.poll() is not None:
            return {}
        started = time.perf_counter()
        self.proc.terminate()
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        return {"stop_s": round(time.perf_counter() - started, 3), "exit_code": code}

    def memory(self) -> dict[str, int]:
        """VmRSS and VmHWM (peak) of the server process, in bytes."""
        found: dict[str, int] = {}
        if self.proc is None:
            return found
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    found[key.lower() + "_bytes"] = int(value.split()[0]) * 1024
        return found

    def log_tail(self, lines: int = 20) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def wait_for_graphs(self, timeout: float = 7200.0) -> int | None:
        """Waits for the latest start's "vector graphs built" log line (the graphs rebuilt
        from the stored vectors at open, decision 0033 §4); returns its ``build_ms``."""
        started = time.perf_counter()
        while self.log_path is not None:
            text = self.log_path.read_text()
            found = re.search(r"vector graphs built.*?added=(\d+) build_ms=(\d+)", text)
            # A graph that took blobs is saved right after: wait for it, so that the disk
            # figures see the snapshot whole.
            saved = "vector graph snapshot saved" in text[found.end() :] if found else False
            if found and (found.group(1) == "0" or saved):
                return int(found.group(2))
            if self.proc is None or self.proc.poll() is not None:
                return None
            if time.perf_counter() - started > timeout:
                raise RuntimeError(f"no graphs built in {timeout} s: {self.log_path}")
            time.sleep(0.05)
        return None

    def recovery_ms(self) -> int | None:
        """``recovery_ms`` of the latest start's "store recovered" log line."""
        if self.log_path is None or not self.log_path.exists():
            return None
        found = re.search(r"store recovered.*?recovery_ms=(\d+)", self.log_path.read_text())
        return int(found.group(1)) if found else None


#: the servers this process started, by address (the loading process only: a client process
#: reaches the server by its address and never manages it)
CTXSTORE_SERVERS: dict[str, CtxstoreServer] = {}


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def ctxstore_service(args: argparse.Namespace) -> Iterator[dict[str, Any]]:
    """``ctxstore-server`` (``--ctxstore-server``, default the release build) on a fresh
    ``DIR/ctxstore``, listening on a free loopback port, stopped at the end; or, with
    ``--ctxstore-addr``, a server someone else runs (then no disk, memory or restart figures)."""
    if args.ctxstore_addr:
        yield {"ctxstore_addr": args.ctxstore_addr, "ctxstore_data": None, "ctxstore_token": None}
        return
    import shutil

    binary = Path(args.ctxstore_server or repo_root() / "target/release/ctxstore-server")
    if not binary.exists():
        raise SystemExit(
            f"no ctxstore-server at {binary}: build it (cargo build --release -p "
            "ctxstore-server) or pass --ctxstore-server PATH"
        )
    data = args.dir / "ctxstore"
    if data.exists():
        shutil.rmtree(data)
    server = CtxstoreServer(binary, data, shlex.split(args.ctxstore_flags or ""), args.dir)
    server.start()
    CTXSTORE_SERVERS[server.addr] = server
    try:
        yield {"ctxstore_addr": server.addr, "ctxstore_data": str(data), "ctxstore_token": ""}
    finally:
        CTXSTORE_SERVERS.pop(server.addr, None)
        server.stop()


def dir_bytes(path: Path) -> dict[str, int]:
    """``du``'s allocated bytes and the apparent bytes (file sizes) of the files under
    ``path``, with the server's fixed ``RESERVE`` file (``--disk-reserve``) apart."""
    allocated = apparent = reserve = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            st = os.lstat(os.path.join(root, name))
            allocated += st.st_blocks * 512
            apparent += st.st_size
            if name == "RESERVE" and Path(root) == path:
                reserve = st.st_blocks * 512
    return {"du_bytes": allocated, "apparent_bytes": apparent, "reserve_bytes": reserve}


class CtxstoreBackend(Backend):
    """ctxstore's vector search (decision 0033; docs/protocol.md, "Vector search") through the
    Python client (clients/python): one context ``bench``, entries ``i/0000042`` with value
    ``{"bucket": B}`` and one vector each, put by ``kv_put_vectors`` in requests of at most
    128 entries, searched by ``vector_search`` with the filter sent to the server."""

    name = "ctxstore"
    requires = ("ctxstore",)
    CONTEXT = "bench"
    INDEX = "vbench"
    PUT_MAX = 128  # entries per KV_PUT_VECTORS (the protocol's limit)

    def __init__(self, config: dict[str, Any]) -> None:
        import ctxstore

        super().__init__(config)
        self.client = ctxstore.Client(config["addr"], token=config["token"], timeout=600)
        self._pool: Any = None

    @classmethod
    def make_config(cls, args: argparse.Namespace, env: dict[str, Any]) -> dict[str, Any]:
        return {
            "addr": env["ctxstore_addr"],
            "token": env["ctxstore_token"],
            "data": env["ctxstore_data"],
            "context": cls.CONTEXT,
            "index": cls.INDEX,
            "ef_search": args.ctxstore_ef_search,
            "put_entries": cls.PUT_MAX,
            "put_in_flight": args.ctxstore_put_in_flight,
            "server_flags": args.ctxstore_flags or "",
        }

    @staticmethod
    def key(i: int) -> bytes:
        return b"i/%07d" % i

    def setup(self, dims: int) -> None:
        from ctxstore.errors import NotFound

        self.dims = dims
        c = self.config
        with contextlib.suppress(NotFound):  # an earlier run's, on a server that outlived it
            self.client.vector_index_drop(c["index"])
        with contextlib.suppress(NotFound):
            self.client.delete_context(c["context"])
        self.client.open_context(c["context"], get_or_create=True)
        self.client.vector_index_create(c["index"], dims, "cosine", c["ef_search"])
        if c["put_in_flight"] > 1:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(c["put_in_flight"])

    def _put(self, entries: dict[bytes, tuple[bytes, list[list[float]]]]) -> None:
        self.client.kv_put_vectors(self.config["context"], entries, self.config["index"])

    def insert(self, batch: Batch) -> None:
        vectors = batch.vectors.tolist()  # floats the client reads fastest
        requests = []
        for start in range(0, len(batch.ids), self.PUT_MAX):
            stop = min(start + self.PUT_MAX, len(batch.ids))
            requests.append(
                {
                    self.key(int(batch.ids[j])): (
                        json.dumps({"bucket": int(batch.buckets[j])}).encode(),
                        [vectors[j]],
                    )
                    for j in range(start, stop)
                }
            )
        if self._pool is None:
            for entries in requests:  # one at a time, each acknowledged durably
                self._put(entries)
        else:  # pipelined on the one connection, up to put_in_flight at once
            for done in self._pool.map(self._put, requests):
                assert done is None

    def build(self) -> None:
        """The graph is kept while the vectors are put, by one writer thread that trails the
        puts (searches scan what it has not taken yet exactly). Its state is not on the wire,
        so the harness restarts the server and waits for its "vector graphs built" line: the
        stop saves the graph as far as the writer got, the open loads that snapshot and
        inserts what it lacks on every CPU. The build figure is that stop and start."""
        server = self._server()
        if server is None:
            return
        import ctxstore

        self.client.close()
        server.stop()
        server.start()
        self.graph_build_ms = server.wait_for_graphs()
        self.client = ctxstore.Client(server.addr, token=self.config["token"], timeout=600)

    def prepare(self, q: np.ndarray) -> list[float]:
        return np.asarray(q, dtype=np.float32).tolist()

    def _search(
        self, q: Any, k: int, filter: dict[str, Any] | None, ef_search: int | None, exact: bool
    ) -> Any:
        return self.client.vector_search(
            self.config["context"],
            self.config["index"],
            q,
            k,
            filter=filter,
            exact=exact,
            ef_search=ef_search or 0,
        )

    def search(
        self,
        q: Any,
        k: int,
        filter: dict[str, Any] | None = None,
        ef_search: int | None = None,
        exact: bool = False,
        **_: Any,
    ) -> list[int]:
        hits = self._search(q, k, filter, ef_search, exact)
        return [int(hit.key[2:]) for hit in hits.hits]

    def filtered_variants(self) -> list[dict[str, Any]]:
        # as the server chooses, and with the EXACT flag (every candidate compared)
        return [{}, {"exact": True}]

    def plan(
        self,
        q: Any,
        k: int,
        filter: dict[str, Any] | None,
        ef_search: int | None,
        exact: bool = False,
        **_: Any,
    ) -> str | None:
        hits = self._search(q, k, filter, ef_search, exact)
        return f"VECTOR_HITS method={hits.method} candidates={hits.candidates}"

    def _server(self) -> CtxstoreServer | None:
        return CTXSTORE_SERVERS.get(self.config["addr"])

    def disk(self) -> dict[str, int]:
        if not self.config["data"]:
            return {}
        sizes = dir_bytes(Path(self.config["data"]))
        graphs = dir_bytes(Path(self.config["data"]) / "vectors")["du_bytes"]
        # the store's own bytes: du of the data directory less the fixed RESERVE file; the
        # graph snapshots (derived, DIR/vectors/) within them, and apart
        return {
            "total_bytes": sizes["du_bytes"] - sizes["reserve_bytes"],
            "graph_snapshot_bytes": graphs,
            **sizes,
        }

    def memory(self) -> dict[str, Any]:
        server = self._server()
        return server.memory() if server else {}

    def restart(self, q: Any, k: int) -> dict[str, Any]:
        """Stops the server, starts it again on the loaded data directory, and times the
        start until ready (the ready file) and until a first search is answered over a new
        connection. The page cache is warm (the files were just written)."""
        import ctxstore

        server = self._server()
        if server is None:
            return {}
        self.client.close()
        stopped = server.stop()
        started = time.perf_counter()
        ready_s = server.start()
        connect_at = time.perf_counter()
        self.client = ctxstore.Client(server.addr, token=self.config["token"], timeout=600)
        search_at = time.perf_counter()
        hits = self._search(q, k, None, None, False)
        done = time.perf_counter()
        graph_build_ms = server.wait_for_graphs()
        graph_at = time.perf_counter()
        found = {
            **stopped,
            "ready_s": round(ready_s, 3),
            "connect_s": round(search_at - connect_at, 4),
            "first_search_s": round(done - search_at, 4),
            "ready_and_first_search_s": round(done - started, 3),
            "first_search_method": hits.method,
            "graph_build_ms": graph_build_ms,
            "ready_to_graph_built_s": round(graph_at - started, 3),
            "first_search_hits": len(hits.hits),
            "recovery_ms": server.recovery_ms(),
            "open_check": "full" if "--open-check" not in server.flags else "as flagged",
        }
        found["memory_after_restart_and_search"] = server.memory()
        return found

    def info(self) -> dict[str, Any]:
        import importlib.metadata as md

        from ctxstore import _ops

        si = self.client.server_info()
        found: dict[str, Any] = {
            "server": si.server_name,
            "protocol_version": si.version,
            "client": md.version("ctxstore"),
            "indexes": [
                {
                    "name": x.name,
                    "dims": x.dims,
                    "metric": x.metric,
                    "ef_search": x.ef_search,
                    "vectors": x.vectors,
                }
                for x in self.client.vector_indexes()
            ],
            "ef_search_asked": self.config["ef_search"],
            "index_while_inserting": True,
            "put_entries": self.PUT_MAX,
            "put_in_flight": self.config["put_in_flight"],
        }
        server = self._server()
        if server is not None:
            found["server_command"] = shlex.join(server.command())
            found["memory_end"] = server.memory()
        # what the pure-Python client spends before a request leaves (inside the timed
        # inserts and searches): checking and converting the floats
        rng = np.random.default_rng(0)
        v = rng.standard_normal((self.PUT_MAX, self.dims)).astype(np.float32).tolist()
        entries = {self.key(i): (b'{"bucket": 0}', [v[i]]) for i in range(self.PUT_MAX)}
        t0 = time.perf_counter()
        for _ in range(5):
            _ops.vector_entries(entries, None)
        per_vector = (time.perf_counter() - t0) / (5 * self.PUT_MAX)
        t0 = time.perf_counter()
        for _ in range(200):
            _ops._components(v[0], "q")
        per_query = (time.perf_counter() - t0) / 200
        found["client_encode_us"] = {
            "per_put_vector": round(per_vector * 1e6, 1),
            "per_query_vector": round(per_query * 1e6, 1),
        }
        return found

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
        self.client.close()


BACKENDS: dict[str, type[Backend]] = {
    b.name: b for b in (PgvectorBackend, LangGraphBackend, CtxstoreBackend)
}


# -- measuring -------------------------------------------------------------------------------


def quantile(sorted_values: list[float], q: float) -> float:
    return sorted_values[round((len(sorted_values) - 1) * q)]


def latency_summary(latencies_us: list[float]) -> dict[str, float]:
    s = sorted(latencies_us)
    return {
        "p50_us": round(quantile(s, 0.5), 1),
        "p90_us": round(quantile(s, 0.9), 1),
        "p99_us": round(quantile(s, 0.99), 1),
        "mean_us": round(sum(s) / len(s), 1),
        "max_us": round(s[-1], 1),
    }


def score(results: list[list[int]], truth: np.ndarray, bucket_of: np.ndarray | None) -> dict:
    """recall@10: the answers' share of the exact top 10 (of the top ``len(truth row)`` when
    fewer than 10 items pass the filter); short of k: answers with fewer than that many."""
    want = truth.shape[1]
    hits = sum(len(set(r) & set(t.tolist())) for r, t in zip(results, truth, strict=True))
    found = [len(r) for r in results]
    out = {
        "recall_at_10": round(hits / (len(results) * want), 4),
        "results_mean": round(sum(found) / len(found), 2),
        "queries_short_of_k": sum(1 for f in found if f < want),
        "queries_empty": sum(1 for f in found if f == 0),
    }
    if bucket_of is not None:
        wrong = sum(1 for r in results for i in r if bucket_of[i] != gen.FILTER_BUCKET)
        out["results_failing_filter"] = wrong
    return out


def one_client(
    backend: Backend,
    prepared: list[Any],
    truth: np.ndarray,
    *,
    ef: int | None,
    filter: dict[str, Any] | None,
    warmup: int,
    variant: dict[str, Any],
    bucket: np.ndarray,
) -> dict[str, Any]:
    for q in prepared[:warmup]:
        backend.search(q, K, filter, ef, **variant)
    latencies, results = [], []
    started = time.perf_counter()
    for q in prepared:
        t0 = time.perf_counter()
        ids = backend.search(q, K, filter, ef, **variant)
        latencies.append((time.perf_counter() - t0) * 1e6)
        results.append(ids)
    wall = time.perf_counter() - started
    found: dict[str, Any] = {
        "clients": 1,
        "ef_search": ef,
        "filter": filter,
        "variant": variant,
        "queries": len(prepared),
        **score(results, truth, bucket if filter else None),
        **latency_summary(latencies),
        "qps": round(len(prepared) / wall, 1),
    }
    found["plan"] = backend.plan(prepared[0], K, filter, ef, **variant)
    return found


def _client_process(
    client: int,
    name: str,
    config: dict[str, Any],
    queries: np.ndarray,
    order: list[int],
    ef: int | None,
    warmup: int,
    barrier: Any,
    out: Any,
) -> None:
    try:
        backend = BACKENDS[name](config)
        prepared = [backend.prepare(queries[i]) for i in order]
        for q in prepared[:warmup]:
            backend.search(q, K, None, ef)
        barrier.wait()
        latencies, results = [], []
        start = time.monotonic()
        for q in prepared:
            t0 = time.perf_counter()
            results.append(backend.search(q, K, None, ef))
            latencies.append((time.perf_counter() - t0) * 1e6)
        end = time.monotonic()
        backend.close()
        out.put(
            {
                "client": client,
                "start": start,
                "end": end,
                "latencies": latencies,
                "results": results,
            }
        )
    except BaseException as error:  # noqa: BLE001 - reported to the parent
        with contextlib.suppress(Exception):
            barrier.abort()
        out.put({"error": f"{type(error).__name__}: {error}"})


def many_clients(
    backend: Backend,
    queries: np.ndarray,
    truth: np.ndarray,
    *,
    clients: int,
    ef: int | None,
    per_client: int,
    warmup: int,
) -> dict[str, Any]:
    """``clients`` processes (spawned: no state shared with this one), each with its own
    connection, each running ``per_client`` queries (the query set from its own offset) from a
    common start."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(clients + 1)
    out = ctx.Queue()
    config = backend.session_config()
    procs = []
    orders = []
    for c in range(clients):
        offset = (c * len(queries)) // clients
        order = [(offset + j) % len(queries) for j in range(per_client)]
        orders.append(order)
        p = ctx.Process(
            target=_client_process,
            args=(c, backend.name, config, queries, order, ef, warmup, barrier, out),
        )
        p.start()
        procs.append(p)
    try:
        barrier.wait(timeout=600)
    except Exception:  # noqa: BLE001 - a client failed; its error follows
        pass
    answers = [out.get(timeout=3600) for _ in procs]
    for p in procs:
        p.join()
    errors = [a["error"] for a in answers if "error" in a]
    if errors:
        raise RuntimeError(f"{len(errors)} client(s) failed: {errors[0]}")
    latencies = [x for a in answers for x in a["latencies"]]
    wall = max(a["end"] for a in answers) - min(a["start"] for a in answers)
    results = [r for a in answers for r in a["results"]]
    truth_rows = np.concatenate([truth[orders[a["client"]]] for a in answers])
    quality = score(results, truth_rows, None)
    return {
        "clients": clients,
        "ef_search": ef,
        "filter": None,
        "variant": {},
        "queries": len(latencies),
        **quality,
        **latency_summary(latencies),
        "qps": round(len(latencies) / wall, 1),
        "wall_s": round(wall, 3),
    }


# -- the run ---------------------------------------------------------------------------------


@contextlib.contextmanager
def postgres(args: argparse.Namespace) -> Iterator[dict[str, Any]]:
    """PostgreSQL from the pgserver wheel in ``DIR/pg``, configured, restarted, and stopped
    at the end (the data directory is kept unless ``--fresh-pg``)."""
    import warnings

    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    import pgserver
    import psycopg

    pgdata = args.dir / "pg"
    if args.fresh_pg and pgdata.exists():
        import shutil

        shutil.rmtree(pgdata)
    server = pgserver.get_server(pgdata, cleanup_mode="stop")
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        for name, value in (
            ("shared_buffers", args.pg_shared_buffers),
            ("maintenance_work_mem", args.pg_maintenance_work_mem),
            ("max_connections", str(max(100, args.clients + 20))),
        ):
            conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
    server.cleanup()  # stops it: shared_buffers and max_connections need a restart
    server = pgserver.get_server(pgdata, cleanup_mode="stop")
    try:
        uri = server.get_uri()
        with psycopg.connect(uri, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = 'lgstore'").fetchone():
                conn.execute("CREATE DATABASE lgstore")
        with psycopg.connect(server.get_uri(database="lgstore"), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        yield {"pg_uri": uri, "pg_uri_langgraph": server.get_uri(database="lgstore")}
    finally:
        server.cleanup()


#: what a backend may need started first: name -> a context manager of (args) yielding the
#: entries it adds to ``env``
SERVICES: dict[str, Any] = {"postgres": postgres, "ctxstore": ctxstore_service}


def run_backend(
    name: str,
    args: argparse.Namespace,
    env: dict[str, Any],
    data: dict[str, Any],
) -> dict[str, Any]:
    cls = BACKENDS[name]
    n = args.langgraph_n if name == "langgraph" else args.n
    n = min(n, args.n)
    base, bucket, queries = data["base"], data["bucket"], data["queries"]
    if n == args.n:
        gt, gt_filtered = data["gt"], data["gt_filtered"]
    else:  # the first n items: their own exact answers
        head = np.asarray(base[:n])
        gt = gen.exact_topk(head, queries, None, K)
        gt_filtered = gen.exact_topk(
            head, queries, lambda ids: ids % gen.BUCKETS == gen.FILTER_BUCKET, K
        )
    log = lambda msg: print(f"[{name}] {msg}", file=sys.stderr, flush=True)  # noqa: E731

    config = cls.make_config(args, env)
    backend = cls(config)
    found: dict[str, Any] = {"n": n, "config": {k: v for k, v in config.items() if k != "uri"}}
    try:
        backend.setup(base.shape[1])
        log(f"inserting {n} vectors in batches of {args.batch}")
        started = time.perf_counter()
        for start in range(0, n, args.batch):
            stop = min(start + args.batch, n)
            backend.insert(
                Batch(
                    ids=np.arange(start, stop, dtype=np.int64),
                    vectors=np.asarray(base[start:stop], dtype=np.float32),
                    buckets=bucket[start:stop],
                )
            )
        insert_s = time.perf_counter() - started
        log(f"inserted in {insert_s:.2f} s; building")
        started = time.perf_counter()
        backend.build()
        build_s = time.perf_counter() - started
        log(f"built in {build_s:.2f} s")
        found["insert"] = {
            "seconds": round(insert_s, 3),
            "vectors_per_s": round(n / insert_s, 1),
            "batch": args.batch,
        }
        found["build"] = {"seconds": round(build_s, 3)}
        found["load_and_index"] = {
            "seconds": round(insert_s + build_s, 3),
            "vectors_per_s": round(n / (insert_s + build_s), 1),
        }
        disk = backend.disk()
        if "total_bytes" in disk:
            disk["bytes_per_vector"] = round(disk["total_bytes"] / n, 1)
        found["disk"] = disk
        memory = backend.memory()
        if memory:
            found["memory"] = memory

        prepared = [backend.prepare(q) for q in queries]
        searches = []
        for ef in args.ef_search:
            log(f"ef_search {ef}: one client")
            searches.append(
                one_client(
                    backend,
                    prepared,
                    gt,
                    ef=ef,
                    filter=None,
                    warmup=args.warmup,
                    variant={},
                    bucket=bucket,
                )
            )
            for variant in backend.filtered_variants():
                log(f"ef_search {ef}: one client, filtered {variant or ''}")
                searches.append(
                    one_client(
                        backend,
                        prepared,
                        gt_filtered,
                        ef=ef,
                        filter=dict(gen_filter()),
                        warmup=args.warmup,
                        variant=variant,
                        bucket=bucket,
                    )
                )
            if args.clients > 1:
                log(f"ef_search {ef}: {args.clients} clients")
                searches.append(
                    many_clients(
                        backend,
                        queries,
                        gt,
                        clients=args.clients,
                        ef=ef,
                        per_client=args.per_client or len(queries),
                        warmup=min(args.warmup, 10),
                    )
                )
        found["search"] = searches
        restart = backend.restart(prepared[0], K)
        if restart:
            log(f"restarted: ready in {restart['ready_s']} s")
            found["restart"] = restart
        found["info"] = backend.info()
    finally:
        backend.close()
    return found


def gen_filter() -> dict[str, Any]:
    return {"bucket": gen.FILTER_BUCKET}


def machine() -> dict[str, Any]:
    found: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "loadavg": os.getloadavg(),
    }
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                found["cpu"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                found["mem_total_kib"] = int(line.split()[1])
    return found


def plan_kind(plan: str | None) -> str:
    """The summary's word for a plan: does it walk the HNSW index, or compare every row?
    (ctxstore's: VECTOR_HITS' method and the vectors compared.)"""
    if not plan:
        return ""
    found = re.search(r"method=(\w+) candidates=(\d+)", plan)
    if found:
        return f"{found.group(1)} ({int(found.group(2)):,} compared)"
    return "hnsw" if "_embedding_idx" in plan else "exact (no hnsw)"


def backend_title(name: str, b: dict[str, Any]) -> str:
    info = b.get("info", {})
    if "server" in info:  # ctxstore
        return (
            f"== {name}: n={b['n']:,}  {info['server']} (protocol {info.get('protocol_version')})"
            f"  ef_search={[x['ef_search'] for x in info.get('indexes', [])]}"
        )
    return (
        f"== {name}: n={b['n']:,}  postgres {info.get('postgres')}  "
        f"pgvector {info.get('pgvector')}  m={info.get('m')} "
        f"ef_construction={info.get('ef_construction')}"
    )


def mib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**20:,.1f} MiB"


def summary(report: dict[str, Any]) -> str:
    """The report as a few lines a person reads."""
    ds, m = report["dataset"], report["machine"]
    lines = [
        f"{ds['n']:,} vectors x {ds['dims']} dims, {ds['queries']} queries, filter "
        f"{json.dumps(ds['filter'])} passes {ds['filter_passing']:,}; machine: "
        f"{m.get('cpu', '?')}, {m['cpus']} CPUs, load {m['loadavg'][0]:.2f} at start"
    ]
    for name, b in report["backends"].items():
        disk = b["disk"]
        per_s = b["load_and_index"]["vectors_per_s"]
        lines += [
            "",
            backend_title(name, b),
            f"insert {b['insert']['vectors_per_s']:,.0f}/s ({b['insert']['seconds']} s); "
            f"build {b['build']['seconds']} s; insert+build {per_s:,.0f}/s",
            f"disk {disk.get('total_bytes', 0):,} B = "
            f"{disk.get('bytes_per_vector', 0):,.0f} B/vector"
            + (
                f" (HNSW index {disk['hnsw_index_bytes']:,} B)"
                if "hnsw_index_bytes" in disk
                else ""
            )
            + (
                f" (graph snapshots {disk['graph_snapshot_bytes']:,} B of it)"
                if "graph_snapshot_bytes" in disk
                else ""
            )
            + (
                f" (du of the data directory {disk['du_bytes']:,} B less RESERVE "
                f"{disk['reserve_bytes']:,} B; apparent {disk['apparent_bytes']:,} B)"
                if "du_bytes" in disk
                else ""
            ),
            f"{'ef':>4} {'clients':>7} {'filter':<26} {'recall@10':>9} {'results':>7} "
            f"{'short':>5} {'p50 us':>9} {'p99 us':>9} {'qps':>8}  path",
        ]
        for r in b["search"]:
            filt = "-" if not r["filter"] else json.dumps(r["filter"])
            if r["variant"]:
                filt += " " + ",".join(r["variant"])
            lines.append(
                f"{r['ef_search']!s:>4} {r['clients']:>7} {filt:<26} "
                f"{r['recall_at_10']:>9.4f} {r['results_mean']:>7.2f} "
                f"{r['queries_short_of_k']:>5} {r['p50_us']:>9,.0f} {r['p99_us']:>9,.0f} "
                f"{r['qps']:>8,.0f}  {plan_kind(r.get('plan'))}"
            )
        if "memory" in b:
            mem = b["memory"]
            lines.append(
                f"server memory after load: RSS {mib(mem.get('vmrss_bytes'))}, "
                f"peak {mib(mem.get('vmhwm_bytes'))}"
            )
        if "restart" in b:
            rs = b["restart"]
            lines.append(
                f"restart on the loaded data: stop {rs.get('stop_s')} s; ready in "
                f"{rs['ready_s']} s (recovery {rs.get('recovery_ms')} ms); ready + first "
                f"search {rs['ready_and_first_search_s']} s ({rs['first_search_method']})"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=10_000, help="vectors (default 10,000)")
    parser.add_argument("--queries", type=int, default=1_000, help="query vectors (default 1,000)")
    parser.add_argument(
        "--clients", type=int, default=32, help="concurrent clients (default 32; 1: none)"
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=Path("/tmp/vecbench"),
        help="work directory: data sets, the PostgreSQL data directory, reports",
    )
    parser.add_argument(
        "--backends",
        default="pgvector",
        help=f"comma-separated, of {', '.join(BACKENDS)} (default pgvector)",
    )
    parser.add_argument("--json", type=Path, help="the report (default DIR/report-N.json)")
    parser.add_argument("--seed", type=int, default=gen.SEED)
    parser.add_argument("--batch", type=int, default=1_000, help="vectors per insert call")
    parser.add_argument(
        "--insert-mode",
        choices=("copy", "executemany"),
        default="copy",
        help="pgvector: binary COPY per batch, or INSERT executemany per batch",
    )
    parser.add_argument("--m", type=int, default=16, help="HNSW links a node (pgvector default 16)")
    parser.add_argument(
        "--ef-construction",
        type=int,
        default=128,
        help="HNSW build breadth (default 128, the spike's; pgvector's default is 64)",
    )
    parser.add_argument(
        "--ef-search",
        default="40,128",
        help="search breadths, comma-separated (default 40,128; 40 is pgvector's default)",
    )
    parser.add_argument(
        "--warmup", type=int, default=50, help="untimed queries before each timed set"
    )
    parser.add_argument(
        "--per-client", type=int, help="queries each concurrent client runs (default: --queries)"
    )
    parser.add_argument(
        "--langgraph-n",
        type=int,
        default=10_000,
        help="items put in LangGraph's PostgresStore (the first of the N; default 10,000)",
    )
    parser.add_argument("--pg-shared-buffers", default="2GB")
    parser.add_argument(
        "--pg-maintenance-work-mem",
        default="4GB",
        help="for the HNSW build (pgvector builds in memory while the graph fits)",
    )
    parser.add_argument(
        "--pg-parallel-workers",
        type=int,
        help="max_parallel_maintenance_workers for the build (default: the server's, 2)",
    )
    parser.add_argument(
        "--pg-index-first",
        action="store_true",
        help="pgvector: create the HNSW index before inserting (each insert updates "
        "the graph, as in PostgresStore and ctxstore) instead of building it after",
    )
    parser.add_argument("--fresh-pg", action="store_true", help="a new PostgreSQL data directory")
    parser.add_argument(
        "--ctxstore-server",
        help="the ctxstore-server binary (default: target/release/ctxstore-server of this "
        "checkout); it runs on a fresh DIR/ctxstore",
    )
    parser.add_argument(
        "--ctxstore-flags", help="more flags for ctxstore-server, one string (shell words)"
    )
    parser.add_argument(
        "--ctxstore-addr",
        help="use the ctxstore server at HOST:PORT (token: $CTXSTORE_TOKEN) instead of "
        "starting one: no disk, memory or restart figures then",
    )
    parser.add_argument(
        "--ctxstore-ef-search",
        type=int,
        default=0,
        help="the index's ef_search at creation (default 0: the server's, 128)",
    )
    parser.add_argument(
        "--ctxstore-put-in-flight",
        type=int,
        default=1,
        help="KV_PUT_VECTORS requests in flight at once on the loading connection (default 1: "
        "one at a time, as pgvector's COPY batches)",
    )
    args = parser.parse_args()
    args.ef_search = [int(x) for x in args.ef_search.split(",") if x]
    args.dir = args.dir.resolve()
    args.dir.mkdir(parents=True, exist_ok=True)
    backends = [b for b in args.backends.split(",") if b]
    for b in backends:
        if b not in BACKENDS:
            parser.error(f"unknown backend {b!r} (known: {', '.join(BACKENDS)})")

    started_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    start_machine = machine()
    data_dir = args.dir / f"data-{args.n}-{args.queries}-{args.seed}"
    meta = gen.ensure(data_dir, args.n, args.queries, seed=args.seed)
    data = gen.load(data_dir)
    env: dict[str, Any] = {"data_dir": data_dir, "dims": meta["dims"]}

    report: dict[str, Any] = {
        "schema": SCHEMA,
        "started": started_at,
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "machine": start_machine,
        "dataset": meta | {"dir": str(data_dir), "generator": "benches/vector/gen.py"},
        "k": K,
        "backends": {},
    }
    with contextlib.ExitStack() as services:
        for service in dict.fromkeys(s for b in backends for s in BACKENDS[b].requires):
            env.update(services.enter_context(SERVICES[service](args)))
        for name in backends:
            report["backends"][name] = run_backend(name, args, env, data)
    report["machine"]["loadavg_end"] = os.getloadavg()
    report["finished"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")

    out = args.json or args.dir / f"report-{args.n}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(summary(report))
    print(f"\nreport: {out}")


if __name__ == "__main__":
    main()
