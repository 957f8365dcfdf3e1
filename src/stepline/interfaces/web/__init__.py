"""The web dashboard and REST API (``stepline serve``): runs, a live timeline, artifacts, evidence and gates.

FastAPI serves the API (``/api``, OpenAPI at ``/api/openapi.json``) and server-rendered Jinja2 pages with a
little JavaScript for the live part (server-sent events). Everything is read from the run directories without
taking a run's lock; the one thing the server writes is a gate decision, through the run service
as ``stepline approve`` does. Every request needs the server's token (see :mod:`._auth`).
"""

from __future__ import annotations

from stepline.interfaces.web._app import LOOPBACK_HOSTS, create_app
from stepline.interfaces.web._auth import new_token, write_token_file
from stepline.interfaces.web._limits import HeaderTimeoutH11

__all__ = ["LOOPBACK_HOSTS", "HeaderTimeoutH11", "create_app", "new_token", "write_token_file"]
