"""One definition, two shells, for the framework adapters (``adk``, ``pydantic_ai``).

An adapter method is written once, as a *plan*: a generator that yields the client calls it
needs and receives their results. :func:`run_sync` runs a plan on a :class:`~ctxstore.Client`,
:func:`run_async` on an :class:`~ctxstore.AsyncClient`; the plan never touches a socket, so
the blocking and the asyncio methods of an adapter cannot drift apart (the pattern of
psycopg 3, and of the clients' own ``_ops.py``, one level up: these plans call the clients'
public methods only).

A plan yields either one :class:`Call` (and receives its result) or a tuple of calls, which
the asyncio shell sends at once (pipelined on the one connection) and the blocking shell one
after the other; the plan receives their results as a list, in order. A call that fails
raises its exception into the plan at the ``yield``, unless the call names a value to
answer for :class:`~ctxstore.errors.NotFound` instead (``Call.not_found``), which is how a
plan asks "this context, or nothing" without a round trip of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .aio import AsyncClient
from .client import Client
from .errors import NotFound

__all__ = ["Call", "Plan", "call", "run_async", "run_sync"]

T = TypeVar("T")

_RAISE: Any = object()


@dataclass(frozen=True)
class Call:
    """One client method call: ``method`` of :class:`~ctxstore.Client` /
    :class:`~ctxstore.AsyncClient` with ``args`` and ``kwargs``. ``collect``: the method
    returns an iterator (``iter_*``) whose items are gathered into a list. ``not_found``:
    the value answered instead of raising NotFound (unset: NotFound is raised)."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    collect: bool = False
    not_found: Any = _RAISE


def call(method: str, *args: Any, **kwargs: Any) -> Call:
    """A :class:`Call` of ``method(*args, **kwargs)``."""
    return Call(method, args, kwargs)


Step = Call | tuple[Call, ...]
Plan = Generator[Step, Any, T]
"""A generator of steps returning the method's result."""


def _sync_one(client: Client, step: Call) -> Any:
    try:
        result = getattr(client, step.method)(*step.args, **step.kwargs)
        return list(result) if step.collect else result
    except NotFound:
        if step.not_found is _RAISE:
            raise
        return step.not_found


async def _async_one(client: AsyncClient, step: Call) -> Any:
    try:
        if step.collect:
            return [item async for item in getattr(client, step.method)(*step.args, **step.kwargs)]
        return await getattr(client, step.method)(*step.args, **step.kwargs)
    except NotFound:
        if step.not_found is _RAISE:
            raise
        return step.not_found


def run_sync(client: Client, plan: Plan[T]) -> T:
    """Runs ``plan`` on a blocking client (the calls of a tuple one after the other)."""
    result: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = plan.send(result) if error is None else plan.throw(error)
        except StopIteration as stop:
            value: T = stop.value
            return value
        result, error = None, None
        try:
            if isinstance(step, Call):
                result = _sync_one(client, step)
            else:
                result = [_sync_one(client, one) for one in step]
        except Exception as failed:  # handed to the plan, which decides
            error = failed


async def run_async(client: AsyncClient, plan: Plan[T]) -> T:
    """Runs ``plan`` on an asyncio client (the calls of a tuple at once, pipelined)."""
    result: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = plan.send(result) if error is None else plan.throw(error)
        except StopIteration as stop:
            value: T = stop.value
            return value
        result, error = None, None
        try:
            if isinstance(step, Call):
                result = await _async_one(client, step)
            else:
                outcomes = await asyncio.gather(
                    *(_async_one(client, one) for one in step), return_exceptions=True
                )
                failures = [o for o in outcomes if isinstance(o, BaseException)]
                if failures:
                    raise failures[0]
                result = list(outcomes)
        except Exception as failed:  # handed to the plan, which decides
            error = failed
