"""The dashboard in a real headless Chromium (Debian's, driven by Playwright): log in, watch a run another
process drives appear and advance live, approve its gate by clicking, and check the page and the run directory.

The browser comes from ``scripts/browser.sh`` (run by ``scripts/test.sh``); where none could be installed, the
test skips saying so. A screenshot of each page is saved in the test's tmp folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from web.dashboard_project import FIXTURES, TOKEN, Server, read_json, stepline_command, write_slow_workflow

CHROMIUM = os.environ.get("STEPLINE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


def _browser_or_skip() -> None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("browser tests: playwright is not installed (pip install -e '.[dev]')")
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"browser tests: no chromium at {CHROMIUM} (bash scripts/browser.sh installs Debian's as root)")


def test_watch_a_run_live_then_approve_its_gate_by_clicking(tmp_path: Path) -> None:
    """Runs list → the run's page, whose steps complete one by one while the run's own process works → the gate
    appears → approve it in the form → approvals.json names the approver → `stepline resume` completes it."""
    _browser_or_skip()
    from playwright.sync_api import expect, sync_playwright

    root = tmp_path / "project"
    root.mkdir()
    write_slow_workflow(root, steps=3, pause=1.0)
    shutil.copytree(FIXTURES / "ccw" / "project-flat" / ".workflow", root / ".workflow")
    shots = tmp_path / "screenshots"
    shots.mkdir()
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
            page.screenshot(path=shots / "runs.png")
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
            expect(gate).to_contain_text("human_gate is required")
            page.screenshot(path=shots / "run-gate.png", full_page=True)
            gate.locator("input[name=by]").fill("ada")
            gate.locator("input[name=notes]").fill("checked in the browser")
            gate.locator("button[value=approve]").click()
            expect(page.locator(".notice")).to_contain_text("Gate step:ship decided")
            expect(page.locator("section.gate")).to_have_count(0)
            expect(page.locator("text=checked in the browser")).to_be_visible()
            page.screenshot(path=shots / "run-approved.png", full_page=True)

            run_dir = root / ".stepline" / "runs" / run_id
            approvals = read_json(run_dir / "approvals.json")
            assert [(a["gate_id"], a["decision"], a["approver"]) for a in approvals] == [
                ("step:ship", "approved", "ada")]
            resumed = subprocess.run(stepline_command(root, "resume", run_id, "-q"), capture_output=True,
                                     text=True, timeout=60)
            assert resumed.returncode == 0, resumed.stderr
            page.reload()
            expect(page.locator("#run-status")).to_have_text("completed")
            page.screenshot(path=shots / "run-completed.png", full_page=True)

            page.goto(f"{server.url}/ccw/WFS-report-export")
            expect(page.locator(".card")).to_have_count(5)
            page.screenshot(path=shots / "ccw-board.png", full_page=True)
            browser.close()
    finally:
        if run is not None and run.poll() is None:
            run.kill()
            run.wait()
        server.stop()
    assert sorted(p.name for p in shots.iterdir()) == ["ccw-board.png", "login.png", "run-approved.png",
                                                       "run-completed.png", "run-gate.png", "run-live.png",
                                                       "runs.png"]
