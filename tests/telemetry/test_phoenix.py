"""A BMAD skill run (v6.11.0's bmad-build) with the openai executor against the fake OpenAI server, its spans sent by
`stepline run` to a real collector, Arize Phoenix, started on loopback once for the module (scripts/phoenix.sh
installs it in its own venv, .venv-phoenix), then read back from Phoenix's REST API and shown in its web UI.

With STEPLINE_PHOENIX_SCREENSHOT=PATH set, Chromium also opens the trace in Phoenix's UI, checks it shows the run,
its steps and a model request's gen_ai attributes, and saves the screenshot there (the docs'
docs/observability/phoenix-trace.png is made so).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from fakes import fake_openai
from fakes.policy import Policy

REPO = Path(__file__).resolve().parents[2]
PHOENIX = REPO / ".venv-phoenix" / "bin" / "phoenix"
BMAD = REPO.parent / "shared" / "corpus" / "bmad" / "v6.11.0"
SKILL = "_bmad/bmm/ship/bmad-build"
CHROMIUM = os.environ.get("STEPLINE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"

pytestmark = [pytest.mark.corpus, pytest.mark.skipif(not BMAD.is_dir(), reason=f"no BMAD release at {BMAD}")]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Phoenix serving on 127.0.0.1 (its UI, REST API and OTLP/HTTP receiver on one port) from a scratch folder."""
    if not PHOENIX.is_file():
        pytest.skip("Arize Phoenix is not installed: bash scripts/phoenix.sh installs it (scripts/test.sh runs it)")
    work = tmp_path_factory.mktemp("phoenix")
    port = _free_port()
    # Its OTLP/gRPC receiver binds every address whatever PHOENIX_HOST says: a free port, unused by the tests.
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
           "PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": str(port), "PHOENIX_GRPC_PORT": str(_free_port()),
           "PHOENIX_WORKING_DIR": str(work), "PHOENIX_TELEMETRY_ENABLED": "false"}
    url = f"http://127.0.0.1:{port}"
    with (work / "phoenix.log").open("wb") as log:
        server = subprocess.Popen([str(PHOENIX), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while True:
            if server.poll() is not None:
                pytest.fail(f"phoenix serve exited {server.returncode}: {(work / 'phoenix.log').read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (work / "phoenix.log").read_text()[-2000:]
            time.sleep(0.2)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


@dataclass
class Traced:
    """The skill run and what Phoenix holds of it."""

    phoenix: str
    project: Path
    run_id: str
    trace_id: str
    journal: list[dict[str, Any]]
    spans: list[dict[str, Any]]


def _phoenix_spans(url: str, trace_id: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{url}/v1/projects/default/spans", params={"limit": 1000}, timeout=30)
    answer.raise_for_status()
    return [span for span in answer.json()["data"] if span["context"]["trace_id"] == trace_id]


@pytest.fixture(scope="module")
def traced(phoenix: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traced]:
    from stepline.bmad import install_bmad

    project = tmp_path_factory.mktemp("skill") / "project"
    install_bmad(BMAD, project, {})
    with fake_openai.FakeOpenAI().running() as server:
        policy = Policy()
        server.responder = fake_openai.responder(policy)
        server.caching = True  # the prompts' shared prefix comes back as cached_tokens
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
               "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "test", "STEPLINE_OPENAI_MODEL": "fake-model",
               "OTEL_EXPORTER_OTLP_ENDPOINT": phoenix}
        done = subprocess.run([sys.executable, "-m", "stepline.interfaces.cli", "run", SKILL, "--executor", "openai",
                               "--yolo", "-q"], cwd=project, env=env, capture_output=True, text=True, timeout=300,
                              check=False)
        assert done.returncode == 0, done.stderr
        assert policy.errors == []
    (run_dir,) = (project / ".stepline" / "runs").iterdir()
    journal = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines() if line.strip()]
    trace_id = journal[0]["data"]["trace"]["trace_id"]
    expected = 1 + sum(1 for e in journal if e["type"] == "WorkflowStepStarted") + sum(
        1 for e in journal if e["type"] == "CallRecorded" and e["data"]["op"] == "memo:openai") + sum(
        1 for e in journal if e["type"] == "ToolStarted")
    deadline = time.monotonic() + 60
    while len(spans := _phoenix_spans(phoenix, trace_id)) < expected:  # Phoenix stores what it got in batches
        assert time.monotonic() < deadline, f"Phoenix holds {len(spans)} of the run's {expected} spans"
        time.sleep(0.2)
    yield Traced(phoenix, project, run_dir.name, trace_id, journal, spans)


def test_phoenix_holds_the_skill_runs_trace_as_the_journal_says(traced: Traced) -> None:
    by_id = {span["context"]["span_id"]: span for span in traced.spans}
    (run,) = [s for s in traced.spans if s["parent_id"] is None]
    assert run["name"] == "invoke_workflow bmad-build" and run["status_code"] == "OK"
    assert run["attributes"]["gen_ai.operation.name"] == "invoke_workflow"
    assert run["attributes"]["gen_ai.workflow.name"] == "bmad-build"
    assert run["attributes"]["stepline.workflow.family"] == "bmad-skill"
    assert run["context"]["span_id"] == traced.journal[0]["data"]["trace"]["span_id"]
    assert all(s["attributes"]["stepline.run.id"] == traced.run_id for s in traced.spans)

    steps = {s["attributes"]["stepline.step.id"]: s for s in traced.spans if s["name"].startswith("step ")}
    ran = [e["step_id"] for e in traced.journal if e["type"] == "WorkflowStepStarted"]
    assert sorted(steps) == sorted(ran) and all(s["parent_id"] == run["context"]["span_id"] for s in steps.values())

    requests = [e for e in traced.journal if e["type"] == "CallRecorded" and e["data"]["op"] == "memo:openai"]
    chats = sorted((s for s in traced.spans if s["name"] == "chat fake-model"), key=lambda s: s["end_time"])
    assert len(chats) == len(requests) > 1
    for chat, request in zip(chats, requests, strict=True):
        usage = request["data"]["result"]["usage"]
        attributes = chat["attributes"]
        assert chat["span_kind"] == "LLM"  # Phoenix read the GenAI conventions: a model call
        assert by_id[chat["parent_id"]] is steps[request["step_id"]]
        assert {k: v for k, v in attributes.items() if k.startswith("gen_ai.")} == {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "fake-model",
            "gen_ai.response.model": "fake-model", "gen_ai.response.finish_reasons": ["tool_calls"],
            "gen_ai.usage.input_tokens": usage["input_tokens"],  # the whole prompt, as recorded
            "gen_ai.usage.output_tokens": usage["output_tokens"],
            "gen_ai.usage.cache_read.input_tokens": usage["cache_read_tokens"],
            "gen_ai.usage.cache_creation.input_tokens": 0}
        assert attributes["llm.token_count.prompt"] == attributes["gen_ai.usage.input_tokens"]  # as Phoenix counts
    assert any(c["attributes"]["gen_ai.usage.cache_read.input_tokens"] > 0 for c in chats)


@pytest.mark.skipif(not os.environ.get("STEPLINE_PHOENIX_SCREENSHOT"),
                    reason="set STEPLINE_PHOENIX_SCREENSHOT=PATH to see the trace in Phoenix's UI (a browser: 15 s)")
def test_phoenix_shows_the_trace_in_its_ui(traced: Traced) -> None:
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no chromium at {CHROMIUM} (bash scripts/browser.sh installs Debian's as root)")
    from playwright.sync_api import expect, sync_playwright

    project_id = httpx.get(f"{traced.phoenix}/v1/projects", timeout=30).json()["data"][0]["id"]
    shot = Path(os.environ["STEPLINE_PHOENIX_SCREENSHOT"])
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(f"{traced.phoenix}/projects/{project_id}/traces/{traced.trace_id}")
            tree = page.get_by_text("invoke_workflow bmad-build", exact=True)
            expect(tree.first).to_be_visible(timeout=60_000)
            for step in ("step step-01-clarify-and-route", "step step-05-present"):
                expect(page.get_by_text(step, exact=True).first).to_be_visible()
            page.get_by_text("chat fake-model", exact=True).last.click()  # a request that read from the cache
            page.get_by_role("tab", name="Attributes").click()
            for name in ("gen_ai.usage.input_tokens", "gen_ai.usage.cache_read.input_tokens", "gen_ai.request.model"):
                expect(page.get_by_text(name, exact=True).first).to_be_visible(timeout=30_000)
            page.screenshot(path=str(shot))
        finally:
            browser.close()
    assert shot.stat().st_size > 10_000
