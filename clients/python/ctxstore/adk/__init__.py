"""Google ADK (Agent Development Kit) services on ctxstore.

Needs the ``adk`` extra (``pip install 'ctxstore[adk]'``, the ``google-adk`` package).

- :class:`CtxstoreSessionService`: sessions as contexts, events as turns
  (``get_session(num_recent_events=N)`` reads O(N) turns; ``list_sessions`` pages through
  the server's context listing), ``app:`` / ``user:`` / ``temp:`` state as ADK's in-memory
  service applies it.
- :class:`CtxstoreArtifactService`: artifact versions as turns, equal artifacts stored once.
- :func:`register`: the ``ctxstore://`` scheme in ADK's service registry, so that
  ``adk web --session_service_uri ctxstore://HOST:PORT`` (and ``--artifact_service_uri``)
  use them. ADK loads an agents directory's ``services.py`` before it builds its services;
  put these two lines in it::

      from ctxstore.adk import register
      register()

  or, without Python, a ``services.yaml`` naming the classes (ADK calls
  ``CtxstoreSessionService(uri=..., agents_dir=...)``)::

      services:
        - scheme: ctxstore
          type: session
          class: ctxstore.adk.CtxstoreSessionService
        - scheme: ctxstore
          type: artifact
          class: ctxstore.adk.CtxstoreArtifactService

The URI: ``ctxstore://[TOKEN@]HOST:PORT[/NAMESPACE][?timeout=SECONDS&verify_payloads=always]``.
"""

from __future__ import annotations

from typing import Any

from .artifacts import DATA_TYPE, MANIFEST_TYPE, CtxstoreArtifactService
from .sessions import EVENT_TYPE, STATE_TYPE, CtxstoreSessionService

__all__ = [
    "CtxstoreSessionService",
    "CtxstoreArtifactService",
    "register",
    "SCHEME",
    "EVENT_TYPE",
    "STATE_TYPE",
    "MANIFEST_TYPE",
    "DATA_TYPE",
]

SCHEME = "ctxstore"
"""The URI scheme :func:`register` claims."""


def register(registry: Any = None) -> None:
    """Registers the ``ctxstore://`` scheme for sessions and artifacts in ADK's service
    registry (``google.adk.cli.service_registry``; another registry when given). The
    factories take the URI and ignore what else ADK passes (``agents_dir``)."""
    if registry is None:
        from google.adk.cli.service_registry import get_service_registry

        registry = get_service_registry()

    def session_factory(uri: str, **_: Any) -> CtxstoreSessionService:
        return CtxstoreSessionService(uri=uri)

    def artifact_factory(uri: str, **_: Any) -> CtxstoreArtifactService:
        return CtxstoreArtifactService(uri=uri)

    registry.register_session_service(SCHEME, session_factory)
    registry.register_artifact_service(SCHEME, artifact_factory)
