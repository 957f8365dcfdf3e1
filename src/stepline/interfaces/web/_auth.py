"""Who may use the dashboard: one secret token, given as a header, or once in a login form that sets a cookie.

* An API client sends ``Authorization: Bearer <token>``. A browser never sends that header on its own, so such
  a request cannot be forged by another site and needs nothing more.
* A person logs in once with the token; the server answers with an HttpOnly, SameSite=Strict cookie holding
  a value derived from the token (not the token itself). A request that changes something and is
  authenticated by that cookie must also carry the CSRF value (a hidden form field or the ``X-CSRF-Token``
  header, derived from the token too, so it survives restarts with the same token), and its ``Origin`` (or
  ``Referer``) must be this server's own, and ``Sec-Fetch-Site`` must not say ``cross-site``.

Every comparison is constant-time. Nothing here writes run state.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from stepline.errors import StorageError

__all__ = ["COOKIE", "CSRF_FIELD", "CSRF_HEADER", "Auth", "new_token", "write_token_file"]

#: The session cookie a login sets.
COOKIE = "stepline_session"
#: Where a cookie-authenticated request that changes something carries the CSRF value.
CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "csrf_token"


def new_token() -> str:
    """A fresh random token (32 bytes, URL-safe)."""
    return secrets.token_urlsafe(32)


def write_token_file(path: Path, token: str) -> None:
    """Store ``token`` at ``path``, readable by its owner only (0600), replacing an older one.

    The file is created with mode 0600 before a byte is written (never world-readable, not even for a
    moment); an existing file is replaced by a rename.
    """
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)  # O_CREAT's mode is masked by the umask; 0600 is what we promise
            os.write(fd, token.encode("ascii") + b"\n")
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise StorageError.from_os(exc, path, "write") from exc


def _derive(token: str, purpose: bytes) -> str:
    return hmac.new(token.encode("utf-8"), purpose, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Auth:
    """The server's token and the values derived from it."""

    token: str

    @property
    def session_value(self) -> str:
        """What the login cookie holds (not the token: a leaked cookie does not give the token away)."""
        return _derive(self.token, b"stepline-session")

    @property
    def csrf_value(self) -> str:
        """The CSRF value pages embed in their forms."""
        return _derive(self.token, b"stepline-csrf")

    def token_matches(self, given: str | None) -> bool:
        """Whether ``given`` is the token."""
        return given is not None and hmac.compare_digest(given.encode("utf-8"), self.token.encode("utf-8"))

    def bearer_ok(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header carries the token (``Bearer <token>``)."""
        if not authorization:
            return False
        scheme, _, value = authorization.partition(" ")
        return scheme.lower() == "bearer" and self.token_matches(value.strip())

    def cookie_ok(self, cookie: str | None) -> bool:
        """Whether a session cookie is this server's."""
        return cookie is not None and hmac.compare_digest(cookie.encode("utf-8"), self.session_value.encode())

    def csrf_ok(self, given: str | None) -> bool:
        """Whether a form field or header carries the CSRF value."""
        return given is not None and hmac.compare_digest(given.encode("utf-8"), self.csrf_value.encode())


def same_origin(origin: str | None, referer: str | None, fetch_site: str | None, host: str | None,
                scheme: str) -> bool:
    """Whether a browser request comes from a page of this server: ``Origin`` (else ``Referer``) names this
    host, and ``Sec-Fetch-Site`` (when the browser sends it) is not ``cross-site``/``same-site``.

    A request with neither header is accepted here: browsers send ``Origin`` on every cross-site POST, so its
    absence means a non-browser client, which the CSRF value (required as well) still guards.
    """
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return False
    claimed = origin if origin not in (None, "null") else referer
    if origin == "null":
        return False
    if claimed is None:
        return True
    parts = urlsplit(claimed)
    return bool(host) and parts.scheme == scheme and parts.netloc.lower() == str(host).lower()
