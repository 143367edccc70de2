"""A framework adapter's two clients (:class:`TwoClients`): the LangGraph saver and store
write every method once, as a plan of requests (:mod:`ctxstore._ops`), and run it on a
blocking :class:`~ctxstore.Client` (their sync methods) or an :class:`~ctxstore.AsyncClient`
(their ``a*`` methods). This mixin owns those two clients: given, or made from the other's
settings when first needed, and closed by the adapter only when it made them."""

from __future__ import annotations

from collections.abc import Sequence
from threading import Lock
from typing import Any, TypeVar

from . import _ops as ops
from ._connection import ClientCore
from .aio import AsyncClient
from .client import Client
from .types import Idempotency, VerifyPayloads

T = TypeVar("T")
A = TypeVar("A", bound="TwoClients")


class TwoClients:
    """The clients of an adapter (see the module's doc). ``client`` runs the sync methods'
    plans, ``aclient`` the ``a*`` ones'; one that is not given is made when first needed with
    the other's addresses (all of them: it follows the primary too), token and settings
    (timeouts, ``failover_timeout``, ``idempotency``, ``accept_zstd``, ``verify_payloads``,
    ``compress_level``)
    and owned by the adapter, as are both with ``owns_client``."""

    def _use_clients(
        self, client: Client | None, aclient: AsyncClient | None, owns_client: bool
    ) -> ClientCore:
        """Keeps the clients; returns one of them (for its settings)."""
        if client is None and aclient is None:
            name = type(self).__name__
            raise ValueError(f"{name} needs a Client or an AsyncClient (or use from_addr)")
        self._client = client
        self._aclient = aclient
        self._owns_client = owns_client
        self._owns_aclient = owns_client
        some: ClientCore = client if client is not None else aclient  # type: ignore[assignment]
        self._core = some
        self._make_lock = Lock()
        return some

    @staticmethod
    def _client_for(
        addr: str | Sequence[str] | None,
        token: str | None,
        timeout: float | None,
        verify_payloads: VerifyPayloads,
        failover_timeout: float | None = None,
        idempotency: Idempotency = "off",
    ) -> Client:
        """The blocking client ``from_addr`` makes (it connects at its first call): ``addr``
        one address or several (``"A,B,C"`` or a list: it follows the primary among them),
        ``failover_timeout`` and ``idempotency`` as :class:`~ctxstore.Client`'s."""
        extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        if failover_timeout is not None:
            extra["failover_timeout"] = failover_timeout
        return Client(
            addr,
            token=token,
            lazy=True,
            verify_payloads=verify_payloads,
            idempotency=idempotency,
            **extra,
        )

    def _settings(self) -> dict[str, Any]:
        core = self._core
        return {
            "token": core._token,  # b"" stays no token: not the environment's
            "timeout": core._timeout,
            "connect_timeout": core._connect_timeout,
            "accept_zstd": core._accept_zstd,
            "verify_payloads": core._verify_payloads,
            "compress_level": core._compress_level,
            "failover_timeout": core._failover_timeout,
            "idempotency": core._idempotency,
        }

    @property
    def client(self) -> Client:
        """The blocking client the sync methods use."""
        if self._client is None:
            with self._make_lock:
                if self._client is None:
                    self._client = Client(self._core.addrs, lazy=True, **self._settings())
                    self._owns_client = True
        return self._client

    @property
    def aclient(self) -> AsyncClient:
        """The asyncio client the ``a*`` methods use."""
        if self._aclient is None:
            with self._make_lock:
                if self._aclient is None:
                    self._aclient = AsyncClient(self._core.addrs, **self._settings())
                    self._owns_aclient = True
        return self._aclient

    def close(self) -> None:
        """Closes the blocking client if this adapter made it (the async one: :meth:`aclose`)."""
        if self._owns_client and self._client is not None:
            self._client.close()

    async def aclose(self) -> None:
        """Closes the clients this adapter made."""
        if self._owns_aclient and self._aclient is not None:
            await self._aclient.close()
        self.close()

    def __enter__(self: A) -> A:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self: A) -> A:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _run(self, plan: ops.Plan[T]) -> T:
        return self.client._drive(plan, None)

    async def _arun(self, plan: ops.Plan[T]) -> T:
        return await self.aclient._drive(plan, None)
