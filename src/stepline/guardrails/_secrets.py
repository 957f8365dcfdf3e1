"""Secret detection and redaction (R-S1): keys and tokens never reach events, logs or prompts in clear.

Patterns are deliberately greedy on the side of redacting: a false positive costs a few characters of an
audit log, a false negative leaks a credential into a file that is kept forever.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["SecretScanner", "describe_secrets", "find_secrets", "redact", "redact_obj"]

_NOT_REDACTED = r"(?!\[REDACTED)"
# Start of a short-prefixed token: not glued to a word, except to a JSON/Python escape (``\nsk-…``), which is
# how text looks once it has been serialised into a journal line.
_START = r"(?:(?<=\\[ntr])|(?<![A-Za-z0-9]))"

#: ``(kind, pattern)`` in the order they are applied: specific shapes before generic ones, so that
#: ``sk-ant-…`` is reported as ``anthropic`` and ``api_key=sk-…`` as ``openai``. Distinctive prefixes match
#: anywhere; OpenAI's short ``sk-`` also needs a word start and a digit, so ``task-implement-auth-flow`` is
#: not a key.
_BUILTIN_PATTERNS: tuple[tuple[str, str], ...] = (
    ("private_key", r"-----BEGIN (?P<label>(?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?)-----"
                    r"[\s\S]*?-----END (?P=label)-----"),
    ("anthropic", r"sk-ant-[A-Za-z0-9_\-]{16,}"),
    ("openai", _START + r"sk-(?:proj-|svcacct-|admin-)?(?=[A-Za-z_\-]*[0-9])[A-Za-z0-9_\-]{16,}"),
    ("github", r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})"),
    ("aws", r"(?:AKIA|ASIA)[0-9A-Z]{16}"),
    ("slack", r"xox[abposr]-[A-Za-z0-9\-]{10,}"),
    ("bearer", r"(?i)(?<=\bbearer )" + _NOT_REDACTED + r"[A-Za-z0-9\-._~+/]{12,}=*"),
    # key = value / key: value / "key": "value", where the key ends in a secret-ish word
    # (``max_tokens`` does not: the word must end the key).
    ("generic", r"(?i)(?<![A-Za-z0-9])(?P<key>[A-Za-z0-9_\-]*?(?:api[_\-]?key|secret(?:[_\-]?key)?|token|"
                r"password|passwd|pwd|access[_\-]?key|private[_\-]?key|auth))"
                r"(?P<sep>(?:\\?[\"'])?\s*[:=]\s*(?:\\?[\"'])?)" + _NOT_REDACTED
                + r"(?P<value>[^\s\"'\\,;}\]]{6,})"),
)

#: Mapping keys whose values are secrets whatever they look like (``{"password": "hunter2"}``).
_SECRET_KEY = re.compile(r"(?i)(?:^|[_\-])(?:api[_\-]?key|secret(?:[_\-]?key)?|token|password|passwd|"
                         r"access[_\-]?key|private[_\-]?key|authorization|credentials?)$")


#: Cheap first pass: every built-in pattern needs one of these (lower-cased) substrings, so text without any
#: is returned as is. Substring tests cost a few microseconds where the seven patterns cost tens, and the
#: journal redacts every record it writes. The generic ``key = value`` words are common in ordinary text
#: ("secrets found"), so for them a small regex also wants a ``:``/``=`` right after the word.
_MARKERS = ("-----begin", "sk-", "github_pat_", "akia", "asia", "xox", "bearer")
_GITHUB_TOKEN = re.compile(r"gh[pousr]_")  # one pass for five prefixes: a regex with a literal start is fast
#: The secret-ish key words of the generic pattern (a bare "key", as in the journal's own ``"key":``, is not
#: one), under the stem each starts with: the text is searched once per stem, not once per word.
_KEY_WORDS = {"api": ("api_key", "api-key", "apikey"), "secret": ("secret",), "token": ("token",),
              "passw": ("password", "passwd"), "pwd": ("pwd",),
              "access": ("access_key", "access-key", "accesskey"),
              "private": ("private_key", "private-key", "privatekey"), "auth": ("auth",)}
_ASSIGNMENT_AFTER = re.compile(r"[^\s,]{0,12}?[\\\"']?\s*[:=]")


class SecretScanner:
    """Finds and redacts secrets; built-in patterns plus ``extra`` ``{kind: regex}`` from a policy.

    An extra pattern with a named group ``value`` redacts only that group (keeping, say, the key name).
    """

    def __init__(self, extra: Mapping[str, str] | None = None) -> None:
        patterns = [*_BUILTIN_PATTERNS, *(extra or {}).items()]
        self._patterns = [(kind, re.compile(pattern)) for kind, pattern in patterns]
        self._prefilter = not extra  # extra patterns may need no marker at all

    def may_contain(self, text: str) -> bool:
        """Whether ``text`` could hold a secret at all (false means :meth:`redact` would return it unchanged)."""
        if not self._prefilter:
            return True
        if len(text) < 10:  # the shortest built-in shape, "pwd=" + six characters, is ten long
            return False
        lowered = text.lower()
        for marker in _MARKERS:
            if marker in lowered:
                return True
        if _GITHUB_TOKEN.search(lowered):
            return True
        for stem, words in _KEY_WORDS.items():  # only where a key word ends a key: is ':' or '=' next?
            at = lowered.find(stem)
            while at != -1:
                for word in words:
                    end = at + len(word)
                    if lowered.startswith(word, at) and (end == len(lowered) or not lowered[end].isalnum()) \
                            and _ASSIGNMENT_AFTER.match(lowered, end):
                        return True
                at = lowered.find(stem, at + 1)
        return False

    def find(self, text: str) -> dict[str, int]:
        """Count the secrets in ``text`` per kind (never the secrets, so the answer is loggable)."""
        counts: dict[str, int] = {}
        for kind in self._scan(text)[1]:
            counts[kind] = counts.get(kind, 0) + 1
        return dict(sorted(counts.items()))

    def redact(self, text: str) -> str:
        """Replace every secret in ``text`` with ``[REDACTED:<kind>]``."""
        return self._scan(text)[0]

    def redact_obj(self, obj: Any) -> Any:
        """Redact every string in dicts, lists and tuples; values of secret-named keys are always redacted.

        Returns a new object; the input is not modified.
        """
        if isinstance(obj, str):
            return self.redact(obj)
        if isinstance(obj, Mapping):
            out: dict[Any, Any] = {}
            for key, value in obj.items():
                secret_key = isinstance(key, str) and _SECRET_KEY.search(key) is not None
                if secret_key and isinstance(value, str | bytes) and value:
                    out[key] = "[REDACTED:generic]"
                else:
                    out[self.redact(key) if isinstance(key, str) else key] = self.redact_obj(value)
            return out
        if isinstance(obj, list | tuple | set | frozenset):
            items = [self.redact_obj(item) for item in obj]
            return tuple(items) if isinstance(obj, tuple) else items
        return obj

    def _scan(self, text: str) -> tuple[str, list[str]]:
        kinds: list[str] = []
        if not self.may_contain(text):
            return text, kinds
        for kind, pattern in self._patterns:

            def replace(match: re.Match[str], kind: str = kind) -> str:
                kinds.append(kind)
                if match.groupdict().get("value") is not None:
                    keep = match.start("value") - match.start()
                    return match.group(0)[:keep] + f"[REDACTED:{kind}]" + match.group(0)[
                        match.end("value") - match.start():]
                return f"[REDACTED:{kind}]"

            # Applied in turn, so a later (generic) pattern never re-reports what an earlier one redacted.
            text = pattern.sub(replace, text)
        return text, kinds


_DEFAULT = SecretScanner()


def describe_secrets(counts: Mapping[str, int]) -> str:
    """``{"openai": 1, "aws": 2}`` as "1 openai secret, 2 aws secrets" (kinds and counts, never a secret)."""
    return ", ".join(f"{count} {kind} secret{'' if count == 1 else 's'}" for kind, count in counts.items())


def find_secrets(text: str) -> dict[str, int]:
    """Count the secrets the built-in patterns find in ``text``, per kind."""
    return _DEFAULT.find(text)


def redact(text: str) -> str:
    """Replace secrets (API keys, tokens, private keys, ``api_key=…``) with ``[REDACTED:<kind>]``."""
    return _DEFAULT.redact(text)


def redact_obj(obj: Any) -> Any:
    """Redact secrets in every string of a nested structure (dicts, lists, tuples); returns a copy."""
    return _DEFAULT.redact_obj(obj)
