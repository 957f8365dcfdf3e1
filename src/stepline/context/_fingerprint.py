"""The fingerprint of a resolved context: sha256 of its canonical JSON, so a resumed step can prove it got the
same context and a changed one is seen.

Canonical: keys sorted, no spaces, UTF-8, and without the fields that say how or when it was made rather
than what it holds (``fingerprint`` itself, ``attempt``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["fingerprint"]

_NOT_CONTENT = frozenset({"fingerprint", "attempt"})


def fingerprint(context: dict[str, Any]) -> str:
    """``sha256:<hex>`` of ``context``'s content (see the module docstring)."""
    content = {k: v for k, v in context.items() if k not in _NOT_CONTENT}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
