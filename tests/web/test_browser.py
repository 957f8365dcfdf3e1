"""The dashboard in a real headless Chromium (Debian's, driven by Playwright): log in, watch a run another
process drives appear and advance live, approve its gate by clicking, and check the page and the run directory.

The browser comes from ``scripts/browser.sh`` (run by ``scripts/test.sh``); where none could be installed, the
test skips saying so. A screenshot of each page is saved in the test's tmp folder, or in ``STEPLINE_SCREENSHOTS``
when it names a folder (``STEPLINE_SCREENSHOTS=docs/dashboard`` makes the docs' pictures).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from web.dashboard_project import FIXTURES, TOKEN, Server, read_json, stepline_command, write_slow_workflow
from web.sprint_board import QUESTION, build_sprint_project, sprint_env

CHROMIUM = os.environ.get("STEPLINE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


def _browser_or_skip() -> None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("browser tests: playwright is not installed (pip install -e '.[dev]')")
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"browser tests: no chromium at {CHROMIUM} (bash scripts/browser.sh installs Debian's as root)")


def _screenshots(tmp_path: Path) -> Path:
    wanted = os.environ.get("STEPLINE_SCREENSHOTS")
    folder = Path(wanted).resolve() if wanted else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _blocked_run(root: Path, *run: str) -> str:
    """Run ``stepline run RUN… --non-interactive`` in ``root``; it must block (exit 9); return its run id."""
    started = subprocess.run(stepline_command(root, "run", *run, "--non-interactive", "-q"), capture_output=True,
                             text=True, timeout=120)
    assert started.returncode == 9, started.stdout + started.stderr
    return next((root / ".stepline" / "runs").iterdir()).name


def _logged_in_page(playwright: Any, server: Server, path: str, height: int = 900) -> Any:
    """A page of a new headless Chromium, logged in, at ``path``."""
    from playwright.sync_api import expect

    browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
    page = browser.new_page(viewport={"width": 1200, "height": height})
    page.set_default_timeout(60_000)
    expect.set_options(timeout=60_000)
    page.goto(f"{server.url}/login?next={path}")
    page.fill("input[name=token]", TOKEN)
    page.click("button[type=submit]")
    return page


def test_watch_a_run_live_then_approve_its_gate_by_clicking(tmp_path: Path) -> None:
    """Runs list → the run's page, whose steps complete one by one while the run's own process works → the gate
    appears → approve it in the form → approvals.json names the approver → `stepline resume` completes it."""
    _browser_or_skip()
    from playwright.sync_api import expect, sync_playwright

    root = tmp_path / "project"
    root.mkdir()
    write_slow_workflow(root, steps=3, pause=1.0, changes=True)
    (root / "CHANGES.md").write_text("# Changes\n", encoding="utf-8")
    shutil.copytree(FIXTURES / "ccw" / "project-flat" / ".workflow", root / ".workflow")
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "base"]):
        subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)
    shots = _screenshots(tmp_path)
    server = Server(root, "--token", TOKEN)
    run = None
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.set_default_timeout(30_000)
            expect.set_options(timeout=30_000)  # a loaded CI machine: the run's steps may take a while

            page.goto(f"{server.url}/")
            expect(page.locator("input[name=token]")).to_be_visible()
            page.screenshot(path=shots / "login.png")
            page.fill("input[name=token]", TOKEN)
            page.click("button[type=submit]")
            expect(page.locator("h1")).to_contain_text("Runs")

            run = subprocess.Popen(stepline_command(root, "run", "slow.yaml", "--non-interactive", "-q"),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            link = page.locator("table.runs a[href^='/runs/run-']").first
            for _ in range(100):  # the run shows up as soon as its process has made its folder
                page.reload()
                if link.count():
                    break
                page.wait_for_timeout(100)
            page.screenshot(path=shots / "runs-starting.png")
            run_id = link.inner_text()
            link.click()

            expect(page.locator("#live")).to_be_visible()
            first = page.locator("tr[data-step-id='work-1'] .badge")
            expect(first).to_have_text("completed")
            # Seen while the run's process is still at work: the page moved without a reload.
            assert run.poll() is None
            expect(page.locator("tr[data-step-id='work-3'] .badge")).not_to_have_text("completed")
            assert page.locator("#timeline tr.new").count() >= 2
            page.screenshot(path=shots / "run-live.png", full_page=True)

            gate = page.locator("section.gate")
            expect(gate).to_be_visible()  # the run blocked: the page reloaded and shows the gate's question
            assert run.wait(timeout=30) == 9
            expect(page.locator("#run-status")).to_have_text("blocked")
            for step in ("work-1", "work-2", "work-3"):
                expect(page.locator(f"tr[data-step-id='{step}'] .badge")).to_have_text("completed")
            expect(page.locator("#live")).to_be_hidden()  # blocked: no process drives it, though the page listens
            expect(gate).to_contain_text("human_gate is required")
            expect(gate.locator(".gated-step")).to_contain_text("The step that waits: Ship it")
            expect(gate.locator(".gated-step")).to_contain_text("Tag the release and publish CHANGES.md")
            expect(gate.locator(".gated-step")).to_contain_text("It writes: RELEASE.md")
            expect(gate.locator("details.diff .add")).to_have_text(["+- change 1", "+- change 2", "+- change 3"])
            expect(gate.locator(".outcomes")).to_contain_text("Step ship (Ship it) does its work when the run")
            expect(gate.locator(".outcomes")).to_contain_text("the run goes on at once, here (its executor: dry-run)")
            page.screenshot(path=shots / "run-gate.png", full_page=True)

            # A stale form (its security value from another server's token) is refused, in words, and changes nothing.
            gate.locator("input[name=by]").fill("mallory")
            page.evaluate("document.querySelector('section.gate input[name=csrf_token]').value = 'stale'")
            gate.locator("button[value=approve]").click()
            expect(page.locator("h1")).to_have_text("Refused: nothing was changed")
            expect(page.locator("main")).to_contain_text("Reload the run page and decide again")
            page.screenshot(path=shots / "refused.png", full_page=True)
            page.goto(f"{server.url}/runs/{run_id}")
            gate = page.locator("section.gate")
            gate.locator("input[name=by]").fill("ada")
            gate.locator("input[name=notes]").fill("checked in the browser")
            gate.locator("button[value=approve]").click()
            expect(page.locator(".notice")).to_contain_text("step:ship: approved by ada.")
            expect(page.locator("section.gate")).to_have_count(0)
            expect(page.locator("text=checked in the browser")).to_be_visible()
            page.screenshot(path=shots / "run-approved.png", full_page=True)

            # No terminal: the server went on with the run (its dry-run executor), the page followed it.
            expect(page.locator("#run-status")).to_have_text("completed")
            expect(page.locator("tr[data-step-id='ship'] .badge")).to_have_text("completed")
            run_dir = root / ".stepline" / "runs" / run_id
            approvals = read_json(run_dir / "approvals.json")
            assert [(a["gate_id"], a["decision"], a["approver"]) for a in approvals] == [
                ("step:ship", "approved", "ada")]
            page.screenshot(path=shots / "run-completed.png", full_page=True)
            page.click("a[href*='artifact?path=RELEASE.md']")
            expect(page.locator("main")).to_contain_text("[dry-run] Ship it")
            page.screenshot(path=shots / "artifact.png", full_page=True)
            page.goto(f"{server.url}/")
            expect(page.locator(f"tr[data-run-id='{run_id}'] .badge")).to_have_text("completed")
            page.screenshot(path=shots / "runs.png", full_page=True)

            page.goto(f"{server.url}/runs/{run_id}/artifact?path=nothing.md")
            expect(page.locator("h1")).to_have_text("Not found")
            page.screenshot(path=shots / "not-found.png", full_page=True)
            page.goto(f"{server.url}/ccw")
            expect(page.locator("main")).to_contain_text("WFS-report-export")
            page.screenshot(path=shots / "ccw-sessions.png", full_page=True)
            page.goto(f"{server.url}/ccw/WFS-report-export")
            expect(page.locator(".card")).to_have_count(5)
            page.screenshot(path=shots / "ccw-board.png", full_page=True)
            browser.close()
    finally:
        if run is not None and run.poll() is None:
            run.kill()
            run.wait()
        server.stop()
    assert {"artifact.png", "ccw-board.png", "ccw-sessions.png", "login.png", "not-found.png", "refused.png",
            "run-approved.png", "run-completed.png", "run-gate.png", "run-live.png", "runs-starting.png",
            "runs.png"} <= {p.name for p in shots.iterdir()}


def test_the_sprint_board_follows_the_loop_live(tmp_path: Path) -> None:
    """The sprint board of a loop that ran three stories (committed, deferred, blocked on a reviewer's question):
    a person answers the question and resumes the loop in a terminal, and the open page shows the story
    committed without being reloaded."""
    _browser_or_skip()
    from playwright.sync_api import expect, sync_playwright

    root = tmp_path / "calc"
    runs = build_sprint_project(root)
    shots = _screenshots(tmp_path)
    server = Server(root, "--token", TOKEN)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.set_default_timeout(60_000)
            expect.set_options(timeout=60_000)
            page.goto(f"{server.url}/login?next=/sprint")
            page.fill("input[name=token]", TOKEN)
            page.click("button[type=submit]")
            expect(page.locator("#sprint > h1")).to_contain_text("Sprint")
            expect(page.locator("#sprint-live")).to_be_visible()
            blocked = page.locator("tr[data-key='1-3-mul']")
            expect(blocked.locator(".badge.blocked")).to_have_text("blocked")
            expect(page.locator("tr[data-key='1-1-add'] .stage")).to_have_count(7)  # no `defer` left to do
            page.screenshot(path=shots / "sprint.png", full_page=True)
            page.goto(f"{server.url}/runs/{runs['1-3-mul']}")
            expect(page.locator("section.gate")).to_contain_text(QUESTION)
            page.screenshot(path=shots / "sprint-question.png", full_page=True)
            page.goto(f"{server.url}/sprint")
            expect(page.locator("#sprint-live")).to_be_visible()
            page.evaluate("window.stillTheSamePage = true")

            env = sprint_env(tmp_path)
            answered = subprocess.run(stepline_command(root, "answer", runs["1-3-mul"], "accept"), env=env,
                                      capture_output=True, text=True, timeout=60)
            assert answered.returncode == 0, answered.stderr
            resumed = subprocess.run(stepline_command(root, "sprint", "resume", "--json", "-q"), env=env,
                                     capture_output=True, text=True, timeout=300)
            assert resumed.returncode == 0, resumed.stderr
            expect(blocked.locator(".badge.completed")).to_have_text("completed")
            expect(blocked.locator(".stage", has_text="commit")).to_have_count(1)
            assert page.evaluate("window.stillTheSamePage") is True  # updated in place, not reloaded
            page.screenshot(path=shots / "sprint-updated.png", full_page=True)
            browser.close()
    finally:
        server.stop()


def test_answer_a_menu_with_a_button_and_the_run_goes_on_to_its_next_question(tmp_path: Path) -> None:
    """A run blocked on a question: its options are buttons; a click answers, the server resumes the run (its
    scripted executor, no terminal), the open page follows it through a slow step and shows the next question's
    buttons by itself; a second click completes the run."""
    _browser_or_skip()
    from playwright.sync_api import expect, sync_playwright

    root = tmp_path / "project"
    (root / "config").mkdir(parents=True)
    (root / "config" / "runtime.yaml").write_text(yaml.safe_dump(
        {"tools": {"risk_policy": {"high_requires_approval": False}}}), encoding="utf-8")
    workflow = {"id": "order", "steps": [
        {"id": "colour", "name": "Pick a colour", "body": "Ask for the colour."},
        {"id": "pack", "name": "Pack it", "body": "Pack.",
         "tools": [{"name": "shell", "required": True, "args": {"command": "sleep 3"}}]},
        {"id": "size", "name": "Pick a size", "body": "Ask for the size.", "outputs": ["order.md"]}]}
    script = {"steps": {
        "colour": [{"ask": {"question": "Which colour?", "choices": ["red", "blue"]}}, {"finish": {"summary": "ok"}}],
        "pack": [{"finish": {"summary": "packed"}}],
        "size": [{"ask": {"question": "Which size?", "choices": ["S", "M", "L"]}},
                 {"write_output": {"content": "a blue order, size M\n", "mode": "replace"}},
                 {"finish": {"summary": "ordered"}}]}}
    (root / "order.yaml").write_text(yaml.safe_dump(workflow, sort_keys=False), encoding="utf-8")
    (root / "script.yaml").write_text(yaml.safe_dump(script), encoding="utf-8")
    run_id = _blocked_run(root, "order.yaml", "--script", "script.yaml")
    shots = _screenshots(tmp_path)
    server = Server(root, "--token", TOKEN)
    try:
        with sync_playwright() as playwright:
            page = _logged_in_page(playwright, server, f"/runs/{run_id}")
            gate = page.locator("section.gate")
            expect(gate.locator(".question")).to_have_text("Which colour?")
            expect(gate.locator("button.choice")).to_have_text(["red", "blue"])
            expect(gate.locator("input[name=answer]")).to_have_count(0)
            gate.locator("input[name=by]").fill("ada")
            gate.locator("button.choice", has_text="blue").click()

            # The page follows the run the server goes on with, and shows the next question once it asks.
            expect(page.locator(".notice")).to_contain_text("answered blue by ada")
            expect(page.locator("#continuing")).to_be_visible()
            page.evaluate("window.stillTheSamePage = true")
            expect(page.locator("tr[data-step-id='pack'] .badge")).to_have_text("completed")
            expect(page.locator("section.gate .question")).to_have_text("Which size?")
            assert page.evaluate("window.stillTheSamePage") is not True  # it reloaded by itself at the question
            expect(page.locator("#run-status")).to_have_text("blocked")
            expect(page.locator("section.gate button.choice")).to_have_text(["S", "M", "L"])
            page.screenshot(path=shots / "run-next-question.png", full_page=True)
            page.locator("section.gate button.choice", has_text="M").click()
            expect(page.locator("#run-status")).to_have_text("completed")
            expect(page.locator("section.gate")).to_have_count(0)
            page.context.browser.close()
    finally:
        server.stop()
    journal = [json.loads(line) for line in
               (root / ".stepline" / "runs" / run_id / "journal.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [e["data"]["answer"] for e in journal if e["type"] == "AnswerGiven"] == ["blue", "M"]
    assert (root / "order.md").read_text(encoding="utf-8") == "a blue order, size M\n"


def test_a_skills_menu_answered_in_the_browser_and_the_skill_goes_on_to_its_end(tmp_path: Path) -> None:
    """The demo's Agent Skill (its plan stops at an [A] Approve | [E] Edit menu): the menu's options are buttons,
    Approve is clicked, and the skill goes on to write its code, with no terminal. The screenshots are the
    dashboard guide's pictures of a menu and of the run going on."""
    _browser_or_skip()
    from playwright.sync_api import expect, sync_playwright

    examples = Path(__file__).resolve().parents[2] / "examples" / "demo-skill"
    root = tmp_path / "project"
    shutil.copytree(examples / "greeting", root / "greeting")
    shutil.copy(examples / "greeting.yaml", root / "script.yaml")
    run_id = _blocked_run(root, "greeting", "--script", "script.yaml")
    shots = _screenshots(tmp_path)
    server = Server(root, "--token", TOKEN)
    try:
        with sync_playwright() as playwright:
            page = _logged_in_page(playwright, server, f"/runs/{run_id}", height=1000)
            gate = page.locator("section.gate")
            expect(gate.locator("button.choice")).to_have_text(["A Approve", "E Edit"])
            gate.locator("input[name=by]").fill("ada")
            page.screenshot(path=shots / "run-menu.png", full_page=True)
            gate.locator("button.choice", has_text="Approve").click()
            expect(page.locator("#run-status")).to_have_text("completed")
            expect(page.locator(".notice")).to_contain_text("answered A (Approve) by ada")
            expect(page.locator("a[href*='artifact?path=greet.py']").first).to_be_visible()
            page.screenshot(path=shots / "run-menu-answered.png", full_page=True)
            page.context.browser.close()
    finally:
        server.stop()
    assert (root / "greet.py").read_text(encoding="utf-8").startswith("def greet(name):")
