"""A deadline for request headers: a client that connects and trickles (or never sends) its headers
is disconnected, instead of holding a connection forever (slowloris).

uvicorn times out idle keep-alive connections but not a request whose headers
are still arriving. This protocol arms a timer when a connection opens and
when a new request begins, and disarms it once the headers are complete; the
body has its own deadline in :class:`~lmchat.serve.guard.Guard`.
"""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING


def protocol(header_timeout: float) -> type:
    """uvicorn's HTTP protocol class (httptools when installed, else h11) with a header deadline."""
    if TYPE_CHECKING:  # checked against httptools' (h11's has the same methods)
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as Base
    else:
        try:
            from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as Base
        except ImportError:  # httptools is optional
            from uvicorn.protocols.http.h11_impl import H11Protocol as Base

    class HeaderDeadline(Base):
        _header_timer: asyncio.TimerHandle | None = None

        # uvicorn's own signature, which narrows asyncio.BaseProtocol's (BaseTransport) as uvicorn's does
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete:  # a request's headers are complete
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()  # for the next request on this connection

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(header_timeout, self._too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _too_slow(self) -> None:
            self._header_timer = None
            if self.transport is not None and not self.transport.is_closing():
                self.transport.close()

    return HeaderDeadline
