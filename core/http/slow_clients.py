"""Deadlines for clients that send slowly (slowloris): uvicorn's h11 protocol with a header and a
body deadline, so a connection trickling its bytes cannot hold a socket and a task forever.

- ``[server] header_read_timeout``: from the moment a connection waits for a request head (it
  opened, or its last response ended) to the whole head. Past it the connection is closed, as
  nginx does for a header timeout: there is no request yet to answer. uvicorn's own
  ``timeout_keep_alive`` only covers a connection that sends nothing at all.
- ``[server] body_read_timeout``: from the head to the whole body. The body reader answers a late
  body with a 408 in the route's protocol shape (:func:`kvgate.core.http.body.read_body`); this
  protocol closes, :data:`BODY_GRACE` seconds later, a connection whose body nobody reads (a
  route that answered without it) and that is still trickling.

A connection upgraded to a WebSocket has no HTTP deadline from then on (the Responses WebSocket
has its own idle timeout). 0 turns a deadline off.
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

BODY_GRACE = 2.0  # the body reader's 408 goes out first
UPGRADED = "upgraded"


class DeadlineH11Protocol(H11Protocol):
    """uvicorn's h11 protocol; one deadline runs for what the connection waits for from the client."""

    header_timeout: float = 0.0
    body_timeout: float = 0.0

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.waiting_for: Optional[str] = None  # "head", "body" or None (nothing due from the client)
        self.deadline: Optional[asyncio.TimerHandle] = None

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._watch()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch()

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self._disarm()
        super().connection_lost(exc)

    def handle_websocket_upgrade(self, event: Any) -> None:
        self._disarm()  # the socket is the WebSocket protocol's from now on: no HTTP deadline applies
        self.waiting_for = UPGRADED
        super().handle_websocket_upgrade(event)

    def _watch(self) -> None:
        """Start the deadline of what is due now; one already running for it keeps running."""
        if self.waiting_for == UPGRADED:
            return
        state = self.conn.their_state
        due = "head" if state is h11.IDLE else "body" if state is h11.SEND_BODY else None
        if due == self.waiting_for:
            return
        self._disarm()
        self.waiting_for = due
        seconds = self.header_timeout if due == "head" else self.body_timeout + BODY_GRACE if due else 0
        if due is not None and seconds > (BODY_GRACE if due == "body" else 0):
            self.deadline = self.loop.call_later(seconds, self._expire)

    def _disarm(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None

    def _expire(self) -> None:
        self.deadline = None
        if not self.transport.is_closing():
            self.logger.info("closing a connection that sent its request %s too slowly", self.waiting_for)
            self.transport.close()


def deadline_protocol(server_config: Any) -> type[DeadlineH11Protocol]:
    """The protocol class for uvicorn's ``http=``, with ``[server]``'s deadlines."""
    return type("ServerDeadlineH11Protocol", (DeadlineH11Protocol,),
                {"header_timeout": server_config.header_read_timeout,
                 "body_timeout": server_config.body_read_timeout})
