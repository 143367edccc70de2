"""ctxstore.adk against a real server: every session operation compared with ADK's own
InMemorySessionService on random sequences (hypothesis), artifacts compared with
InMemoryArtifactService, the ADK error conventions, bad input refused before anything is
written, a restart, and ``adk api_server --session_service_uri ctxstore://...`` end to end."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.adk.artifacts import InMemoryArtifactService
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.input_validation_error import InputValidationError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions import InMemorySessionService, Session
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctxstore
from ctxstore.adk import (
    EVENT_TYPE,
    STATE_TYPE,
    CtxstoreArtifactService,
    CtxstoreSessionService,
    register,
)

from conftest import ServerProcess, new_server

try:
    from google.adk.errors._stale_session_error import StaleSessionError
except ImportError:  # older ADK: the same race is a ValueError
    StaleSessionError = ValueError  # type: ignore[misc, assignment]

# Identifiers with the characters the context names escape ("/" and "%"), few enough that
# random operations meet the same sessions again.
APPS = ["app", "b/c"]
USERS = ["u", "x/y"]
TRIPLES = [("app", "u", "s1"), ("app", "x/y", "%2F"), ("b/c", "u", "  s/3 ")]
KEYS = ["k1", "k2", "app:a1", "app:a2", "user:u1", "temp:t1", "temp:t2"]
VALUES = st.one_of(
    st.integers(-5, 5),
    st.text(max_size=5),
    st.none(),
    st.lists(st.integers(0, 3), max_size=3),
    st.dictionaries(st.sampled_from(["x", "y"]), st.booleans(), max_size=2),
)
DELTAS = st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=4)


def _ns() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


def _norm(session: Session | None) -> Any:
    """What both services must agree on (not ``last_update_time``: see below)."""
    if session is None:
        return None
    return (
        session.id,
        session.app_name,
        session.user_id,
        session.state,
        [e.model_dump(mode="json", exclude_none=True) for e in session.events],
    )


def _event(n: int, delta: dict[str, Any], text: str) -> Event:
    return Event(
        author="user" if n % 2 else "agent",
        invocation_id=f"inv-{n // 3}",
        timestamp=1_000_000.0 + n // 2,  # ties too: ADK keeps their order
        content=types.Content(role="user", parts=[types.Part(text=text)]),
        actions=EventActions(state_delta=copy.deepcopy(delta)),
    )


APPEND = st.tuples(
    st.just("append"),
    st.sampled_from(TRIPLES),
    DELTAS,
    st.text(max_size=8),
    st.integers(0, 5).map(lambda n: n == 0),  # partial (not stored) one time in six
)
GET = st.tuples(
    st.just("get"),
    st.sampled_from(TRIPLES),
    st.one_of(st.none(), st.integers(0, 4)),
    st.one_of(st.none(), st.integers(0, 12)),
)
STEPS = {
    "create": st.tuples(st.just("create"), st.sampled_from(TRIPLES), DELTAS),
    "append": APPEND,
    "get": GET,
    "list": st.tuples(st.just("list"), st.sampled_from(APPS), st.sampled_from([None, *USERS])),
    "delete": st.tuples(st.just("delete"), st.sampled_from(TRIPLES)),
    "user_state": st.tuples(st.just("user_state"), st.sampled_from(APPS), st.sampled_from(USERS)),
}
# Weighted: mostly appends and reads, so that sessions grow long enough for the windows.
KINDS = ["append"] * 6 + ["get"] * 4 + ["create", "list", "delete", "user_state"]
OPS = st.lists(st.sampled_from(KINDS).flatmap(STEPS.__getitem__), min_size=10, max_size=40)
# Each sequence starts by creating every session of TRIPLES (with these states), so that its
# operations meet existing sessions; creates in OPS then also meet taken ids.
STARTS = st.lists(DELTAS, min_size=len(TRIPLES), max_size=len(TRIPLES))


async def _compare(
    ours: CtxstoreSessionService, model: InMemorySessionService, ops: list[Any], sync: bool
) -> None:
    counter = 0
    for op in ops:
        kind = op[0]
        if kind == "create":
            _, (app, user, sid), state = op
            outcome = []
            for service in (model, ours):
                try:
                    if sync and service is ours:
                        made = ours.create_session_sync(
                            app_name=app, user_id=user, state=copy.deepcopy(state), session_id=sid
                        )
                    else:
                        made = await service.create_session(
                            app_name=app, user_id=user, state=copy.deepcopy(state), session_id=sid
                        )
                    outcome.append(_norm(made))
                except AlreadyExistsError:
                    outcome.append("exists")
            assert outcome[0] == outcome[1], op
        elif kind == "append":
            _, (app, user, sid), delta, text, partial = op
            counter += 1
            read = [
                await model.get_session(app_name=app, user_id=user, session_id=sid),
                await ours.get_session(app_name=app, user_id=user, session_id=sid),
            ]
            assert _norm(read[0]) == _norm(read[1]), op
            if read[0] is None:
                continue
            event = _event(counter, delta, text)
            event.partial = partial or None
            results = []
            for service, session in ((model, read[0]), (ours, read[1])):
                assert session is not None
                appended = await service.append_event(session, event.model_copy(deep=True))
                results.append((appended.model_dump(mode="json"), _norm(session)))
            assert results[0] == results[1], op
        elif kind == "get":
            _, (app, user, sid), recent, after = op
            config = None
            if recent is not None or after is not None:
                config = GetSessionConfig(
                    num_recent_events=recent,
                    after_timestamp=None if after is None else 1_000_000.0 + after,
                )
            got_model = await model.get_session(
                app_name=app, user_id=user, session_id=sid, config=config
            )
            if sync:
                got = ours.get_session_sync(
                    app_name=app, user_id=user, session_id=sid, config=config
                )
            else:
                got = await ours.get_session(
                    app_name=app, user_id=user, session_id=sid, config=config
                )
            assert _norm(got_model) == _norm(got), op
        elif kind == "list":
            _, app, user = op
            listed_model = await model.list_sessions(app_name=app, user_id=user)
            if sync:
                listed = ours.list_sessions_sync(app_name=app, user_id=user)
            else:
                listed = await ours.list_sessions(app_name=app, user_id=user)
            # Both list without events; the order is by last_update_time, which is the
            # server's clock for ctxstore and the events' own timestamps in memory.
            key = lambda s: (s.user_id, s.id)  # noqa: E731
            assert sorted(map(_norm, listed_model.sessions)) == sorted(
                map(_norm, listed.sessions)
            ), op
            assert all(not s.events for s in listed.sessions)
            times = [(s.last_update_time, s.user_id, s.id) for s in listed.sessions]
            assert times == sorted(times)
            assert sorted(map(key, listed.sessions)) == sorted(map(key, listed_model.sessions))
        elif kind == "delete":
            _, (app, user, sid) = op
            await model.delete_session(app_name=app, user_id=user, session_id=sid)
            if sync:
                ours.delete_session_sync(app_name=app, user_id=user, session_id=sid)
            else:
                await ours.delete_session(app_name=app, user_id=user, session_id=sid)
        elif kind == "user_state":
            _, app, user = op
            assert await model.get_user_state(app_name=app, user_id=user) == (
                await ours.get_user_state(app_name=app, user_id=user)
            ), op


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(starts=STARTS, ops=OPS, sync=st.booleans())
def test_sessions_match_adk_in_memory_service(
    server: ServerProcess, starts: list[dict[str, Any]], ops: list[Any], sync: bool
) -> None:
    creates = [("create", triple, state) for triple, state in zip(TRIPLES, starts, strict=True)]

    async def run() -> None:
        ours = CtxstoreSessionService(server.addr, namespace=_ns())
        try:
            await _compare(ours, InMemorySessionService(), [*creates, *ops], sync)
        finally:
            await ours.close()

    asyncio.run(run())


async def test_get_session_reads_only_the_turns_it_returns(server: ServerProcess) -> None:
    """A long session: num_recent_events=N returns the newest N exactly, in order, and the
    chain holds one turn per event after the root state turn; every state change also
    left a sibling state turn off the chain."""
    async with CtxstoreSessionService(server.addr, namespace=_ns()) as service:
        session = await service.create_session(app_name="a", user_id="u", state={"n": -1})
        for n in range(300):
            delta = {"n": n} if n % 10 == 0 else {}
            await service.append_event(session, _event(n, delta, f"m{n}"))
        recent = await service.get_session(
            app_name="a",
            user_id="u",
            session_id=session.id,
            config=GetSessionConfig(num_recent_events=20),
        )
        assert recent is not None
        assert [e.content.parts[0].text for e in recent.events] == [  # type: ignore[union-attr,index]
            f"m{n}" for n in range(280, 300)
        ]
        assert recent.state == {"n": 290}
        whole = await service.get_session(app_name="a", user_id="u", session_id=session.id)
        assert whole is not None and len(whole.events) == 300
        assert [e.id for e in whole.events] == [e.id for e in session.events]
        name = service.session_context("a", "u", session.id)
        page = await service.aclient.last(name, 1000)
        assert [t.type_tag for t in page.turns] == [STATE_TYPE] + [EVENT_TYPE] * 300
        log = [t async for t in service.aclient.iter_turn_log(name)]
        assert sum(t.type_tag == STATE_TYPE for t in log) == 1 + 30


async def test_stale_session_objects_and_redelivery(server: ServerProcess) -> None:
    async with CtxstoreSessionService(server.addr, namespace=_ns()) as service:
        first = await service.create_session(app_name="a", user_id="u", session_id="s")
        second = await service.get_session(app_name="a", user_id="u", session_id="s")
        assert second is not None
        event = _event(1, {"x": 1}, "hi")
        await service.append_event(first, event.model_copy(deep=True))
        with pytest.raises(StaleSessionError):
            await service.append_event(second, _event(2, {}, "late"))
        # The same event again (a retry whose first try was written): nothing is added.
        again = await service.get_session(app_name="a", user_id="u", session_id="s")
        assert again is not None
        await service.append_event(again, event.model_copy(deep=True))
        stale_retry = copy.deepcopy(second)
        await service.append_event(stale_retry, event.model_copy(deep=True))
        stored = await service.get_session(app_name="a", user_id="u", session_id="s")
        assert stored is not None and [e.id for e in stored.events] == [event.id]
        assert stored.state == {"x": 1}
        # A session object made by hand (no revision marker) is current only if it ends
        # where the stored one does.
        hand = Session(app_name="a", user_id="u", id="s", events=list(stored.events))
        await service.append_event(hand, _event(3, {"y": 2}, "by hand"))
        with pytest.raises(StaleSessionError):
            await service.append_event(
                Session(app_name="a", user_id="u", id="s"), _event(4, {}, "empty")
            )
        await service.delete_session(app_name="a", user_id="u", session_id="s")
        with pytest.raises(SessionNotFoundError):
            await service.append_event(hand, _event(5, {}, "gone"))
        assert await service.get_session(app_name="a", user_id="u", session_id="s") is None
        await service.delete_session(app_name="a", user_id="u", session_id="s")  # no error


async def test_bad_input_is_refused_before_anything_is_written(
    tmp_root: Path,
) -> None:
    process = new_server(tmp_root, extra_args=["--blob-bytes-max", str(64 * 1024)])
    try:
        ns = _ns()
        async with CtxstoreSessionService(process.addr, namespace=ns) as service:
            with pytest.raises(InputValidationError, match="256"):
                await service.create_session(app_name="a", user_id="u", session_id="s" * 250)
            with pytest.raises(InputValidationError, match="user state key"):
                await service.create_session(
                    app_name="a", user_id="u", state={"user:" + "k" * 300: 1}
                )
            with pytest.raises(InputValidationError, match="JSON"):
                await service.create_session(app_name="a", user_id="u", state={"x": object()})
            contexts = await service.aclient.list_contexts(name_prefix=f"adk.s/{ns}/")
            assert contexts.contexts == []
            assert await service.aclient.list_contexts(name_prefix="adk.u/") == (
                await service.aclient.list_contexts(name_prefix="adk.u/")
            )
            session = await service.create_session(app_name="a", user_id="u", session_id="s")
            huge = _event(1, {}, "x" * (70 * 1024))
            with pytest.raises(InputValidationError, match="limits"):
                await service.append_event(session, huge)
            with pytest.raises(InputValidationError, match="app state key"):
                await service.append_event(session, _event(2, {"app:" + "k" * 300: 1}, "a"))
            stored = await service.get_session(app_name="a", user_id="u", session_id="s")
            assert stored is not None and stored.events == []
            await service.append_event(session, _event(3, {}, "fine"))  # still current
        with pytest.raises(InputValidationError, match="namespace"):
            CtxstoreSessionService(process.addr, namespace="n" * 65)
        with pytest.raises(ValueError, match="ctxstore://"):
            CtxstoreSessionService(uri="postgresql://x:1")
        with pytest.raises(ValueError, match="unknown option"):
            CtxstoreSessionService(uri="ctxstore://127.0.0.1:1?bogus=1")
        async with CtxstoreArtifactService(process.addr, namespace=ns) as artifacts:
            with pytest.raises(InputValidationError, match="256"):
                await artifacts.save_artifact(
                    app_name="a",
                    user_id="u",
                    session_id="s",
                    filename="f" * 240,
                    artifact=types.Part(text="x"),
                )
            with pytest.raises(InputValidationError, match="limits"):
                await artifacts.save_artifact(
                    app_name="a",
                    user_id="u",
                    session_id="s",
                    filename="big",
                    artifact=types.Part(
                        inline_data=types.Blob(mime_type="x/y", data=os.urandom(70 * 1024))
                    ),
                )
            with pytest.raises(InputValidationError):
                await artifacts.save_artifact(
                    app_name="../a",
                    user_id="u",
                    session_id="s",
                    filename="f",
                    artifact=types.Part(text="x"),
                )
            with pytest.raises(InputValidationError):
                await artifacts.save_artifact(
                    app_name="a", user_id="u", filename="f", artifact=types.Part(text="x")
                )
            assert (
                await artifacts.list_artifact_keys(app_name="a", user_id="u", session_id="s") == []
            )
    finally:
        process.stop()


async def test_sessions_survive_a_restart_and_a_token(tmp_root: Path) -> None:
    process = new_server(tmp_root, token="adk-token")
    try:
        uri = f"ctxstore://adk-token@{process.addr}/team-1"
        async with CtxstoreSessionService(uri=uri) as service:
            assert service.namespace == "team-1"
            session = await service.create_session(
                app_name="a", user_id="u", state={"app:v": 1, "user:w": 2, "s": 3}
            )
            await service.append_event(session, _event(1, {"s": 4, "temp:x": 5}, "kept"))
            before = await service.get_session(app_name="a", user_id="u", session_id=session.id)
        process.stop()
        process.start()
        async with CtxstoreSessionService(uri=uri) as service:
            after = await service.get_session(app_name="a", user_id="u", session_id=session.id)
            assert _norm(after) == _norm(before)
            assert after is not None and after.state == {"s": 4, "app:v": 1, "user:w": 2}
        with pytest.raises(ctxstore.Unauthorized):
            async with CtxstoreSessionService(uri=f"ctxstore://{process.addr}") as service:
                await service.list_sessions(app_name="a")
    finally:
        process.stop()


# -- artifacts --------------------------------------------------------------------------------

ART_FILES = ["f.txt", "user:profile", "dir/x.png"]
ART_SESSIONS = ["s1", "s2"]
PARTS = st.one_of(
    st.text(max_size=20).map(lambda t: types.Part(text=t)),
    st.binary(max_size=64).map(
        lambda b: types.Part(inline_data=types.Blob(mime_type="application/x-test", data=b))
    ),
    st.sampled_from(["gs://bucket/a", "https://example.invalid/b"]).map(
        lambda u: types.Part(file_data=types.FileData(file_uri=u, mime_type="text/csv"))
    ),
)
ART_OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("save"),
            st.sampled_from(ART_FILES),
            st.sampled_from(ART_SESSIONS),
            PARTS,
            st.one_of(st.none(), st.dictionaries(st.sampled_from(["k", "v"]), st.integers())),
        ),
        st.tuples(
            st.just("load"),
            st.sampled_from(ART_FILES),
            st.sampled_from(ART_SESSIONS),
            st.one_of(st.none(), st.integers(-1, 4)),
        ),
        st.tuples(st.just("keys"), st.sampled_from([None, *ART_SESSIONS])),
        st.tuples(st.just("versions"), st.sampled_from(ART_FILES), st.sampled_from(ART_SESSIONS)),
        st.tuples(st.just("delete"), st.sampled_from(ART_FILES), st.sampled_from(ART_SESSIONS)),
    ),
    min_size=1,
    max_size=20,
)


def _version_meta(version: Any) -> Any:
    if version is None:
        return None
    return (version.version, version.custom_metadata, version.mime_type)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=ART_OPS)
def test_artifacts_match_adk_in_memory_service(server: ServerProcess, ops: list[Any]) -> None:
    async def run() -> None:
        model = InMemoryArtifactService()
        async with CtxstoreArtifactService(server.addr, namespace=_ns()) as ours:
            for op in ops:
                if op[0] == "save":
                    _, filename, sid, part, meta = op
                    results = [
                        await s.save_artifact(
                            app_name="app",
                            user_id="u",
                            filename=filename,
                            session_id=sid,
                            artifact=part.model_copy(deep=True),
                            custom_metadata=meta,
                        )
                        for s in (model, ours)
                    ]
                    assert results[0] == results[1], op
                elif op[0] == "load":
                    _, filename, sid, version = op
                    loaded = [
                        await s.load_artifact(
                            app_name="app",
                            user_id="u",
                            filename=filename,
                            session_id=sid,
                            version=version,
                        )
                        for s in (model, ours)
                    ]
                    assert loaded[0] == loaded[1], op
                    metas = [
                        await s.get_artifact_version(
                            app_name="app",
                            user_id="u",
                            filename=filename,
                            session_id=sid,
                            version=version,
                        )
                        for s in (model, ours)
                    ]
                    assert _version_meta(metas[0]) == _version_meta(metas[1]), op
                elif op[0] == "keys":
                    _, sid = op
                    keys = [
                        await s.list_artifact_keys(app_name="app", user_id="u", session_id=sid)
                        for s in (model, ours)
                    ]
                    assert keys[0] == keys[1], op
                elif op[0] == "versions":
                    _, filename, sid = op
                    listed = [
                        await s.list_versions(
                            app_name="app", user_id="u", filename=filename, session_id=sid
                        )
                        for s in (model, ours)
                    ]
                    assert listed[0] == listed[1], op
                    metas = [
                        await s.list_artifact_versions(
                            app_name="app", user_id="u", filename=filename, session_id=sid
                        )
                        for s in (model, ours)
                    ]
                    assert [_version_meta(m) for m in metas[0]] == [
                        _version_meta(m) for m in metas[1]
                    ], op
                else:
                    _, filename, sid = op
                    for s in (model, ours):
                        await s.delete_artifact(
                            app_name="app", user_id="u", filename=filename, session_id=sid
                        )

    asyncio.run(run())


async def test_equal_artifacts_are_stored_once(own_server: ServerProcess) -> None:
    image = os.urandom(200 * 1024)
    part = types.Part(inline_data=types.Blob(mime_type="image/png", data=image))
    async with CtxstoreArtifactService(own_server.addr) as artifacts:
        before = await artifacts.aclient.stats()
        for sid in ("s1", "s2", "s3"):
            await artifacts.save_artifact(
                app_name="a", user_id="u", session_id=sid, filename="img.png", artifact=part
            )
        assert (
            await artifacts.save_artifact(
                app_name="a", user_id="u", session_id="s1", filename="img.png", artifact=part
            )
            == 1
        )
        after = await artifacts.aclient.stats()
        # Four saves of 200 KiB of random bytes: on disk once (plus small manifests and
        # record headers), and three of the four appends found the blob stored.
        assert after.logical_bytes - before.logical_bytes >= 4 * len(image)
        assert after.stored_bytes - before.stored_bytes < 1.25 * len(image)
        assert after.dedup_hits - before.dedup_hits >= 3
        loaded = await artifacts.load_artifact(
            app_name="a", user_id="u", session_id="s3", filename="img.png"
        )
        assert loaded == part
        ref = types.Part(
            file_data=types.FileData(
                file_uri="artifact://apps/a/users/u/sessions/s1/artifacts/img.png/versions/0"
            )
        )
        await artifacts.save_artifact(
            app_name="a", user_id="u", session_id="s1", filename="alias", artifact=ref
        )
        assert (
            await artifacts.load_artifact(
                app_name="a", user_id="u", session_id="s1", filename="alias"
            )
            == part
        )


# -- adk api_server with --session_service_uri ctxstore://... ------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _http(method: str, url: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        raw = answer.read()
    return json.loads(raw) if raw else None


@pytest.fixture()
def agents_dir(tmp_path: Path) -> Iterator[Path]:
    """An agents directory as `adk web` expects: one agent package and a services.py that
    registers the ctxstore:// scheme."""
    agent = tmp_path / "hello_agent"
    agent.mkdir()
    (agent / "__init__.py").write_text("from . import agent\n")
    (agent / "agent.py").write_text(
        "from google.adk.agents import Agent\n"
        "root_agent = Agent(name='hello_agent', model='gemini-2.0-flash', instruction='hi')\n"
    )
    (tmp_path / "services.py").write_text("from ctxstore.adk import register\nregister()\n")
    yield tmp_path


def test_adk_api_server_uses_ctxstore_uri(server: ServerProcess, agents_dir: Path) -> None:
    ns = _ns()
    port = _free_port()
    adk = Path(sys.executable).with_name("adk")
    env = {**os.environ, "ADK_DISABLE_LOCAL_STORAGE": "1"}
    process = subprocess.Popen(
        [
            str(adk),
            "api_server",
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
            "--session_service_uri",
            f"ctxstore://{server.addr}/{ns}",
            "--artifact_service_uri",
            f"ctxstore://{server.addr}/{ns}",
            str(agents_dir),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                _http("GET", f"{base}/list-apps")
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    out = process.stdout.read().decode() if process.stdout else ""
                    pytest.fail(f"adk api_server did not start: {out[-3000:]}")
                time.sleep(0.2)
        first = {
            "author": "user",
            "invocationId": "inv-1",
            "content": {"role": "user", "parts": [{"text": "hello"}]},
        }
        made = _http(
            "POST",
            f"{base}/apps/hello_agent/users/u1/sessions",
            {"sessionId": "web-1", "state": {"k": "v"}, "events": [first]},
        )
        assert made["id"] == "web-1" and made["state"] == {"k": "v"}
        listed = _http("GET", f"{base}/apps/hello_agent/users/u1/sessions")
        assert [s["id"] for s in listed] == ["web-1"]
        got = _http("GET", f"{base}/apps/hello_agent/users/u1/sessions/web-1")
        assert got["state"] == {"k": "v"}
        assert [e["content"]["parts"][0]["text"] for e in got["events"]] == ["hello"]
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
    # What the web server wrote is in ctxstore, where this process reads it back.
    with ctxstore.Client(server.addr) as client:
        info = client.context_info(f"adk.s/{ns}/hello_agent/u1/web-1")
        assert info.tags["adk.kind"] == "session" and json.loads(info.tags["adk.state"]) == {
            "k": "v"
        }


def test_register_claims_the_scheme() -> None:
    from google.adk.cli.service_registry import ServiceRegistry

    registry = ServiceRegistry()
    register(registry)
    service = registry.create_session_service("ctxstore://127.0.0.1:7411/ns", agents_dir="x")
    assert isinstance(service, CtxstoreSessionService) and service.namespace == "ns"
    artifacts = registry.create_artifact_service("ctxstore://t0k@127.0.0.1:9/ns2")
    assert isinstance(artifacts, CtxstoreArtifactService) and artifacts.namespace == "ns2"
