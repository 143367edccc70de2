"""The two shells over one definition of every call (ctxstore._calls, issue 30): both
clients have the same calls, with the definition's parameters and docstring, blocking on
Client and coroutines (async iterators for ``iter_*``) on AsyncClient."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import ctxstore
from ctxstore import _calls

from conftest import ServerProcess

DEFINITIONS = {
    name: definition
    for name, definition in vars(_calls.Calls).items()
    if isinstance(definition, (_calls.call, _calls.listing, _calls.following, _calls.opening))
}


def _public(cls: type[Any]) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_") and callable(getattr(cls, name))}


def test_both_clients_have_every_call_and_the_same_public_methods() -> None:
    assert len(DEFINITIONS) >= 46
    assert set(DEFINITIONS) <= _public(ctxstore.Client)
    # Besides the calls, each has its lifecycle: server_info, close (and connect for asyncio).
    assert _public(ctxstore.Client) - set(DEFINITIONS) == {"server_info", "close"}
    assert _public(ctxstore.AsyncClient) - set(DEFINITIONS) == {"server_info", "close", "connect"}


@pytest.mark.parametrize("name", sorted(DEFINITIONS))
def test_each_call_is_a_method_of_its_kind_on_each_client(name: str) -> None:
    definition = DEFINITIONS[name].define
    parameters = list(inspect.signature(definition).parameters.values())[1:]
    # Listings and feeds (read_stream, watch) are iterators on both shells.
    listing = isinstance(DEFINITIONS[name], (_calls.listing, _calls.following))
    for cls, asynchronous in ((ctxstore.Client, False), (ctxstore.AsyncClient, True)):
        method = vars(cls)[name]
        assert inspect.isfunction(method), (cls.__name__, name)
        assert inspect.iscoroutinefunction(method) == (asynchronous and not listing)
        assert method.__qualname__ == f"{cls.__name__}.{name}"
        assert method.__doc__ == definition.__doc__ and method.__doc__
        signature = inspect.signature(method)
        assert list(signature.parameters.values())[1:] == parameters
        returned = str(signature.return_annotation)
        assert not returned.startswith(("Call[", "Listing[", "Following[", "Opening")), returned
        if listing:
            assert returned.startswith("AsyncIterator[" if asynchronous else "Iterator[")


def test_a_shell_of_an_unknown_kind_is_refused() -> None:
    with pytest.raises(TypeError, match="shell"):

        class Threaded(_calls.Calls, shell="threads"):  # type: ignore[arg-type]
            pass


async def test_the_same_call_gives_the_same_answer_on_both_shells(server: ServerProcess) -> None:
    with ctxstore.Client(server.addr) as client:
        async with ctxstore.AsyncClient(server.addr) as aclient:
            name = f"shells-{id(client)}"
            client.open_context(name)
            appended = [client.append(name, f"turn {i}".encode()) for i in range(3)]
            page = client.last(name, payloads=True)
            assert await aclient.last(name, payloads=True) == page
            assert [t.turn_id for t in page.turns] == [a.turn.turn_id for a in appended]
            assert [i.context_id async for i in aclient.iter_contexts(name_prefix=name)] == [
                i.context_id for i in client.iter_contexts(name_prefix=name)
            ]
            assert await aclient.replay(appended[-1].turn.turn_id) == client.replay(
                appended[-1].turn.turn_id
            )
