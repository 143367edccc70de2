"""Google ADK artifacts on ctxstore: :class:`CtxstoreArtifactService`.

How an artifact is stored (decision 0023):

- An artifact (one filename in one scope: a session's, or the user's for ``user:`` names)
  is a named context (``adk.f/<namespace>/<app>/<user>/s/<session>/<filename>`` or
  ``.../u/<filename>``, see ``_common``).
- Version k is two turns appended in one all-or-none write: a *manifest* turn at depth 2k
  (``type_tag`` 3, labelled ``adk.part=manifest``: the part's JSON without its bytes, the
  custom metadata and the creation time) and a *data* turn at depth 2k + 1 (``type_tag`` 4:
  exactly the bytes of ``inline_data``, or the UTF-8 of ``text``; empty for ``file_data``).
  The data turn's payload is a blob like any other, so equal artifacts — the same image
  saved in two sessions, a version saved twice — are stored once.
- ``load_artifact(version=k)`` reads the two turns at depth 2k with one depth-window read
  (O(log n) through skip pointers); the latest version is the chain's newest two turns.
  ``list_versions`` is the head's depth; ``list_artifact_versions`` reads the manifests
  alone (the turn log filtered on their label), never the data.
- ``delete_artifact`` deletes the context; saving that name again starts at version 0, as
  ADK's in-memory service does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

from google.adk.artifacts import artifact_util
from google.adk.artifacts.base_artifact_service import (
    ArtifactVersion,
    BaseArtifactService,
    ensure_part,
)
from google.adk.errors.input_validation_error import InputValidationError
from google.adk.platform import time as platform_time
from google.genai import types

from .._shells import Call, Plan, call, run_async
from ..aio import AsyncClient
from ..errors import NotFound, TooLarge
from ..types import ContextInfo, Idempotency, Turn, TurnInfo, TurnSpec, VerifyPayloads
from ._common import Endpoint, context_name, dumps, unescape

__all__ = ["CtxstoreArtifactService", "MANIFEST_TYPE", "DATA_TYPE"]

MANIFEST_TYPE = 3
"""``type_tag`` of a version's manifest turn (JSON)."""
DATA_TYPE = 4
"""``type_tag`` of a version's data turn (the artifact's bytes)."""

_LABEL_PART = "adk.part"
_TAG_KIND = "adk.kind"
_USER_PREFIX = "user:"


def _is_user_scoped(filename: str) -> bool:
    return filename.startswith(_USER_PREFIX)


class CtxstoreArtifactService(BaseArtifactService):
    """An ADK ``BaseArtifactService`` on a ctxstore server: versions as turns, equal
    artifacts stored once.

    ``CtxstoreArtifactService(addr="HOST:PORT", token=None, namespace="")`` or
    ``CtxstoreArtifactService(uri="ctxstore://[TOKEN@]HOST:PORT[/NAMESPACE]")`` (what
    ``adk web --artifact_service_uri`` hands a registered factory: see
    :func:`ctxstore.adk.register`); ``aclient=`` shares an :class:`~ctxstore.AsyncClient`.
    ``close()`` / ``async with`` closes the client made here.

    Errors follow ADK's conventions: ``InputValidationError`` for identifiers ADK refuses
    (the checks of its in-memory service), names that do not fit a ctxstore context name
    (256 bytes), artifacts over the server's payload limit, or an unsupported part; nothing
    is written then. A missing artifact or version loads as None.
    """

    def __init__(
        self,
        addr: str | Sequence[str] | None = None,
        *,
        token: str | None = None,
        namespace: str | None = None,
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
        self._aclient = aclient
        self._owns_aclient = aclient is None

    @property
    def aclient(self) -> AsyncClient:
        """The asyncio client (made at first use)."""
        if self._aclient is None:
            self._aclient = self._endpoint.aclient()
        return self._aclient

    async def close(self) -> None:
        """Closes the client this service made (not one it was given)."""
        if self._owns_aclient and self._aclient is not None:
            await self._aclient.close()

    async def __aenter__(self) -> CtxstoreArtifactService:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- names ----------------------------------------------------------------------------------

    def _scope_parts(
        self, app_name: str, user_id: str, session_id: str | None, user_scoped: bool
    ) -> list[tuple[str, str]]:
        artifact_util.validate_path_segment(app_name, "app_name")
        artifact_util.validate_path_segment(user_id, "user_id")
        parts = [("app_name", app_name), ("user_id", user_id)]
        if user_scoped:
            return [*parts, ("scope", "u")]
        if session_id is None:
            raise InputValidationError("Session ID must be provided for session-scoped artifacts.")
        artifact_util.validate_path_segment(session_id, "session_id")
        return [*parts, ("scope", "s"), ("session_id", session_id)]

    def artifact_context(
        self, app_name: str, user_id: str, filename: str, session_id: str | None
    ) -> str:
        """The context name of an artifact (InputValidationError when it does not fit)."""
        if not isinstance(filename, str) or not filename:
            raise InputValidationError("filename must not be empty.")
        parts = self._scope_parts(app_name, user_id, session_id, _is_user_scoped(filename))
        return context_name("adk.f", self.namespace, [*parts, ("filename", filename)])

    def _scope_prefix(self, app_name: str, user_id: str, session_id: str | None) -> str:
        parts = self._scope_parts(app_name, user_id, session_id, session_id is None)
        return context_name("adk.f", self.namespace, parts) + "/"

    def _canonical_uri(
        self, app_name: str, user_id: str, filename: str, session_id: str | None, version: int
    ) -> str:
        scope = "" if _is_user_scoped(filename) else f"/sessions/{session_id}"
        return (
            f"ctxstore://{self._endpoint.addr}/apps/{app_name}/users/{user_id}{scope}"
            f"/artifacts/{filename}/versions/{version}"
        )

    # -- save -----------------------------------------------------------------------------------

    def _save_plan(
        self,
        app_name: str,
        user_id: str,
        filename: str,
        artifact: types.Part | dict[str, Any],
        session_id: str | None,
        custom_metadata: dict[str, Any] | None,
    ) -> Plan[int]:
        name = self.artifact_context(app_name, user_id, filename, session_id)
        part = ensure_part(artifact)
        if not isinstance(part, types.Part):
            raise InputValidationError("an artifact is a google.genai types.Part")
        dump = part.model_dump(mode="json", exclude_none=True)
        if part.inline_data is not None:
            bulk, data = "inline", part.inline_data.data or b""
            dump["inline_data"].pop("data", None)
            mime_type: str | None = part.inline_data.mime_type
        elif part.text is not None:
            bulk, data = "text", part.text.encode("utf-8")
            dump.pop("text", None)
            mime_type = "text/plain"
        elif part.file_data is not None:
            bulk, data = "none", b""
            mime_type = part.file_data.mime_type
            if artifact_util.is_artifact_ref(part):
                parsed = artifact_util.parse_artifact_uri(cast(str, part.file_data.file_uri))
                if not parsed:
                    raise InputValidationError(
                        f"Invalid artifact reference URI: {part.file_data.file_uri}"
                    )
                artifact_util.validate_artifact_reference_scope(
                    app_name=app_name, user_id=user_id, session_id=session_id, parsed_uri=parsed
                )
                mime_type = None  # known only once the reference is loaded
        else:
            raise InputValidationError("Not supported artifact type.")
        manifest = dumps(
            {
                "part": dump,
                "bulk": bulk,
                "mime_type": mime_type,
                "custom_metadata": custom_metadata or {},
                "create_time": platform_time.get_time(),
            },
            "artifact custom_metadata",
        )
        specs = [
            TurnSpec(manifest, type_tag=MANIFEST_TYPE, labels={_LABEL_PART: "manifest"}),
            TurnSpec(data, type_tag=DATA_TYPE),
        ]
        try:
            try:
                appended = yield call("append_turns", name, specs)
            except NotFound:
                yield call("open_context", name, {_TAG_KIND: "artifact"}, get_or_create=True)
                appended = yield call("append_turns", name, specs)
        except TooLarge as refused:
            raise InputValidationError(
                f"artifact {filename!r} ({len(data)} bytes) does not fit the ctxstore server's "
                f"limits: {refused.message}"
            ) from None
        head: Turn = appended[0].turn
        assert head.depth % 2 == 0, f"manifest turn {head.turn_id} at odd depth {head.depth}"
        return head.depth // 2

    async def save_artifact(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        artifact: types.Part | dict[str, Any],
        session_id: str | None = None,
        custom_metadata: dict[str, Any] | None = None,
    ) -> int:
        """Saves a new version (0 first) of the artifact: one durable write of its manifest
        and data turns; the bytes are stored once however often they are saved."""
        return await run_async(
            self.aclient,
            self._save_plan(app_name, user_id, filename, artifact, session_id, custom_metadata),
        )

    # -- load -----------------------------------------------------------------------------------

    @staticmethod
    def _version_page(name: str, version: int | None, limit: int) -> Call:
        if version is None:
            return Call("read_page", (name, limit), {"payloads": True}, not_found=None)
        return Call(
            "read_page",
            (name, limit),
            {"from_depth": 2 * version, "payloads": True},
            not_found=None,
        )

    @staticmethod
    def _manifest(turn: TurnInfo) -> dict[str, Any]:
        assert turn.payload is not None
        manifest: dict[str, Any] = json.loads(turn.payload)
        return manifest

    def _load_plan(
        self,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None,
        version: int | None,
        depth_left: int,
    ) -> Plan[types.Part | None]:
        name = self.artifact_context(app_name, user_id, filename, session_id)
        if version is not None and version < 0:
            return None
        page = yield self._version_page(name, version, 2)
        if page is None or len(page.turns) != 2:
            return None
        manifest_turn, data_turn = page.turns
        if manifest_turn.type_tag != MANIFEST_TYPE or data_turn.type_tag != DATA_TYPE:
            return None
        manifest = self._manifest(manifest_turn)
        dump = manifest["part"]
        if manifest["bulk"] == "inline":
            dump["inline_data"]["data"] = data_turn.payload
        elif manifest["bulk"] == "text":
            assert data_turn.payload is not None
            dump["text"] = data_turn.payload.decode("utf-8")
        part = types.Part.model_validate(dump)
        if artifact_util.is_artifact_ref(part):
            assert part.file_data is not None
            parsed = artifact_util.resolve_artifact_reference(
                file_uri=cast(str, part.file_data.file_uri),
                app_name=app_name,
                user_id=user_id,
                session_id=session_id,
                remaining_depth=depth_left,
            )
            resolved: types.Part | None = yield from self._load_plan(
                parsed.app_name,
                parsed.user_id,
                parsed.filename,
                parsed.session_id,
                parsed.version,
                depth_left - 1,
            )
            return resolved
        if part == types.Part() or part == artifact_util._new_rewind_tombstone():
            return None  # ADK's rewind marks an artifact absent with such a version
        return part

    async def load_artifact(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
        version: int | None = None,
    ) -> types.Part | None:
        """The artifact's version ``version`` (the latest for None), or None."""
        return await run_async(
            self.aclient,
            self._load_plan(
                app_name,
                user_id,
                filename,
                session_id,
                version,
                artifact_util._MAX_ARTIFACT_REFERENCE_DEPTH,
            ),
        )

    # -- listings -------------------------------------------------------------------------------

    def _keys_plan(self, app_name: str, user_id: str, session_id: str | None) -> Plan[list[str]]:
        prefixes = [self._scope_prefix(app_name, user_id, None)]
        if session_id is not None:
            prefixes.append(self._scope_prefix(app_name, user_id, session_id))
        listings = yield tuple(
            Call("iter_contexts", (), {"name_prefix": prefix}, collect=True) for prefix in prefixes
        )
        names: list[str] = []
        for prefix, infos in zip(prefixes, listings, strict=True):
            for info in cast(list[ContextInfo], infos):
                if info.name is None or info.head_turn_id == 0:
                    continue
                rest = info.name[len(prefix) :]
                if "/" not in rest:
                    names.append(unescape(rest))
        return sorted(names)

    async def list_artifact_keys(
        self, *, app_name: str, user_id: str, session_id: str | None = None
    ) -> list[str]:
        """The filenames of the session's artifacts and the user's (``user:`` names), sorted:
        one listing of contexts by name prefix per scope."""
        return await run_async(self.aclient, self._keys_plan(app_name, user_id, session_id))

    async def delete_artifact(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
    ) -> None:
        """Deletes every version (the context); no error if there is none."""
        name = self.artifact_context(app_name, user_id, filename, session_id)

        def plan() -> Plan[None]:
            yield Call("delete_context", (name,), not_found=None)

        await run_async(self.aclient, plan())

    async def list_versions(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
    ) -> list[int]:
        """``[0, ..., latest]`` (empty for no artifact): the head's depth, one request."""
        name = self.artifact_context(app_name, user_id, filename, session_id)

        def plan() -> Plan[list[int]]:
            info = yield Call("context_info", (name,), not_found=None)
            if info is None or info.head_turn_id == 0:
                return []
            return list(range((info.head_depth + 1) // 2))

        return await run_async(self.aclient, plan())

    def _version_of(
        self,
        manifest_turn: TurnInfo,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None,
    ) -> ArtifactVersion:
        manifest = self._manifest(manifest_turn)
        version = manifest_turn.depth // 2
        return ArtifactVersion(
            version=version,
            canonical_uri=self._canonical_uri(app_name, user_id, filename, session_id, version),
            custom_metadata=manifest["custom_metadata"],
            create_time=manifest["create_time"],
            mime_type=manifest["mime_type"],
        )

    async def list_artifact_versions(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
    ) -> list[ArtifactVersion]:
        """Every version's metadata, oldest first: the manifests alone (the turn log filtered
        on their label, 1,000 a page), not the data."""
        name = self.artifact_context(app_name, user_id, filename, session_id)

        def plan() -> Plan[list[ArtifactVersion]]:
            turns = yield Call(
                "iter_turn_log",
                (name, {_LABEL_PART: "manifest"}),
                {"payloads": True},
                collect=True,
                not_found=[],
            )
            ordered = sorted(cast(list[TurnInfo], turns), key=lambda t: t.depth)
            return [self._version_of(t, app_name, user_id, filename, session_id) for t in ordered]

        return await run_async(self.aclient, plan())

    async def get_artifact_version(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
        version: int | None = None,
    ) -> ArtifactVersion | None:
        """One version's metadata (the latest for None), or None: its manifest turn alone."""
        name = self.artifact_context(app_name, user_id, filename, session_id)

        def plan() -> Plan[ArtifactVersion | None]:
            if version is not None and version < 0:
                return None
            if version is None:
                page = yield Call("read_page", (name, 2), {"payloads": False}, not_found=None)
                if page is None or len(page.turns) != 2:
                    return None
                depth = page.turns[0].depth
            else:
                depth = 2 * version
            page = yield Call(
                "read_page", (name, 1), {"from_depth": depth, "payloads": True}, not_found=None
            )
            if page is None or not page.turns or page.turns[0].type_tag != MANIFEST_TYPE:
                return None
            return self._version_of(page.turns[0], app_name, user_id, filename, session_id)

        return await run_async(self.aclient, plan())
