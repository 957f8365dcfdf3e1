"""The dashboard's FastAPI application: the API, the pages, the static files, and how errors are answered."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stepline.engine import RuntimeConfig
from stepline.errors import (
    JournalError,
    NotFoundError,
    ReaderError,
    RunStateError,
    SteplineError,
    StorageError,
    UsageError,
)
from stepline.interfaces.web._auth import Auth
from stepline.interfaces.web._limits import BodyLimit
from stepline.interfaces.web._state import CrossSiteRefused, NotAuthenticated, WebState, authenticate

__all__ = ["LOOPBACK_HOSTS", "create_app", "http_status"]

#: Host names a server bound to the loopback interface answers to (a DNS-rebinding page gets 400).
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")


def http_status(exc: SteplineError) -> int:
    """The HTTP status of a user error: what its CLI exit code means, said in HTTP."""
    if isinstance(exc, NotFoundError):
        return 404
    if isinstance(exc, RunStateError):
        return 409  # completed, failed, already decided, or driven by another process right now
    if isinstance(exc, JournalError | ReaderError):
        return 422  # a damaged run directory, an unreadable session file: the request is fine, the data is not
    if isinstance(exc, UsageError):
        return 400
    if isinstance(exc, StorageError):
        return 507
    return 400


def _wants_html(request: Request) -> bool:
    return not request.url.path.startswith("/api")


def create_app(project_root: Path, config: RuntimeConfig, token: str, *,
               allowed_hosts: Sequence[str] | None = LOOPBACK_HOSTS,
               stopping: Callable[[], bool] = lambda: False) -> FastAPI:
    """The dashboard of the project at ``project_root`` (absolute), guarded by ``token``.

    ``allowed_hosts``: the ``Host`` values answered (the loopback names by default, against DNS rebinding);
    None answers any (a server bound to another interface). ``stopping``: whether the server is shutting down
    (live streams then end, so that it does not wait for them).
    """
    from stepline.interfaces.web._api import api
    from stepline.interfaces.web._pages import error_page, login_page, pages, refused_page

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await asyncio.to_thread(app.state.web.continuations.stop)  # the runs it drives stay resumable

    app = FastAPI(title="stepline", version=_version(), openapi_url=None, docs_url=None, lifespan=lifespan,
                  redoc_url=None, description="Runs, events, artifacts, evidence and gates of one stepline "
                  "project. Every call needs `Authorization: Bearer <token>` (the token `stepline serve` printed).")
    app.state.web = WebState(project_root=project_root, config=config, auth=Auth(token), stopping=stopping)
    if allowed_hosts is not None:
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts))

    @app.exception_handler(NotAuthenticated)
    async def not_authenticated(request: Request, exc: NotAuthenticated) -> Response:
        if _wants_html(request):
            return login_page(request)
        return JSONResponse({"error": "missing or wrong token",
                             "hint": "send Authorization: Bearer <the token `stepline serve` printed>"},
                            status_code=401, headers={"WWW-Authenticate": "Bearer"})

    @app.exception_handler(CrossSiteRefused)
    async def cross_site(request: Request, exc: CrossSiteRefused) -> Response:
        if _wants_html(request):
            return refused_page(request, exc)
        return JSONResponse({"error": f"refused, nothing changed: {exc.why}",
                             "hint": "a script sends Authorization: Bearer <the token `stepline serve` printed> "
                                     f"(then no CSRF value is needed); in a browser: {exc.advice}"},
                            status_code=403)

    @app.exception_handler(ClientDisconnect)
    async def client_gone(request: Request, exc: ClientDisconnect) -> Response:
        # Its body never came whole (it left, or _limits closed it for being too slow): nobody reads an answer.
        return Response(status_code=408)

    @app.exception_handler(SteplineError)
    async def user_error(request: Request, exc: SteplineError) -> Response:
        status = http_status(exc)
        if _wants_html(request):
            return error_page(request, exc, status)
        return JSONResponse({"error": exc.format_message(), "kind": type(exc).__name__}, status_code=status)

    @app.get("/api/openapi.json", include_in_schema=False)
    def openapi(request: Request) -> JSONResponse:
        authenticate(request)  # the API's description is behind the token like the API
        return JSONResponse(app.openapi())

    from stepline.interfaces.web._cost import cost_api, cost_pages

    app.include_router(api)
    app.include_router(cost_api)
    app.include_router(pages)
    app.include_router(cost_pages)
    app.mount("/static", StaticFiles(directory=str(Path(__file__).with_name("static"))), name="static")
    app.add_middleware(_SecurityHeaders)
    app.add_middleware(BodyLimit)  # outermost: a body over the limit is refused before anything reads it
    return app


#: Sent with every response: nothing is cached, framed, sniffed, or loaded from anywhere but this server.
SECURITY_HEADERS = [
    (b"cache-control", b"no-store"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"content-security-policy", b"default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
                                 b"form-action 'self'"),
]


class _SecurityHeaders:
    """Adds :data:`SECURITY_HEADERS` to every response (plain ASGI: a live stream passes through untouched)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name.lower() for name, _ in message.get("headers", [])}
                message["headers"] = [*message.get("headers", []),
                                      *((n, v) for n, v in SECURITY_HEADERS if n not in names)]
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _version() -> str:
    from stepline import __version__

    return __version__
