"""Google ADK sessions on ctxstore: :class:`CtxstoreSessionService`.

How a session is stored (decision 0023):

- A session is a named context (``adk.s/<namespace>/<app>/<user>/<session>``, see
  ``_common``). Its chain is the session: a root *state turn* (``type_tag`` 2, the initial
  session state as JSON), then one *event turn* per event (``type_tag`` 1, the event as
  ADK's JSON, keyed by the hash of that JSON so a retried append is recognised), oldest to
  newest. ``get_session(num_recent_events=N)`` reads the newest N turns of the chain: O(N),
  whatever the session's length.
- Every event turn carries the label ``adk.state``: the BLAKE3 hash of the session-scoped
  state after it. An event that changes that state appends, in the same all-or-none write, a
  state turn holding the new state beside it (a sibling: same parent, so the chain stays
  events only), so the head always names a stored state and reading it costs one blob at
  most (none when the ``adk.state`` tag below holds it).
- The context's tag ``adk.state`` caches the session state for ``list_sessions`` (which reads
  contexts by name prefix, a page of 1,000 per request, never the sessions one by one): the
  JSON itself when it fits a tag value (1,024 bytes), else ``#`` and its hash. It is set at
  creation, and after each event that changed the state (a second write, compare-and-set on
  the head; only such events pay it).
- ``app:`` and ``user:`` state are key-value entries of the contexts ``adk.a/...`` and
  ``adk.u/...`` (one entry per state key; values are JSON blobs, equal values stored once),
  written after the event they come with is durable.
- Appends are compare-and-set on the head the session object was read at (kept in the
  session's ``_storage_update_marker``): a session object another writer has moved past gets
  ``StaleSessionError``, as with ADK's ``DatabaseSessionService``.
- ``last_update_time`` is the server's time of the session's last change (the context's
  ``updated_at``, in seconds), as ADK's Vertex AI and Firestore services report theirs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.input_validation_error import InputValidationError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.platform import uuid as platform_uuid
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session
from google.adk.sessions.state import State

try:  # ADK >= 1.17 names it; older releases raise ValueError for the same race
    from google.adk.errors._stale_session_error import StaleSessionError
except ImportError:  # pragma: no cover - depends on the installed ADK
    StaleSessionError = ValueError  # type: ignore[misc, assignment]

from .._shells import Call, Plan, call, run_async, run_sync
from ..aio import AsyncClient
from ..client import Client
from ..errors import Conflict, InvalidArgument, NotFound, TooLarge
from ..types import ContextInfo, Idempotency, TurnInfo, TurnSpec, VerifyPayloads, blob_hash
from ._common import (
    STATE_KEY_PREFIX,
    TAG_VALUE_BYTES_MAX,
    BlobCache,
    Endpoint,
    context_name,
    dumps,
    state_key,
    unescape,
)

__all__ = ["CtxstoreSessionService", "EVENT_TYPE", "STATE_TYPE"]

logger = logging.getLogger(__name__)

EVENT_TYPE = 1
"""``type_tag`` of an event turn (the event's JSON)."""
STATE_TYPE = 2
"""``type_tag`` of a state turn (the session-scoped state's JSON)."""

_LABEL_STATE = "adk.state"
_TAG_KIND = "adk.kind"
_TAG_STATE = "adk.state"
_KV_PUT_MAX = 128  # entries per KV_PUT (docs/protocol.md)
_TAG_RETRIES = 64
_MARKER = "ctxstore:"


def _event_json(event: Event) -> bytes:
    return event.model_dump_json(exclude_none=True).encode("utf-8")


def _state_tag(state_json: bytes, digest: bytes) -> str:
    """The ``adk.state`` tag value: the JSON when it fits a tag, else ``#`` and its hash."""
    if len(state_json) <= TAG_VALUE_BYTES_MAX:
        return state_json.decode("utf-8")
    return "#" + digest.hex()


def _marker(head_turn_id: int, state_digest: bytes) -> str:
    return f"{_MARKER}{head_turn_id}:{state_digest.hex()}"


def _parse_marker(marker: str | None) -> tuple[int, bytes] | None:
    if not marker or not marker.startswith(_MARKER):
        return None
    head, _, digest = marker[len(_MARKER) :].partition(":")
    try:
        return int(head), bytes.fromhex(digest)
    except ValueError:
        return None


def _split_deltas(
    delta: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(app, user, session) parts of a state delta, prefixes removed; ``temp:`` dropped (the
    rules of ADK's ``_session_util.extract_state_delta``)."""
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    session: dict[str, Any] = {}
    for key, value in delta.items():
        if key.startswith(State.APP_PREFIX):
            app[key.removeprefix(State.APP_PREFIX)] = value
        elif key.startswith(State.USER_PREFIX):
            user[key.removeprefix(State.USER_PREFIX)] = value
        elif not key.startswith(State.TEMP_PREFIX):
            session[key] = value
    return app, user, session


def _merged(
    session_state: dict[str, Any], app_state: dict[str, Any], user_state: dict[str, Any]
) -> dict[str, Any]:
    merged = dict(session_state)
    for key, value in app_state.items():
        merged[State.APP_PREFIX + key] = value
    for key, value in user_state.items():
        merged[State.USER_PREFIX + key] = value
    return merged


class CtxstoreSessionService(BaseSessionService):
    """An ADK ``BaseSessionService`` on a ctxstore server.

    ``CtxstoreSessionService(addr="HOST:PORT", token=None, namespace="")``, or
    ``CtxstoreSessionService(uri="ctxstore://[TOKEN@]HOST:PORT[/NAMESPACE]")`` (what
    ``adk web --session_service_uri`` hands a registered factory: see
    :func:`ctxstore.adk.register`). The async methods run on an :class:`~ctxstore.AsyncClient`
    (one pipelined connection), the ``*_sync`` ones (as ADK's ``InMemorySessionService`` has)
    on a :class:`~ctxstore.Client`; both are made here, connecting at their first call, unless
    given (``client=``, ``aclient=``). ``namespace`` keeps several deployments apart on one
    server (at most 64 bytes). ``close()`` / ``async with`` closes the clients made here.

    Errors follow ADK's conventions: ``AlreadyExistsError`` (a session id taken),
    ``SessionNotFoundError`` (an append to a session that is gone), ``StaleSessionError`` (an
    append from a session object another writer moved past), ``InputValidationError`` (an id
    or state key that does not fit ctxstore's limits, or an event over the server's payload
    limit; nothing is written). A server that cannot be reached raises ctxstore's own
    ``ConnectError`` / ``ConnectionLost`` / ``RequestTimeout``.
    """

    def __init__(
        self,
        addr: str | Sequence[str] | None = None,
        *,
        token: str | None = None,
        namespace: str | None = None,
        client: Client | None = None,
        aclient: AsyncClient | None = None,
        timeout: float | None = None,
        verify_payloads: VerifyPayloads = "when_remote",
        uri: str | None = None,
        agents_dir: str | None = None,  # noqa: ARG002 - what ADK's service registry passes
        failover_timeout: float | None = None,
        idempotency: Idempotency = "off",
    ) -> None:
        self._endpoint = Endpoint(
            addr, token, namespace, timeout, verify_payloads, uri, failover_timeout, idempotency
        )
        self.namespace = self._endpoint.namespace
        self._client = client
        self._aclient = aclient
        self._owns_client = client is None
        self._owns_aclient = aclient is None
        self._blobs = BlobCache()

    # -- clients and shells ---------------------------------------------------------------------

    @property
    def client(self) -> Client:
        """The blocking client of the ``*_sync`` methods (made at first use)."""
        if self._client is None:
            self._client = self._endpoint.client()
        return self._client

    @property
    def aclient(self) -> AsyncClient:
        """The asyncio client of the async methods (made at first use)."""
        if self._aclient is None:
            self._aclient = self._endpoint.aclient()
        return self._aclient

    async def close(self) -> None:
        """Closes the clients this service made (not those it was given)."""
        if self._owns_aclient and self._aclient is not None:
            await self._aclient.close()
        if self._owns_client and self._client is not None:
            self._client.close()

    async def __aenter__(self) -> CtxstoreSessionService:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- names ----------------------------------------------------------------------------------

    def session_context(self, app_name: str, user_id: str, session_id: str) -> str:
        """The context name of a session (InputValidationError when it does not fit)."""
        return context_name(
            "adk.s",
            self.namespace,
            [("app_name", app_name), ("user_id", user_id), ("session_id", session_id)],
        )

    def _user_context(self, app_name: str, user_id: str) -> str:
        return context_name("adk.u", self.namespace, [("app_name", app_name), ("user_id", user_id)])

    def _app_context(self, app_name: str) -> str:
        return context_name("adk.a", self.namespace, [("app_name", app_name)])

    def _sessions_prefix(self, app_name: str, user_id: str | None) -> str:
        if user_id is None:
            return self._app_context(app_name).replace("adk.a/", "adk.s/", 1) + "/"
        return self._user_context(app_name, user_id).replace("adk.u/", "adk.s/", 1) + "/"

    # -- shared steps ---------------------------------------------------------------------------

    def _json_blob(self, digest: bytes) -> Plan[Any]:
        """The JSON value stored as the blob ``digest`` (from the cache when it is there)."""
        raw = self._blobs.get(digest)
        if raw is None:
            raw = yield call("get_blob", digest)
            self._blobs.put(raw, digest)
        return json.loads(raw)

    def _json_blobs(self, digests: Sequence[bytes]) -> Plan[dict[bytes, Any]]:
        """Many blobs by hash, the missing ones fetched at once (pipelined)."""
        missing = sorted({d for d in digests if self._blobs.get(d) is None})
        if missing:
            fetched = yield tuple(call("get_blob", d) for d in missing)
            for digest, raw in zip(missing, fetched, strict=True):
                self._blobs.put(raw, digest)
        found: dict[bytes, Any] = {}
        for digest in digests:
            raw = self._blobs.get(digest)
            if raw is None:  # evicted between the two loops: fetch it alone
                raw = yield call("get_blob", digest)
            found[digest] = json.loads(raw)
        return found

    @staticmethod
    def _kv_state_call(context: str) -> Call:
        return Call("iter_kv", (context,), {"prefix": STATE_KEY_PREFIX}, collect=True, not_found=[])

    def _kv_states(self, listings: Sequence[Sequence[Any]]) -> Plan[list[dict[str, Any]]]:
        """Each KV listing (``iter_kv`` items) as a state dict, values fetched by hash."""
        values = yield from self._json_blobs([i.value_hash for items in listings for i in items])
        return [
            {
                item.key[len(STATE_KEY_PREFIX) :].decode("utf-8"): values[item.value_hash]
                for item in items
            }
            for items in listings
        ]

    @staticmethod
    def _state_entries(delta: dict[str, Any], scope: str) -> dict[bytes, bytes]:
        """``delta`` as key-value entries (checked before anything is written)."""
        return {state_key(k, scope): dumps(v, f"{scope} state {k!r}") for k, v in delta.items()}

    def _put_state(self, context: str, entries: dict[bytes, bytes], scope: str) -> Plan[None]:
        """Writes ``entries`` into ``context`` (created when missing), up to 128 entries per
        durable write."""
        items = list(entries.items())
        for start in range(0, len(items), _KV_PUT_MAX):
            chunk = dict(items[start : start + _KV_PUT_MAX])
            try:
                yield call("kv_put", context, chunk)
            except NotFound:
                yield call("open_context", context, {_TAG_KIND: scope}, get_or_create=True)
                yield call("kv_put", context, chunk)

    def _state_at(
        self, head: TurnInfo, info: ContextInfo | None
    ) -> Plan[tuple[dict[str, Any], bytes]]:
        """The session state a head names (and its hash): a state turn's own payload, or the
        ``adk.state`` label of an event turn; read from the context's tag when that holds the
        same bytes, else as a blob."""
        if head.type_tag == STATE_TYPE:
            digest = head.payload_hash
        else:
            hex_digest = head.labels.get(_LABEL_STATE)
            if hex_digest is None:
                raise InvalidArgument(f"turn {head.turn_id} has no {_LABEL_STATE} label")
            digest = bytes.fromhex(hex_digest)
        if head.payload is not None and head.type_tag == STATE_TYPE:
            self._blobs.put(head.payload, digest)
        tag = info.tags.get(_TAG_STATE) if info is not None else None
        if tag is not None and tag.startswith("{"):
            raw = tag.encode("utf-8")
            if blob_hash(raw) == digest:
                self._blobs.put(raw, digest)
        state = yield from self._json_blob(digest)
        return state, digest

    # -- create ---------------------------------------------------------------------------------

    def _create_plan(
        self,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None,
        session_id: str | None,
    ) -> Plan[Session]:
        session_id = session_id.strip() if session_id else None
        session_id = session_id or platform_uuid.new_uuid()
        name = self.session_context(app_name, user_id, session_id)
        app_delta, user_delta, session_state = _split_deltas(dict(state or {}))
        app_context = self._app_context(app_name)
        user_context = self._user_context(app_name, user_id)
        app_entries = self._state_entries(app_delta, "app")
        user_entries = self._state_entries(user_delta, "user")
        state_json = dumps(session_state, "session state")
        digest = blob_hash(state_json)
        tags = {_TAG_KIND: "session", _TAG_STATE: _state_tag(state_json, digest)}
        self._blobs.put(state_json, digest)

        info, created = yield call("open_context", name, tags, get_or_create=True)
        if not created and info.head_turn_id != 0:
            raise AlreadyExistsError(f"Session with id {session_id} already exists.")
        # An empty context is a creation cut short (a crash between the two writes) or one in
        # progress: whoever appends the state turn to it first (compare-and-set on "empty")
        # creates the session.
        try:
            appended = yield call(
                "append_turns",
                name,
                [TurnSpec(state_json, parent="root", type_tag=STATE_TYPE)],
                expected_head=0,
            )
        except Conflict:
            raise AlreadyExistsError(f"Session with id {session_id} already exists.") from None
        head = appended[-1].turn
        if not created:  # the tags are those of the creation cut short: ours instead
            info = yield call("tag_context", name, tags, expected_head=head.turn_id)
        if app_entries:
            yield from self._put_state(app_context, app_entries, "app")
        if user_entries:
            yield from self._put_state(user_context, user_entries, "user")
        app_items, user_items = yield (
            self._kv_state_call(app_context),
            self._kv_state_call(user_context),
        )
        app_state, user_state = yield from self._kv_states([app_items, user_items])
        session = Session(
            app_name=app_name,
            user_id=user_id,
            id=session_id,
            state=_merged(session_state, app_state, user_state),
            last_update_time=max(info.updated_at_unix_ms, head.created_at_unix_ms) / 1000,
        )
        session._storage_update_marker = _marker(head.turn_id, digest)
        return session

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Creates a session (``AlreadyExistsError`` for a taken id): one context, its root
        state turn, and the ``app:`` / ``user:`` entries of ``state``."""
        return await run_async(
            self.aclient, self._create_plan(app_name, user_id, state, session_id)
        )

    def create_session_sync(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """:meth:`create_session` on the blocking client."""
        return run_sync(self.client, self._create_plan(app_name, user_id, state, session_id))

    # -- get ------------------------------------------------------------------------------------

    def _get_plan(
        self,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None,
    ) -> Plan[Session | None]:
        session_id = session_id.strip() if session_id else session_id
        if not session_id:
            return None
        name = self.session_context(app_name, user_id, session_id)
        wanted = config.num_recent_events if config is not None else None
        after = config.after_timestamp if config is not None else None
        server = yield call("server_info")
        page_max = max(1, min(server.read_turns_max, 10_000))
        # One more than wanted: the page may end at the root state turn, which is no event.
        first_limit = page_max if wanted is None else max(1, min(wanted + 1, page_max))
        payloads = wanted != 0
        page, info, app_items, user_items = yield (
            Call(
                "read_page",
                (name, first_limit),
                {"payloads": payloads},
                not_found=None,
            ),
            Call("context_info", (name,), not_found=None),
            self._kv_state_call(self._app_context(app_name)),
            self._kv_state_call(self._user_context(app_name, user_id)),
        )
        if page is None or info is None or not page.turns:
            return None  # no such session, or a creation cut short
        head = page.turns[-1]
        events: list[Event] = []  # newest first
        done = wanted == 0
        while not done:
            for turn in reversed(page.turns):
                if turn.type_tag != EVENT_TYPE:
                    continue
                assert turn.payload is not None
                event = Event.model_validate_json(turn.payload)
                if after is not None and event.timestamp < after:
                    done = True  # ADK's rule: the events after the newest one before `after`
                    break
                events.append(event)
                if wanted is not None and len(events) >= wanted:
                    done = True
                    break
            if done or not page.next_before:
                break
            limit = page_max if wanted is None else max(1, min(wanted - len(events), page_max))
            page = yield Call(
                "read_page", (name, limit), {"before": page.next_before, "payloads": True}
            )
        session_state, digest = yield from self._state_at(head, info)
        app_state, user_state = yield from self._kv_states([app_items, user_items])
        events.reverse()
        session = Session(
            app_name=app_name,
            user_id=user_id,
            id=session_id,
            state=_merged(session_state, app_state, user_state),
            events=events,
            last_update_time=info.updated_at_unix_ms / 1000,
        )
        session._storage_update_marker = _marker(head.turn_id, digest)
        return session

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """The session with its newest ``config.num_recent_events`` events (all without a
        config) from ``config.after_timestamp`` on, and its state merged with the ``app:``
        and ``user:`` state; None if there is no such session. Reads O(events returned)
        turns, in pages of the server's ``read_turns_max``."""
        return await run_async(self.aclient, self._get_plan(app_name, user_id, session_id, config))

    def get_session_sync(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """:meth:`get_session` on the blocking client."""
        return run_sync(self.client, self._get_plan(app_name, user_id, session_id, config))

    # -- list -----------------------------------------------------------------------------------

    def _list_plan(self, app_name: str, user_id: str | None) -> Plan[ListSessionsResponse]:
        prefix = self._sessions_prefix(app_name, user_id)
        # Every user's sessions: also list which users have user state at all (one listing),
        # so that only those cost a key-value read.
        users_prefix = self._user_context(app_name, "").rstrip("/") + "/"
        listing = Call("iter_contexts", (), {"name_prefix": prefix}, collect=True)
        with_state: set[str] | None = None
        if user_id is None:
            infos, user_infos = yield (
                listing,
                Call("iter_contexts", (), {"name_prefix": users_prefix}, collect=True),
            )
            with_state = {unescape(i.name[len(users_prefix) :]) for i in user_infos if i.name}
        else:
            infos = yield listing
        found: list[tuple[str, str, ContextInfo]] = []
        for info in infos:
            if info.head_turn_id == 0 or info.name is None:
                continue  # a creation cut short
            rest = info.name[len(prefix) :].split("/")
            if user_id is None and len(rest) == 2:
                found.append((unescape(rest[0]), unescape(rest[1]), info))
            elif user_id is not None and len(rest) == 1:
                found.append((user_id, unescape(rest[0]), info))
        users = sorted({u for u, _, _ in found if with_state is None or u in with_state})
        listings = yield (
            self._kv_state_call(self._app_context(app_name)),
            *(self._kv_state_call(self._user_context(app_name, user)) for user in users),
        )
        app_state, *user_states = yield from self._kv_states(listings)
        by_user = dict(zip(users, user_states, strict=True))
        # Session state: from the tag (no read at all when it held the JSON), else its blob.
        hashed = [
            bytes.fromhex(info.tags[_TAG_STATE][1:])
            for _, _, info in found
            if info.tags.get(_TAG_STATE, "").startswith("#")
        ]
        blobs = yield from self._json_blobs(hashed)
        sessions = []
        for user, session_id, info in found:
            tag = info.tags.get(_TAG_STATE, "{}")
            state = blobs[bytes.fromhex(tag[1:])] if tag.startswith("#") else json.loads(tag)
            sessions.append(
                Session(
                    app_name=app_name,
                    user_id=user,
                    id=session_id,
                    state=_merged(state, app_state, by_user.get(user, {})),
                    last_update_time=info.updated_at_unix_ms / 1000,
                )
            )
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """The app's sessions (one user's, or every user's), without events, oldest update
        first: the server's context listing by name prefix (1,000 a page), plus one
        key-value listing per user for ``user:`` state."""
        return await run_async(self.aclient, self._list_plan(app_name, user_id))

    def list_sessions_sync(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """:meth:`list_sessions` on the blocking client."""
        return run_sync(self.client, self._list_plan(app_name, user_id))

    # -- delete ---------------------------------------------------------------------------------

    def _delete_plan(self, app_name: str, user_id: str, session_id: str) -> Plan[None]:
        session_id = session_id.strip() if session_id else session_id
        if not session_id:
            return
        name = self.session_context(app_name, user_id, session_id)
        yield Call("delete_context", (name,), not_found=None)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Deletes the session's context (no error if there is none); its events' bytes go
        at the server's next garbage collection."""
        await run_async(self.aclient, self._delete_plan(app_name, user_id, session_id))

    def delete_session_sync(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """:meth:`delete_session` on the blocking client."""
        run_sync(self.client, self._delete_plan(app_name, user_id, session_id))

    # -- user state -----------------------------------------------------------------------------

    def _user_state_plan(self, app_name: str, user_id: str) -> Plan[dict[str, Any]]:
        items = yield self._kv_state_call(self._user_context(app_name, user_id))
        (state,) = yield from self._kv_states([items])
        return state

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The ``user:`` state of ``user_id`` in ``app_name`` (keys without the prefix)."""
        return await run_async(self.aclient, self._user_state_plan(app_name, user_id))

    # -- append ---------------------------------------------------------------------------------

    def _append_plan(self, session: Session, event: Event) -> Plan[Event]:
        name = self.session_context(session.app_name, session.user_id, session.id)
        delta = dict(event.actions.state_delta) if event.actions.state_delta else {}
        app_delta, user_delta, session_delta = _split_deltas(delta)
        app_entries = self._state_entries(app_delta, "app")
        user_entries = self._state_entries(user_delta, "user")
        payload = _event_json(event)
        key = blob_hash(payload).hex()  # 64 bytes: the turn key limit

        # The head this session object was read at, and the stored state there.
        known = _parse_marker(session._storage_update_marker)
        if known is None:
            page = yield Call("read_page", (name, 1), {"payloads": True}, not_found=None)
            if page is None or not page.turns:
                raise SessionNotFoundError(f"Session {session.id} not found.")
            head = page.turns[-1]
            # A session object from elsewhere: current only if it ends where the chain does.
            stored_last = (
                Event.model_validate_json(head.payload).id
                if head.type_tag == EVENT_TYPE and head.payload is not None
                else None
            )
            current_last = session.events[-1].id if session.events else None
            if stored_last != current_last:
                raise StaleSessionError(
                    f"Session {session.id} was changed by another writer since it was read: "
                    "read it again (get_session) and append to that."
                )
            stored, digest = yield from self._state_at(head, None)
            head_turn_id = head.turn_id
        else:
            head_turn_id, digest = known
            stored = {}
            if session_delta:
                stored = yield from self._json_blob(digest)

        specs: list[TurnSpec] = []
        if session_delta:
            new_state = {**stored, **session_delta}
            state_json = dumps(new_state, "session state")
            digest = self._blobs.put(state_json)
            # A re-delivered event (a retry whose first try was written) must not add a state
            # turn beside the head: look its key up first (a read, from memory).
            existing = yield Call("turn_by_key", (name, key), not_found=None)
            if existing is not None:
                return event
            specs.append(TurnSpec(state_json, parent=head_turn_id, type_tag=STATE_TYPE))
        specs.append(
            TurnSpec(
                payload,
                parent=head_turn_id,
                key=key,
                labels={_LABEL_STATE: digest.hex()},
                type_tag=EVENT_TYPE,
            )
        )
        try:
            appended = yield call("append_turns", name, specs, expected_head=head_turn_id)
        except Conflict:
            existing = yield Call("turn_by_key", (name, key), not_found=None)
            if existing is not None:
                return event  # written before (a retried append): ADK's equal re-delivery
            raise StaleSessionError(
                f"Session {session.id} was changed by another writer since it was read: "
                "read it again (get_session) and append to that."
            ) from None
        except NotFound:
            raise SessionNotFoundError(f"Session {session.id} not found.") from None
        except TooLarge as refused:
            raise InputValidationError(
                f"event {event.id} does not fit the ctxstore server's limits: {refused.message}"
            ) from None
        turn = appended[-1]
        if turn.existing:
            return event  # the same event, appended before: nothing was written
        if app_entries:
            yield from self._put_state(self._app_context(session.app_name), app_entries, "app")
        if user_entries:
            user_context = self._user_context(session.app_name, session.user_id)
            yield from self._put_state(user_context, user_entries, "user")
        updated_ms = turn.turn.created_at_unix_ms
        if session_delta:
            info = yield from self._retag(name, turn.turn_id, digest)
            if info is not None:
                updated_ms = max(updated_ms, info.updated_at_unix_ms)
        session.last_update_time = updated_ms / 1000
        session._storage_update_marker = _marker(turn.turn_id, digest)
        return self._commit_event_to_session(session, event)

    def _retag(self, name: str, head_turn_id: int, digest: bytes) -> Plan[ContextInfo | None]:
        """Sets the ``adk.state`` tag to the state ``digest`` names, compare-and-set on the
        head. When the head moved meanwhile, the tag is still this state's while the new head
        names the same state (an event that left it alone); else that event's writer tags."""
        raw = self._blobs.get(digest)
        value = _state_tag(raw, digest) if raw is not None else "#" + digest.hex()
        for _ in range(_TAG_RETRIES):
            try:
                info: ContextInfo = yield call(
                    "tag_context", name, {_TAG_STATE: value}, expected_head=head_turn_id
                )
                return info
            except Conflict as moved:
                page = yield Call("read_page", (name, 1), not_found=None)
                if page is None or not page.turns:
                    return None
                head = page.turns[-1]
                if head.labels.get(_LABEL_STATE) != digest.hex():
                    return None
                head_turn_id = moved.actual_head or head.turn_id
        logger.warning(
            "session %s: the state tag lost %d races; list_sessions may lag", name, _TAG_RETRIES
        )
        return None

    async def append_event(self, session: Session, event: Event) -> Event:
        """Appends ``event`` (a partial one is not stored) and applies its state delta as ADK
        does: ``temp:`` keys only to this session object, ``app:`` / ``user:`` keys to the
        shared state, the rest to the session's. One durable write (two when the session
        state changes: the listing's cache), compare-and-set on the head the session was
        read at (``StaleSessionError`` when another writer moved it). Re-appending an event
        appended before writes nothing."""
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        return await run_async(self.aclient, self._append_plan(session, event))

    def append_event_sync(self, session: Session, event: Event) -> Event:
        """:meth:`append_event` on the blocking client."""
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        return run_sync(self.client, self._append_plan(session, event))
