"""Slow and crowding clients: deadlines for a request's headers and body, and a cap on the
connections one client address holds open.

uvicorn's h11 protocol waits as long as a client likes for the rest of a request line, for the
rest of its headers and for a body that stalled, and accepts every connection it is offered:
a thousand half-sent requests (slowloris) hold a thousand sockets for ever. ``guarded_h11``
makes the protocol class ``uvicorn.Config(http=...)`` takes, with three limits:

- a connection holding more than ``per_client`` others from the same address is answered 429
  and closed as it arrives (the newest goes, never one already serving);
- a request whose headers are not complete within ``header_timeout`` seconds of its first byte
  (or of the connection, for a new one) is answered 408 and closed; a connection that sent
  nothing at all is closed without an answer (it asked nothing);
- a request body that brings no byte for ``body_timeout`` seconds is answered 408 where no
  response has started yet, and closed either way. While the server itself stopped reading
  (the app has not taken what came), the client is not stalling, and the clock restarts.

A connection that becomes a websocket leaves the count: the websocket protocol owns it then.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState


@dataclass(frozen=True, slots=True)
class SlowLimits:
    """How long a client may take and how many connections one address may hold."""

    #: Seconds a request's headers may take (``INLINE_HEADER_TIMEOUT``).
    header_timeout: float = 10.0
    #: Seconds a request body may go without a byte (``INLINE_BODY_TIMEOUT``).
    body_timeout: float = 30.0
    #: Connections open at once from one address (``INLINE_MAX_CONNECTIONS_PER_CLIENT``).
    per_client: int = 64


class Peers:
    """Open connections per client address (one event loop touches it: no lock)."""

    def __init__(self) -> None:
        self.open: dict[str, int] = {}

    def take(self, address: str, cap: int) -> bool:
        """Count one more connection from ``address``; False (nothing counted) past ``cap``."""
        held = self.open.get(address, 0)
        if held >= cap:
            return False
        self.open[address] = held + 1
        return True

    def give(self, address: str) -> None:
        """Count one connection from ``address`` less."""
        held = self.open.get(address, 0) - 1
        if held > 0:
            self.open[address] = held
        else:
            self.open.pop(address, None)


def answer(status: int, reason: str, code: str, message: str, *extra: str) -> bytes:
    """A whole ``Connection: close`` response with the contract's error envelope, as bytes."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    head = [
        f"HTTP/1.1 {status} {reason}",
        "content-type: application/json",
        f"content-length: {len(body)}",
        "connection: close",
        *extra,
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with header and body deadlines and a per-address cap (the limits
    and the count are the class's: ``guarded_h11`` makes one per server)."""

    limits: ClassVar[SlowLimits] = SlowLimits()
    peers: ClassVar[Peers] = Peers()

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._address: str | None = None  # set while this connection is counted
        self._handed_over = False  # became a websocket: no longer ours to time
        self._header_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._body_seen = 0.0  # the loop's time of the latest bytes

    # uvicorn's hooks ----------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        address = self.client[0] if self.client else None
        if address is not None:
            if not self.peers.take(address, self.limits.per_client):
                self._refuse_crowded()
                return
            self._address = address
        self._header_timer = self.loop.call_later(self.limits.header_timeout, self._headers_late)

    def connection_lost(self, exc: Exception | None) -> None:
        self._forget()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._body_seen = self.loop.time()
        super().data_received(data)
        if self._handed_over or self.transport.is_closing():
            return
        if self.conn.their_state is h11.IDLE and self._header_timer is None:
            # a next request begins on a kept-alive connection: its headers get the deadline
            self._header_timer = self.loop.call_later(
                self.limits.header_timeout, self._headers_late
            )

    def handle_events(self) -> None:
        super().handle_events()
        if self._handed_over:
            return
        state = self.conn.their_state
        if state is h11.IDLE:
            return  # awaiting a request: its deadline is armed as its first bytes arrive
        self._cancel_header_timer()
        if state is h11.SEND_BODY:
            if self._body_timer is None:
                self._body_timer = self.loop.call_later(self.limits.body_timeout, self._body_check)
        else:
            self._cancel_body_timer()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        self._forget()
        self._handed_over = True
        super().handle_websocket_upgrade(event)

    # the limits ---------------------------------------------------------------------------------
    def _refuse_crowded(self) -> None:
        cap = self.limits.per_client
        message = (
            f"This address holds {cap} connections to the host already "
            f"(INLINE_MAX_CONNECTIONS_PER_CLIENT={cap}); close some or retry later."
        )
        self.transport.write(
            answer(429, "Too Many Requests", "too_many_connections", message, "retry-after: 1")
        )
        self.transport.close()

    def _headers_late(self) -> None:
        self._header_timer = None
        if self._handed_over or self.transport.is_closing():
            return
        if self.conn.their_state is not h11.IDLE:
            return
        pending, _ = self.conn.trailing_data
        if pending and self.conn.our_state is h11.IDLE:
            seconds = f"{self.limits.header_timeout:g}"
            message = (
                f"The request's headers did not arrive within {seconds} s "
                "(INLINE_HEADER_TIMEOUT); send them at once."
            )
            self.transport.write(answer(408, "Request Timeout", "request_timeout", message))
        self._close()

    def _body_check(self) -> None:
        self._body_timer = None
        if self._handed_over or self.transport.is_closing():
            return
        if self.conn.their_state is not h11.SEND_BODY:
            return
        now = self.loop.time()
        if self.flow.read_paused:  # the server stopped reading, not the client sending
            self._body_seen = now
        left = self._body_seen + self.limits.body_timeout - now
        if left > 0:
            self._body_timer = self.loop.call_later(left, self._body_check)
            return
        if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):  # nothing answered yet
            seconds = f"{self.limits.body_timeout:g}"
            message = (
                f"The request body sent nothing for {seconds} s (INLINE_BODY_TIMEOUT); "
                "send it without pauses."
            )
            self.transport.write(answer(408, "Request Timeout", "request_timeout", message))
        if self.cycle is not None:  # the app reading the body learns the client is gone
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        self._close()

    def _close(self) -> None:
        self._forget()
        self.transport.close()

    def _forget(self) -> None:
        """Stop both clocks and leave the address's count (once)."""
        self._cancel_header_timer()
        self._cancel_body_timer()
        if self._address is not None:
            self.peers.give(self._address)
            self._address = None

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _cancel_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None


def guarded_h11(limits: SlowLimits) -> type[GuardedH11]:
    """A protocol class for ``uvicorn.Config(http=...)`` with ``limits`` and a count of its own."""
    attrs = {"limits": limits, "peers": Peers(), "__module__": __name__}
    return type("GuardedH11", (GuardedH11,), attrs)
