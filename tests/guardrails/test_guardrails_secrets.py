"""Secret redaction: every known shape is replaced, in text and in nested objects."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stepline.guardrails import SecretScanner, find_secrets, redact, redact_obj

# Fake credentials with the real shapes; none of them is live.
FAKES = {
    "openai": "sk-proj-FAKEfake0123456789abcdefghij",
    "anthropic": "sk-ant-api03-FAKEfake0123456789abcdef",
    "github": "ghp_FAKEfake0123456789abcdefghijklmnopqrst",
    "aws": "AKIAFAKEFAKEFAKE1234",
    "slack": "xoxb-123456789012-FAKEfakeFAKE",
}
PEM = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA\nFAKE=\n-----END OPENSSH PRIVATE KEY-----"


@pytest.mark.parametrize(("kind", "secret"), sorted(FAKES.items()))
def test_each_key_shape_is_redacted_with_its_kind(kind: str, secret: str) -> None:
    """A key in running text is replaced by ``[REDACTED:<kind>]`` and nothing else changes."""
    assert redact(f"use {secret} today") == f"use [REDACTED:{kind}] today"


@pytest.mark.parametrize(("text", "expected"), [
    ("github_pat_11FAKE0123456789_abcdefghijklmnopqrstuvwxyz", "[REDACTED:github]"),
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.FAKEsig", "Authorization: Bearer [REDACTED:bearer]"),
    (f"key:\n{PEM}\nend", "key:\n[REDACTED:private_key]\nend"),
    ("api_key=abcdef123456", "api_key=[REDACTED:generic]"),
    ("DB_PASSWORD: 'hunter2hunter2'", "DB_PASSWORD: '[REDACTED:generic]'"),
    ('{"access_token": "abcdefghijkl"}', '{"access_token": "[REDACTED:generic]"}'),
    ("OPENAI_API_KEY=sk-FAKEfake0123456789abcdef", "OPENAI_API_KEY=[REDACTED:openai]"),
])
def test_other_shapes(text: str, expected: str) -> None:
    """Fine-grained PATs, bearer tokens, PEM blocks and ``key=value`` assignments are redacted."""
    assert redact(text) == expected


@pytest.mark.parametrize("text", ["max_tokens: 4096", "tokenizer: bpe", "token: null", "see the skeleton",
                                  "task-implement-authentication-flow-2", "sk-learn-style-identifiers"])
def test_lookalikes_are_left_alone(text: str) -> None:
    """Words that merely contain 'token' or 'sk' are not secrets."""
    assert redact(text) == text


def test_planted_key_never_survives_nested_redaction() -> None:
    """A fake key planted at every depth and in keys never appears in the redacted object's JSON."""
    key = FAKES["anthropic"]
    obj = {"prompt": f"key {key}", "messages": [{"role": "user", "content": [f"x{key}", (key, 1)]}],
           key: "as a key", "nested": {"deeper": {"env": {"ANTHROPIC_API_KEY": key}}},
           "password": "short", "count": 3, "none": None}
    redacted = redact_obj(obj)
    dumped = json.dumps(redacted)
    assert key not in dumped and "short" not in dumped
    assert redacted["count"] == 3 and redacted["none"] is None
    assert redacted["messages"][0]["content"][1] == ("[REDACTED:anthropic]", 1)
    assert key in json.dumps(obj), "the input must not be modified"


def test_secrets_inside_serialised_json_are_redacted() -> None:
    """Text that was JSON-encoded (escapes, quoted keys) still has its secrets redacted."""
    encoded = json.dumps(json.dumps({"note": f"line\n{FAKES['openai']}", "api_key": "abcdefgh1234"}))
    redacted = redact(encoded)
    assert FAKES["openai"] not in redacted and "abcdefgh1234" not in redacted
    assert "[REDACTED:openai]" in redacted and "[REDACTED:generic]" in redacted


def test_redaction_is_idempotent() -> None:
    """Redacting twice gives the same text (markers are not re-redacted as values)."""
    once = redact("api_key=sk-FAKEfake0123456789abcdef and token: abcdefgh1234")
    assert redact(once) == once


def test_find_counts_kinds_without_revealing_secrets() -> None:
    """find_secrets reports kinds and counts only."""
    found = find_secrets(f"{FAKES['aws']} {FAKES['aws']} {FAKES['slack']}")
    assert found == {"aws": 2, "slack": 1}


def test_extra_patterns() -> None:
    """A policy can add shapes; a ``value`` group redacts only that part."""
    scanner = SecretScanner({"internal": r"corp-(?P<value>[0-9a-f]{8})"})
    assert scanner.redact("id corp-deadbeef") == "id corp-[REDACTED:internal]"


def test_the_prefilter_passes_journal_records_without_secrets_and_catches_assignments() -> None:
    """Ordinary journal text (a call 'key', token counts, an author) skips the full scan; assignments do not."""
    from stepline.guardrails import SecretScanner

    scanner = SecretScanner()
    assert not scanner.may_contain('{"key":"s1/1/0/1","result":{"usage":{"input_tokens":3}}}')
    assert not scanner.may_contain("author: bob")
    for text in ("password = hunter22", "DB_PASSWORD: 'xyzxyz'", '"api_key": "abcdef"', "Bearer abcdefghijkl",
                 "sk-ant-" + "a1" * 10, "accessecret=abcdefgh", "secretoken: abcdefgh"):
        assert scanner.may_contain(text), text  # the last two: a key word starting inside another one
        assert scanner.redact(text) != text


_SECRETISH = st.sampled_from(["sk-", "sk-ant-", "ghp_", "github_pat_", "AKIA", "xoxb-", "Bearer ", "-----BEGIN ",
                              "PRIVATE KEY-----", "-----END ", "api_key", "API-KEY", "Secret", "token", "passwd",
                              "pwd", "auth", "Authorization", "=", ":", "\"", "'", "\\n", " ", ",", "_", "-"])


@given(st.lists(st.one_of(_SECRETISH, st.sampled_from(list(FAKES.values())),
                          st.text(alphabet="aAZ09_-=: \"'\\,.\n", max_size=24),
                          st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=16, max_size=24)),
                max_size=8))
def test_the_prefilter_never_hides_what_the_full_scan_would_redact(parts: list[str]) -> None:
    """Soundness: text the prefilter waves through is text the full patterns leave unchanged."""
    text = "".join(parts)
    prefiltered, full = SecretScanner(), SecretScanner()
    full._prefilter = False  # the full scan, every pattern on every text
    if not prefiltered.may_contain(text):
        assert full.redact(text) == text
