"""Who may use the what-if page: the person who started ``des ui``, from its own address.

A server on 127.0.0.1 is still reachable by every web page its user opens (through the
browser) and by every user of the machine. It is guarded as Jupyter's and Vite's servers
are:

- the ``Host`` header must name the loopback address (:data:`HOSTS`, Starlette's
  ``TrustedHostMiddleware``), so a site whose name is rebound to 127.0.0.1 (DNS
  rebinding) is refused;
- a per-launch secret (:func:`new_token`) is in the address ``des ui`` prints; opening it
  stores it in a cookie (:func:`remember`, ``HttpOnly``, ``SameSite=Strict``) and every
  ``/api`` request must carry it, in the cookie or the :data:`HEADER` header
  (:func:`authorised`);
- a request that changes state (not GET or HEAD) whose ``Origin`` (else ``Referer``) is
  another site's is refused (:func:`same_origin`);
- request bodies are bounded (:class:`BodyLimit`).
"""

from __future__ import annotations

import secrets
from typing import Any

from fastapi import HTTPException, Request
from fastapi.responses import Response
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: The names the page answers to (any port): the loopback address, by number or name.
HOSTS = ("127.0.0.1", "localhost", "[::1]")
#: The header a client other than the page (a script, the tests) may send the token in.
HEADER = "X-Des-Token"
#: What a refused request is told.
NO_TOKEN = "open the address des ui printed (it ends in ?token=...): this server answers only its own page"
#: Methods that only read.
SAFE = frozenset({"GET", "HEAD", "OPTIONS"})


def new_token() -> str:
    """A fresh secret for one launch of ``des ui`` (32 random bytes, URL-safe)."""
    return secrets.token_urlsafe(32)


def cookie_name(request: Request) -> str:
    """The token's cookie, one per port: two servers on one machine keep their own
    (cookies are shared by every port of a host)."""
    return f"des-token-{request.url.port or 80}"


def _matches(given: str | None, token: str) -> bool:
    return given is not None and secrets.compare_digest(given.encode(), token.encode())


def has_token(request: Request) -> bool:
    """Whether the request carries this launch's token (its cookie, or the header)."""
    token = request.app.state.token
    return _matches(request.cookies.get(cookie_name(request)), token) or _matches(request.headers.get(HEADER), token)


def remember(response: Response, request: Request) -> None:
    """Store the token in the browser: sent back by the page's own requests only."""
    response.set_cookie(cookie_name(request), request.app.state.token, httponly=True, samesite="strict", path="/")


def own_origin(request: Request) -> str:
    """The page's origin, as a browser names it in ``Origin``: ``http://<Host header>``."""
    return f"{request.url.scheme}://{request.headers.get('host', '')}"


def authorised(request: Request) -> None:
    """A dependency of every ``/api`` route: 403 without this launch's token."""
    if not has_token(request):
        raise HTTPException(403, NO_TOKEN)


def same_origin(request: Request) -> None:
    """A dependency of every ``/api`` route: a request that changes state must come from
    the page itself. Browsers name the sending page in ``Origin`` (else ``Referer``); a
    client that names none (a script) is not a browser and was let in by its token."""
    if request.method in SAFE:
        return
    mine = own_origin(request)
    origin = request.headers.get("origin")
    if origin is not None:
        if origin != mine:
            raise HTTPException(403, f"refused: a request from {origin!r}, not from the page ({mine})")
        return
    referer = request.headers.get("referer")
    if referer is not None and referer != mine and not referer.startswith(mine + "/"):
        raise HTTPException(403, f"refused: a request from another page ({referer!r}), not from {mine}")


class BodyLimit:
    """ASGI middleware bounding each request's body: ``limit`` bytes, or ``limits[path]``
    for a path given there (None: the route bounds its own, as uploads do). A declared
    ``Content-Length`` over the bound is refused before a byte is read; a streamed body,
    as soon as it passes the bound (413, from the route reading it)."""

    def __init__(self, app: ASGIApp, limit: int, limits: dict[str, int | None] | None = None):
        self.app = app
        self.limit = limit
        self.limits = limits or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self.limits.get(scope["path"], self.limit) if scope["type"] == "http" else None
        if limit is None:
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._refuse(limit, scope, receive, send)
            return
        seen = 0

        async def bounded() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:  # FastAPI lets an HTTPException out of its body reading as it is
                    raise HTTPException(413, too_large(limit))
            return message

        await self.app(scope, bounded, send)

    @staticmethod
    async def _refuse(limit: int, scope: Scope, receive: Receive, send: Send) -> None:
        from fastapi.responses import JSONResponse

        response: Any = JSONResponse({"detail": too_large(limit)}, status_code=413, headers={"Connection": "close"})
        await response(scope, receive, send)


def too_large(limit: int) -> str:
    """What a request over ``limit`` bytes is told."""
    return f"larger than the {size(limit)} the page accepts"


def size(n: int) -> str:
    """``n`` bytes in MiB (or KiB), for a message."""
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n / 2**10:g} KiB"
