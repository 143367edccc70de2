"""The LangGraph server's checkpointer and long-term memory store, on ctxstore.

``langgraph.json`` names these two async context managers (``checkpointer.path`` and
``store.path``); the server enters each once at start-up and leaves it at shutdown. The
server address and token come from ``CTXSTORE_ADDR`` and ``CTXSTORE_TOKEN`` (default
``127.0.0.1:7411``, no token), as for the ``ctxstore`` CLI; ``CTXSTORE_STORE`` names the
store (default ``default``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator

from ctxstore.langgraph import CtxstoreSaver, CtxstoreStore


@contextlib.asynccontextmanager
async def checkpointer() -> AsyncIterator[CtxstoreSaver]:
    """Threads and their checkpoints (a ``BaseCheckpointSaver``)."""
    async with CtxstoreSaver.from_addr() as saver:
        yield saver


@contextlib.asynccontextmanager
async def store() -> AsyncIterator[CtxstoreStore]:
    """Long-term memory shared by every thread (a ``BaseStore``)."""
    async with CtxstoreStore.from_addr(name=os.environ.get("CTXSTORE_STORE", "default")) as made:
        yield made
