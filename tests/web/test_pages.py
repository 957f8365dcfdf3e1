"""The server-rendered pages: login, runs list, a run, an artifact, a CCW board, and the gate form."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from web.dashboard_project import TOKEN, Project, client_for, read_json

ORIGIN = {"Origin": "http://127.0.0.1:8765"}


def _login(client: TestClient) -> None:
    answer = client.post("/login", data={"token": TOKEN, "next": "/"}, headers=ORIGIN, follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == "/"


@pytest.fixture
def browser(shared: Project) -> Iterator[TestClient]:
    """A client logged in with the cookie, as a browser is."""
    with client_for(shared) as client:
        _login(client)
        yield client


def test_pages_need_a_login(anonymous: TestClient, shared: Project) -> None:
    """Without the cookie every page is the login form with 401; a wrong token is refused; `next` stays local."""
    for url in ("/", f"/runs/{shared.blocked}", "/ccw", f"/runs/{shared.blocked}/artifact?path=docs/notes.md"):
        page = anonymous.get(url)
        assert page.status_code == 401 and 'name="token"' in page.text
        assert "Draft the notes" not in page.text and "Release 2.0" not in page.text and "IMPL" not in page.text
    wrong = anonymous.post("/login", data={"token": "nope", "next": "/"}, headers=ORIGIN, follow_redirects=False)
    assert wrong.status_code == 401 and "not the token" in wrong.text and "set-cookie" not in wrong.headers
    away = anonymous.post("/login", data={"token": TOKEN, "next": "//evil.example/"}, headers=ORIGIN,
                          follow_redirects=False)
    assert away.status_code == 303 and away.headers["location"] == "/"
    forged = anonymous.post("/login", data={"token": TOKEN}, headers={"Origin": "http://evil.example"})
    assert forged.status_code == 403 and "set-cookie" not in forged.headers


def test_the_runs_list_shows_every_run_and_the_damaged_ones_errors(browser: TestClient, shared: Project) -> None:
    """Each run with its status; a damaged run's row says what is wrong (never a 500); filters keep to theirs."""
    page = browser.get("/")
    assert page.status_code == 200
    for run_id in (shared.blocked, shared.completed, shared.question, shared.damaged_journal):
        assert f'href="/runs/{run_id}"' in page.text
    assert "manifest.json: not valid JSON" in page.text and "journal.jsonl:3: bad record" in page.text
    assert f"stepline doctor {shared.damaged_journal}" in page.text
    blocked = browser.get("/", params={"status": "blocked"}).text
    assert shared.blocked in blocked and shared.completed not in blocked


def test_a_run_page_shows_steps_gate_artifacts_and_timeline(browser: TestClient, shared: Project) -> None:
    """The blocked run's page: its steps, the gate's question with approve/reject, its artifact, its events."""
    page = browser.get(f"/runs/{shared.blocked}").text
    assert 'data-step-id="draft"' in page and 'data-step-id="announce"' in page
    assert "Approval needed" in page and 'value="approve"' in page and 'value="reject"' in page
    assert "the step&#39;s human_gate is required" in page
    assert "docs/notes.md" in page and "WorkflowBlocked" in page and "/static/run.js" in page
    assert "Child runs:" in page and f'href="/runs/{shared.child}"' in page
    assert f'Started by <a href="/runs/{shared.blocked}"' in browser.get(f"/runs/{shared.child}").text
    evidence = browser.get(f"/runs/{shared.completed}").text
    assert "weakest link 0.72" in evidence and "ev-old" in evidence and "expired" in evidence
    question = browser.get(f"/runs/{shared.question}").text
    assert '<p class="question">Which colour?</p>' in question  # its options are buttons, not a free-text field
    assert re.findall(r'<button type="submit" name="answer" value="(\w+)"', question) == ["red", "blue"]
    assert '<input name="answer"' not in question


def test_run_pages_say_evidence_in_plain_words_with_a_legend(browser: TestClient, shared: Project) -> None:
    """No L0/L1/L2, CL1-CL3 or WLNK in the run page's text: plain words, and a legend that says what each code
    means in one sentence."""
    page = browser.get(f"/runs/{shared.completed}").text
    section = page[page.index('<section id="evidence">'):]
    section = section[:section.index("</section>")]
    cut = section.index('<details class="legend"')
    table, legend = section[:cut], section[cut:]
    text = re.sub(r"<[^>]+>", " ", table)
    assert not re.search(r"\b(L[012]|CL[123]|WLNK)\b", text), text
    assert "checked" in text and "asserted" in text and "close" in text and "weakest link 0.72" in text
    terms = dict(re.findall(r"<dt>([^<]+) <code>([^<]+)</code></dt>", legend))
    assert {terms[w] for w in ("asserted", "checked", "verified", "loose fit", "close fit", "exact fit",
                               "weakest link")} == {"L0", "L1", "L2", "CL1", "CL2", "CL3", "WLNK"}
    meanings = re.findall(r"<dd>([^<]+)</dd>", legend)
    assert len(meanings) == len(terms) and all(m.count(". ") == 0 and m.endswith(".") for m in meanings)


def test_a_damaged_run_page_shows_the_error(browser: TestClient, shared: Project) -> None:
    """A damaged run directory: its page says where and how to learn more."""
    page = browser.get(f"/runs/{shared.damaged_journal}")
    assert page.status_code == 200 and "This run directory is damaged" in page.text
    assert "journal.jsonl:3" in page.text and f"stepline doctor {shared.damaged_journal}" in page.text
    missing = browser.get("/runs/run-nope")
    assert missing.status_code == 404 and "no run &#39;run-nope&#39;" in missing.text


def test_an_artifact_is_rendered_with_its_html_escaped(browser: TestClient, shared: Project) -> None:
    """Markdown becomes HTML; a <script> in the document is text, never markup."""
    page = browser.get(f"/runs/{shared.blocked}/artifact", params={"path": "docs/notes.md"}).text
    assert "<h1>Release 2.0</h1>" in page and "<strong>Faster</strong>" in page
    assert "<script>alert" not in page and "&lt;script&gt;alert" in page
    assert "default-src 'self'" in browser.get("/").headers["content-security-policy"]


def test_a_ccw_session_is_a_board_by_wave_and_status(browser: TestClient) -> None:
    """The sessions list, then the board: a row per wave, the tasks as cards, a summary rendered."""
    assert "WFS-report-export" in browser.get("/ccw").text
    board = browser.get("/ccw/WFS-report-export").text
    assert board.count('class="card ') == 5 and "<strong>the thing</strong>" in board
    assert board.index('data-task-id="IMPL-001"') < board.index('data-task-id="IMPL-003"') < board.index(
        'data-task-id="IMPL-005"')


def test_the_gate_form_decides_with_the_csrf_value_only(fresh: Project) -> None:
    """The form without the CSRF value is refused and changes nothing; with it the gate is approved."""
    url = f"/runs/{fresh.blocked}/gates/step:announce"
    gates = fresh.runs / fresh.blocked / "gates.json"
    with client_for(fresh) as client:
        _login(client)
        refused = client.post(url, data={"decision": "approve", "by": "mallory"}, headers=ORIGIN)
        assert refused.status_code == 403 and read_json(gates)[0]["status"] == "pending"
        # Said as a page, in words: nothing changed, why, and what to do (not "send a Bearer header").
        assert refused.headers["content-type"].startswith("text/html")
        assert "Refused: nothing was changed" in refused.text and "Bearer" not in refused.text
        assert "security value of the dashboard&#39;s own page" in refused.text
        assert "Reload the run page and decide again" in refused.text
        csrf = client.app.state.web.auth.csrf_value  # type: ignore[attr-defined]
        form = {"decision": "approve", "by": "ada", "notes": "ok", "csrf_token": csrf}
        decided = client.post(url, data=form, headers=ORIGIN, follow_redirects=False)
        assert decided.status_code == 303, decided.text
        page = client.get(decided.headers["location"]).text
        assert "step:announce: approved by ada." in page and 'value="ada"' not in page  # no gate pending any more
        assert "Approval needed" not in page and ">ada<" in page
    assert read_json(gates)[0]["status"] == "approved" and read_json(gates)[0]["approver"] == "ada"


def test_a_run_whose_process_has_not_written_its_manifest_yet_is_starting(fresh: Project) -> None:
    """A run folder with no manifest yet, locked by a live process, is `starting` (list and page), not damaged."""
    from stepline.store import RunStore

    run_dir = RunStore(fresh.runs).create()
    with run_dir.lock(), client_for(fresh) as client:
        _login(client)
        rows = {r["run_id"]: r for r in client.get("/api/runs").json()["runs"]}
        assert rows[run_dir.run_id]["shown_status"] == "starting" and rows[run_dir.run_id]["damage"] is None
        page = client.get(f"/runs/{run_dir.run_id}")
        assert page.status_code == 200 and "This run is starting" in page.text and "damaged" not in page.text
    with client_for(fresh) as client:  # once its process is gone, the same folder is a run that never started
        _login(client)
        rows = {r["run_id"]: r for r in client.get("/api/runs").json()["runs"]}
        assert rows[run_dir.run_id]["shown_status"] == "not started"
        page = client.get(f"/runs/{run_dir.run_id}")
        assert page.status_code == 200 and "This run recorded nothing" in page.text


def test_a_long_timeline_lists_the_newest_events_and_points_to_the_api(browser: TestClient, shared: Project,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the page's limit, the newest events are listed and the rest is one API call away."""
    from stepline.interfaces.web import _pages

    monkeypatch.setattr(_pages, "TIMELINE_ROWS", 3)
    page = browser.get(f"/runs/{shared.blocked}").text
    timeline = page[page.index('id="timeline"'):]
    assert timeline.count("<tr><td>") == 3 and "WorkflowBlocked" in timeline and "WorkflowStarted" not in timeline
    assert "earlier events are not listed here" in page and f"/api/runs/{shared.blocked}/events" in page


def test_live_only_while_a_process_drives_the_run(browser: TestClient, shared: Project) -> None:
    """"● live" is shown only while a process holds the run's lock (its driver), never for a blocked or completed
    run nothing drives, however the page listens."""
    import os

    from stepline.store import RunLock

    def live(run_id: str) -> re.Match[str] | None:
        page = browser.get(f"/runs/{run_id}")
        assert page.status_code == 200
        return re.search(r'<span id="live" class="live"\s*(hidden)?', page.text)

    for run_id in (shared.blocked, shared.completed):
        shown = live(run_id)
        assert shown is not None and shown.group(1) == "hidden", run_id
    lock = RunLock(shared.runs / shared.blocked / "lock", shared.blocked)
    lock.acquire()  # this process drives it now, as a `stepline resume` would
    try:
        shown = live(shared.blocked)
        assert shown is not None and shown.group(1) is None
        assert browser.get(f"/api/runs/{shared.blocked}", headers={"Authorization": f"Bearer {TOKEN}"}
                           ).json()["driver_pid"] == os.getpid()
    finally:
        lock.release()
    shown = live(shared.blocked)
    assert shown is not None and shown.group(1) == "hidden"


def test_the_gate_card_shows_what_is_approved_and_what_approving_does(fresh: Project) -> None:
    """Not only "the step's human_gate is required": the gated step's name, text and declared outputs, what the
    run wrote so far (linked), the project's uncommitted diff (a git project), and what Approve and Reject do."""
    import subprocess

    root = fresh.root
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "base"]):
        subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)
    notes = root / "docs" / "notes.md"
    notes.write_text(notes.read_text() + "- **Smaller** journals\n", encoding="utf-8")
    (root / "docs" / "new.md").write_text("new\n", encoding="utf-8")
    with client_for(fresh) as client:
        _login(client)
        page = client.get(f"/runs/{fresh.blocked}")
        card = page.text[page.text.index('<section class="gate"'):page.text.index("</section>")]
        assert "the step&#39;s human_gate is required" in card  # the reason, and now what it is about:
        assert "The step that waits: Announce" in card and "<p>Announce.</p>" in card
        assert "It writes: <code>docs/announce.txt</code>" in card
        assert f'href="/runs/{fresh.blocked}/artifact?path=docs%2Fnotes.md">docs/notes.md</a>' in card
        assert '<span class="add">+- **Smaller** journals</span>' in card and "<code>docs/new.md</code>" in card
        assert "<strong>Approve:</strong> Step announce (Announce) does its work when the run continues." in card
        assert "<strong>Reject:</strong> Step announce (Announce) fails, and the run with it." in card
        assert "the run goes on at once, here (its executor: scripted), until it ends or asks again" in card
        api = client.get(f"/api/runs/{fresh.blocked}", headers={"Authorization": f"Bearer {TOKEN}"}).json()
        [gate] = api["pending_gates"]
        assert gate["step_text"] == "Announce." and gate["declared_outputs"] == ["docs/announce.txt"]


def test_a_decision_without_a_login_says_it_was_not_recorded(fresh: Project) -> None:
    """A decision sent by a browser that is not logged in (a restarted server with another token) is the login
    form saying the decision was not recorded and to log in and decide again; a script refused for its cookie
    without the CSRF value is told to send the bearer token."""
    url = f"/runs/{fresh.blocked}/gates/step:announce"
    gates = fresh.runs / fresh.blocked / "gates.json"
    with client_for(fresh) as client:
        page = client.post(url, data={"decision": "approve", "by": "ada"},
                           headers={**ORIGIN, "Referer": f"http://127.0.0.1:8765/runs/{fresh.blocked}"})
        assert page.status_code == 401 and 'name="token"' in page.text
        assert "Your decision was not recorded" in page.text and "Log in, then decide again" in page.text
        assert f'name="next" value="/runs/{fresh.blocked}"' in page.text  # back to the run after the login
        assert "This page needs the dashboard&#39;s token." in client.get("/").text
        _login(client)
        api = client.post(f"/api/runs/{fresh.blocked}/gates/step:announce/approve", json={"by": "ada"},
                          headers=ORIGIN)
        assert api.status_code == 403
        assert api.json()["error"].startswith("refused, nothing changed: it did not carry the security value")
        assert "Authorization: Bearer <the token `stepline serve` printed>" in api.json()["hint"]
    assert read_json(gates)[0]["status"] == "pending"
