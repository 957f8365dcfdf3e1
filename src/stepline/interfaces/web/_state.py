"""What every request of the dashboard shares: the project, its runtime config, the token, the runs index; and
the checks a request passes before it reaches a route (the token, cross-site protection)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import Request

from stepline.interfaces.web._auth import COOKIE, CSRF_FIELD, CSRF_HEADER, Auth, same_origin
from stepline.interfaces.web._continue import Continuations
from stepline.interfaces.web._index import RunIndex
from stepline.service import RunService

if TYPE_CHECKING:
    from stepline.engine import RuntimeConfig
    from stepline.model import Run
    from stepline.store import RunDir

__all__ = ["CrossSiteRefused", "NotAuthenticated", "WebState", "authenticate", "check_cross_site", "state_of"]


class NotAuthenticated(Exception):
    """No token, or a wrong one: 401 (a page answers with the login form)."""


class CrossSiteRefused(Exception):
    """A cookie-authenticated request that changes something without this server's CSRF value or origin:
    ``why`` it was refused and ``advice``, what the person does now, both in a person's words."""

    def __init__(self, why: str, advice: str) -> None:
        super().__init__(why)
        self.why = why
        self.advice = advice


@dataclass
class WebState:
    """The project the server shows and how it checks who asks."""

    project_root: Path
    config: RuntimeConfig
    auth: Auth
    #: Whether the server is shutting down (a live stream ends then).
    stopping: Callable[[], bool] = lambda: False
    #: The project's runs: what every route reads and decides through.
    runs: RunService = field(init=False)
    index: RunIndex = field(init=False)
    #: The runs this server continues once their gates are decided.
    continuations: Continuations = field(init=False)
    _person: str | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.runs = RunService(self.project_root, self.config)
        self.index = RunIndex(self.runs.store, self.runs.damage)
        self.continuations = Continuations(self.runs)

    def person(self) -> str:
        """Who decides here unless they say otherwise: git's ``user.name`` for the project, else the OS user."""
        if self._person is None:
            from stepline.service import person

            self._person = person(self.project_root)
        return self._person

    def run_dir(self, run_id: str) -> RunDir:
        """The directory of ``run_id`` (a unique part of the id is enough), or NotFoundError."""
        return self.runs.store.open(run_id)

    def load(self, run_dir: RunDir) -> Run:
        """The run rebuilt from its journal (JournalError when the directory is damaged); takes no lock."""
        return self.runs.load(run_dir)


def state_of(request: Request) -> WebState:
    """The server's shared state."""
    found: WebState = request.app.state.web
    return found


def authenticate(request: Request) -> str:
    """Say how ``request`` proves it knows the token (``bearer`` or ``cookie``), or raise NotAuthenticated."""
    auth = state_of(request).auth
    if auth.bearer_ok(request.headers.get("authorization")):
        return "bearer"
    if auth.cookie_ok(request.cookies.get(COOKIE)):
        return "cookie"
    raise NotAuthenticated()


def check_cross_site(request: Request, how: str, form: Any = None) -> None:
    """Refuse a cookie-authenticated request that changes something unless it carries the CSRF value (header
    or form field) and comes from this server's own pages. A bearer token is never sent by a browser on its
    own, so a request that carries one needs no more."""
    if how == "bearer":
        return
    auth = state_of(request).auth
    given = request.headers.get(CSRF_HEADER)
    if given is None and form is not None:
        value = form.get(CSRF_FIELD)
        given = value if isinstance(value, str) else None
    if not auth.csrf_ok(given):
        raise CrossSiteRefused("it did not carry the security value of the dashboard's own page",
                               "Reload the run page and decide again (a page opened before `stepline serve` was "
                               "restarted with another token holds an old value).")
    if not same_origin(request.headers.get("origin"), request.headers.get("referer"),
                       request.headers.get("sec-fetch-site"), request.headers.get("host"), request.url.scheme):
        raise CrossSiteRefused("it came from a page of another site",
                               "Decide on the run's page of this dashboard.")
