"""`stepline providers`: configured executors with secrets masked, and a connectivity check per model API."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ holds the shared fakes package

from fakes.fake_anthropic import FakeAnthropic
from fakes.fake_openai import FakeOpenAI, fault
from stepline.interfaces.cli._app import run_cli

SECRET = "sk-proj-0123456789abcdefghijklmnopqrstuv"


@pytest.fixture(autouse=True)
def no_provider_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the developer's own keys and endpoints out of these tests."""
    for prefix in ("OPENAI", "ANTHROPIC"):
        for var in (f"{prefix}_BASE_URL", f"{prefix}_API_KEY", f"STEPLINE_{prefix}_MODEL"):
            monkeypatch.delenv(var, raising=False)


def write_config(root: Path, openai_url: str, anthropic_url: str) -> None:
    (root / "config").mkdir()
    (root / "config" / "runtime.yaml").write_text(
        f"executors:\n"
        f"  openai: {{base_url: '{openai_url}', api_key: '{SECRET}', model: fake-gpt}}\n"
        f"  anthropic: {{base_url: '{anthropic_url}', api_key: '{SECRET}', model: fake-claude}}\n")


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_lists_executors_with_secrets_masked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every built-in is listed; configured settings are shown with the API key masked."""
    write_config(tmp_path, "http://127.0.0.1:1/v1", "http://127.0.0.1:1")
    assert run_cli(["providers", "-C", str(tmp_path), "--json"]) == 0
    out = capsys.readouterr().out
    assert SECRET not in out
    rows = {row["executor"]: row for row in json.loads(out)["executors"]}
    assert {"openai", "anthropic", "dry-run", "scripted", "replay"} <= set(rows)
    assert rows["openai"]["settings"]["model"] == "fake-gpt"
    assert rows["openai"]["settings"]["api_key"].startswith("[REDACTED")
    assert rows["dry-run"]["configured"] is False


def test_check_reports_one_line_per_provider(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Both fake APIs answer the models request; each gets an ok line naming the endpoint and model."""
    with FakeOpenAI().running() as openai_server, FakeAnthropic().running() as anthropic_server:
        write_config(tmp_path, openai_server.base_url, anthropic_server.base_url)
        code = run_cli(["providers", "-C", str(tmp_path), "--check", "--timeout", "2"])
    out = capsys.readouterr().out
    assert code == 0
    lines = {line.split(":", 1)[0]: line for line in out.splitlines() if ": " in line}
    assert "ok" in lines["openai"] and "model fake-gpt" in lines["openai"]
    assert "ok" in lines["anthropic"] and "model fake-claude" in lines["anthropic"]
    assert SECRET not in out


def test_check_fails_for_an_unreachable_or_refusing_provider(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A refused connection and a 401 are failures with a clear detail and exit code 7."""
    with FakeOpenAI().running() as openai_server:
        openai_server.models_fault = fault(401, "invalid api key")
        write_config(tmp_path, openai_server.base_url, closed_port_url())
        code = run_cli(["providers", "-C", str(tmp_path), "--check", "--json", "--timeout", "1"])
    checks = {c["executor"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert code == 7
    assert checks["openai"]["status"] == "failed" and "HTTP 401" in checks["openai"]["detail"]
    assert checks["anthropic"]["status"] == "failed" and "connection failed" in checks["anthropic"]["detail"]


def test_check_skips_an_unconfigured_provider(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A provider with no model is skipped with the fix, and does not fail the command."""
    assert run_cli(["providers", "-C", str(tmp_path), "--check", "--json"]) == 0
    checks = {c["executor"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["openai"]["status"] == "skipped" and "STEPLINE_OPENAI_MODEL" in checks["openai"]["detail"]
    assert "dry-run" not in checks
