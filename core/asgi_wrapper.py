"""The contract of an ASGI wrapper, contributed through ``register_asgi_wrappers``.

A wrapper takes an ASGI app and returns an ASGI app that calls it (datasette's ``asgi_wrapper`` is
the model): it sees what the client sends and what the server answers, and may log, time or refuse
the request. The app is Litestar's handling of one route, so a wrapper sees every HTTP request and
WebSocket that reaches a route (a path no route serves is answered 404 before it), never a
``lifespan`` scope. Wrappers apply in the order of their registered names, the first outermost.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Optional, Protocol

from kvgate.core.plugins import collect

ASGIApp = Callable[[dict, Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]], Awaitable[None]]


class AsgiWrapper(Protocol):
    """Built by a ``register_asgi_wrappers`` plugin (a class taking the app is one)."""

    def __call__(self, app: ASGIApp) -> ASGIApp:
        """The ASGI app to serve in place of ``app``; it awaits ``app(scope, receive, send)`` for
        every request it lets through, with ``receive`` and ``send`` of its own when it watches
        them."""


AsgiWrapperBuild = Callable[[Any], Optional[AsgiWrapper]]
"""``build(ctx)``: called once when the app is built, with the
:class:`kvgate.core.server.ServerContext`; returns an :class:`AsgiWrapper`, or None when this
config wraps nothing."""


def build_asgi_wrappers(ctx, pm) -> list[AsgiWrapper]:
    """The ``register_asgi_wrappers`` wrappers this config runs, outermost first."""
    builders = collect(pm, "register_asgi_wrappers", "ASGI wrapper")
    built = [builders.get(name)(ctx) for name in builders.names()]
    return [wrapper for wrapper in built if wrapper is not None]
