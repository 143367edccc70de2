"""Socket options both clients set on their connection (the one place of I/O they share)."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from asyncio.trsock import TransportSocket

_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)
"""``socket.TCP_QUICKACK`` where the platform has it (Linux), else None: then
:func:`ack_now` does nothing."""


def ack_now(sock: socket.socket | TransportSocket) -> None:
    """Makes the kernel acknowledge what ``sock`` received now (``TCP_QUICKACK``) instead of
    delaying that ACK.

    A reader calls it before each wait for the rest of a frame part of which it has received:
    this side sends nothing back meanwhile, so the kernel would delay the ACK of a lone
    received segment (up to 40 ms on Linux), and a server whose congestion window the answer
    outgrew stops sending until that ACK comes (decision 0016, docs/decisions/0016-quick-acks.md;
    the Rust client and the server do the same). ``TCP_QUICKACK`` is not sticky, the kernel
    returns to delayed ACKs on its own, so the reader sets it again before each such wait;
    setting it while an ACK is pending sends that ACK at once. A read that starts at a frame
    boundary (a small answer, whole in what arrived) does not call this: no system call.

    Does nothing on platforms without ``TCP_QUICKACK``; a failure is ignored (it costs only
    latency)."""
    if _QUICKACK is None:
        return
    try:
        sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
    except OSError:
        pass
