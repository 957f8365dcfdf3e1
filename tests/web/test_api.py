"""The REST API: every endpoint with no token, a wrong one and the right one; what each returns; gate
decisions going through the engine exactly as the CLI's do; nothing written by a refused request."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from web.dashboard_project import TOKEN, Project, client_for, read_json


def _endpoints(project: Project) -> list[tuple[str, str, dict[str, object] | None]]:
    run, question = project.blocked, project.question
    return [
        ("GET", "/api/openapi.json", None),
        ("GET", "/api/runs", None),
        ("GET", f"/api/runs/{run}", None),
        ("GET", f"/api/runs/{run}/events", None),
        ("GET", f"/api/runs/{run}/artifacts", None),
        ("GET", f"/api/runs/{run}/artifacts/content?path=docs/notes.md", None),
        ("GET", f"/api/runs/{run}/evidence", None),
        ("GET", f"/api/runs/{run}/drr", None),
        ("GET", f"/api/runs/{run}/gates", None),
        ("GET", "/api/gates", None),
        ("GET", "/api/ccw/sessions", None),
        ("GET", "/api/ccw/sessions/WFS-report-export", None),
        ("POST", f"/api/runs/{run}/gates/step:announce/approve", {"by": "mallory"}),
        ("POST", f"/api/runs/{run}/gates/step:announce/reject", {"by": "mallory"}),
        ("POST", f"/api/runs/{question}/gates/{project.question_gate}/answer", {"by": "mallory", "answer": "red"}),
    ]


def _snapshot(project: Project) -> dict[str, bytes]:
    """Every file of every run, but a run's digest (summary.json: derived data the runs list keeps, as `stepline
    list` does, so a run's journal is folded once, not at every start of the server)."""
    return {str(p.relative_to(project.root)): p.read_bytes() for p in sorted(project.runs.rglob("*"))
            if p.is_file() and p.name != "summary.json"}


def test_every_endpoint_refuses_a_missing_or_wrong_token_and_changes_nothing(fresh: Project) -> None:
    """No token, a wrong one, or the right one in the wrong form: 401 everywhere, and no file of any run changes."""
    before = _snapshot(fresh)
    for credentials in (None, "Bearer wrong-token-0123456789", f"Basic {TOKEN}", TOKEN, f"Bearer {TOKEN}x"):
        with client_for(fresh) as client:
            if credentials is not None:
                client.headers["Authorization"] = credentials
            client.cookies.set("stepline_session", "forged")
            for method, url, body in _endpoints(fresh):
                answer = client.request(method, url, json=body)
                assert answer.status_code == 401, (credentials, method, url, answer.text)
                assert answer.headers["www-authenticate"] == "Bearer"
                assert "token" in answer.json()["error"]
            assert client.get(f"/api/runs/{fresh.blocked}/stream").status_code == 401
    assert _snapshot(fresh) == before


def test_every_read_endpoint_answers_with_the_right_token_and_writes_nothing(api: TestClient,
                                                                             shared: Project) -> None:
    """The right token opens every endpoint (the decisions are tested below, on a project of their own); reading
    every run, damaged ones included, and every page changes no file of any run."""
    before = _snapshot(shared)
    for method, url, _ in _endpoints(shared):
        if method == "GET":
            answer = api.get(url)
            assert answer.status_code == 200, (url, answer.text)
    for run_id in (shared.blocked, shared.completed, shared.question, shared.damaged_journal,
                   shared.damaged_manifest, shared.child):
        assert api.get(f"/api/runs/{run_id}").status_code == 200
        assert api.get(f"/runs/{run_id}").status_code == 200
    assert api.get("/").status_code == 200 and api.get("/ccw/WFS-report-export").status_code == 200
    assert _snapshot(shared) == before


def test_the_openapi_document_describes_every_endpoint(api: TestClient) -> None:
    """The OpenAPI document lists the API and its bearer scheme; pages are not in it."""
    document = api.get("/api/openapi.json").json()
    paths = set(document["paths"])
    assert {"/api/runs", "/api/runs/{run_id}", "/api/runs/{run_id}/events", "/api/runs/{run_id}/stream",
            "/api/runs/{run_id}/artifacts", "/api/runs/{run_id}/artifacts/content", "/api/runs/{run_id}/evidence",
            "/api/runs/{run_id}/drr", "/api/runs/{run_id}/gates", "/api/gates",
            "/api/runs/{run_id}/gates/{gate_id}/approve", "/api/runs/{run_id}/gates/{gate_id}/reject",
            "/api/runs/{run_id}/gates/{gate_id}/answer", "/api/ccw/sessions",
            "/api/ccw/sessions/{session_id}"} <= paths
    assert not any(path.startswith("/runs") for path in paths)
    assert document["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"


def test_runs_are_listed_newest_first_filtered_and_paged(api: TestClient, shared: Project) -> None:
    """The list has every run (damaged ones with their damage), filters by status and workflow, and pages."""
    listing = api.get("/api/runs").json()
    ids = [r["run_id"] for r in listing["runs"]]
    assert listing["total"] == 6 and ids == sorted(ids, reverse=True)
    rows = {r["run_id"]: r for r in listing["runs"]}
    assert rows[shared.blocked]["status"] == "blocked" and rows[shared.blocked]["steps_done"] == 1
    assert rows[shared.damaged_manifest]["status"] == "damaged"
    assert "manifest.json: not valid JSON" in rows[shared.damaged_manifest]["damage"]
    assert rows[shared.damaged_journal]["status"] == "damaged"  # its manifest is whole; its journal is not
    assert rows[shared.damaged_journal]["damage"].startswith("journal.jsonl:3: ")

    blocked = api.get("/api/runs", params={"status": "blocked"}).json()
    assert {r["run_id"] for r in blocked["runs"]} == {shared.blocked, shared.question}
    by_workflow = api.get("/api/runs", params={"workflow": "SURV"}).json()
    assert [r["run_id"] for r in by_workflow["runs"]] == [shared.question]

    first = api.get("/api/runs", params={"per_page": 4}).json()
    second = api.get("/api/runs", params={"per_page": 4, "page": 2}).json()
    assert (first["pages"], len(first["runs"]), len(second["runs"])) == (2, 4, 2)
    assert [r["run_id"] for r in first["runs"] + second["runs"]] == ids
    assert api.get("/api/runs", params={"per_page": 4, "page": 3}).json()["runs"] == []
    assert api.get("/api/runs", params={"per_page": 0}).status_code == 422


def test_a_run_has_its_steps_pending_gate_and_usage(api: TestClient, shared: Project) -> None:
    """A blocked run: steps with their status, the pending gate's reason; a unique part of the id is enough."""
    run = api.get(f"/api/runs/{shared.blocked[-8:]}").json()
    assert run["run_id"] == shared.blocked and run["status"] == "blocked" and run["workflow"] == "release"
    assert [(s["step_id"], s["status"]) for s in run["steps"]] == [("draft", "completed"), ("announce", "blocked")]
    assert run["steps"][0]["summary"] == "drafted"
    assert [g["gate_id"] for g in run["pending_gates"]] == ["step:announce"]
    assert run["usage"]["total"]["calls"] == 0 and run["parent_run_id"] is None
    assert run["children"] == [{"run_id": shared.child, "workflow": "checked", "status": "completed"}]
    child = api.get(f"/api/runs/{shared.child}").json()
    assert child["parent_run_id"] == shared.blocked and child["status"] == "completed"
    rows = {r["run_id"]: r for r in api.get("/api/runs").json()["runs"]}
    assert rows[shared.child]["parent_run_id"] == shared.blocked and rows[shared.blocked]["parent_run_id"] is None


def test_a_damaged_run_is_reported_not_a_server_error(api: TestClient, shared: Project) -> None:
    """A damaged journal: the run is `damaged` with the file:line; its events are a 422 naming the line."""
    run = api.get(f"/api/runs/{shared.damaged_journal}").json()
    assert run["status"] == "damaged" and "journal.jsonl:3" in run["damage"]
    events = api.get(f"/api/runs/{shared.damaged_journal}/events")
    assert events.status_code == 422 and "journal.jsonl:3" in events.json()["error"]
    missing = api.get("/api/runs/run-nope")
    assert missing.status_code == 404 and "no run 'run-nope'" in missing.json()["error"]


def test_events_are_paged_in_journal_order(api: TestClient, shared: Project) -> None:
    """Events after a seq, a page at a time; the replay bookkeeping records only when asked for."""
    first = api.get(f"/api/runs/{shared.blocked}/events", params={"limit": 3}).json()
    assert [e["seq"] for e in first["events"]] == [1, 2, 5] and first["more"]  # 3, 4: replay bookkeeping
    assert first["events"][0]["type"] == "WorkflowStarted" and first["events"][0]["data"]["workflow"] == "release"
    rest = api.get(f"/api/runs/{shared.blocked}/events", params={"after": first["next_after"]}).json()
    assert rest["events"][-1]["type"] == "WorkflowBlocked" and not rest["more"]
    everything = api.get(f"/api/runs/{shared.blocked}/events", params={"hidden": True, "limit": 1000}).json()
    assert [e["seq"] for e in everything["events"]] == list(range(1, everything["last_seq"] + 1))


def test_artifacts_have_their_content_and_sha256(api: TestClient, shared: Project) -> None:
    """An artifact's content and sha256 (now and as recorded); only recorded artifacts are served."""
    listed = api.get(f"/api/runs/{shared.blocked}/artifacts").json()
    assert [(a["path"], a["step_id"], a["unchanged"]) for a in listed] == [("docs/notes.md", "draft", True)]
    content = api.get(f"/api/runs/{shared.blocked}/artifacts/content", params={"path": "docs/notes.md"}).json()
    data = (shared.root / "docs" / "notes.md").read_bytes()
    assert content["content"] == data.decode() and content["sha256"] == hashlib.sha256(data).hexdigest()
    assert content["recorded_sha256"] == content["sha256"] == listed[0]["sha256"]
    for path in ("../../etc/passwd", "gated.yaml", "/etc/passwd"):
        refused = api.get(f"/api/runs/{shared.blocked}/artifacts/content", params={"path": path})
        assert refused.status_code == 404 and "recorded no artifact" in refused.json()["error"]


def test_evidence_has_scores_expiry_and_the_weakest_link(api: TestClient, shared: Project) -> None:
    """Each record's score and expiry; the WLNK leaves the expired record out."""
    found = api.get(f"/api/runs/{shared.completed}/evidence").json()
    records = {r["id"]: r for r in found["records"]}
    assert records["ev-strong"]["expired"] is False and records["ev-strong"]["score"] == pytest.approx(0.72)
    assert records["ev-old"]["expired"] is True
    assert found["wlnk"] == pytest.approx(0.72) and found["wlnk_by_step"] == {"review": pytest.approx(0.72)}


def test_gates_and_ccw_sessions(api: TestClient, shared: Project) -> None:
    """Pending gates per run and across runs; a CCW session's tasks with wave, status and summary."""
    gates = api.get(f"/api/runs/{shared.question}/gates").json()
    assert [(g["gate_id"], g["kind"]) for g in gates["pending"]] == [(shared.question_gate, "question")]
    assert gates["decided"] == [] and gates["approvals"] == []
    everywhere = api.get("/api/gates").json()
    assert {(g["run_id"], g["gate_id"]) for g in everywhere} == {(shared.blocked, "step:announce"),
                                                                 (shared.question, shared.question_gate)}
    assert api.get(f"/api/runs/{shared.blocked}/drr").json() == []
    sessions = api.get("/api/ccw/sessions").json()
    assert [(s["id"], s["total"]) for s in sessions] == [("WFS-report-export", 5)]
    board = api.get("/api/ccw/sessions/report").json()
    tasks = {t["id"]: t for t in board["tasks"]}
    assert (tasks["IMPL-001"]["wave"], tasks["IMPL-003"]["wave"], tasks["IMPL-005"]["wave"]) == (0, 1, 2)
    assert tasks["IMPL-001"]["summary"].startswith("# IMPL-001") and tasks["IMPL-002"]["summary"] is None
    assert all(t["status"] == "pending" for t in tasks.values())
    assert api.get("/api/ccw/sessions/WFS-nope").status_code == 404


def stepline(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stepline.interfaces.cli", *args, "-C", str(project)],
                          capture_output=True, text=True, timeout=120)


def test_a_gate_approved_over_http_is_resumed_by_the_cli(fresh: Project) -> None:
    """Approve over HTTP: the same audit records as `stepline approve`; `stepline resume` then completes the run
    with the approver in approvals.json; a second decision is a 409."""
    with client_for(fresh) as client:
        client.headers["Authorization"] = f"Bearer {TOKEN}"
        decided = client.post(f"/api/runs/{fresh.blocked}/gates/step:announce/approve",
                              json={"by": "ada", "notes": "looks right"})
        assert decided.status_code == 200, decided.text
        assert decided.json()["gate"]["status"] == "approved" and decided.json()["gate"]["approver"] == "ada"
        again = client.post(f"/api/runs/{fresh.blocked}/gates/step:announce/approve", json={"by": "bob"})
        assert again.status_code == 409 and "already approved" in again.json()["error"]
        assert client.post(f"/api/runs/{fresh.blocked}/gates/step:announce/approve", json={"by": ""}).status_code == 422
    run_dir = fresh.runs / fresh.blocked
    events = [line for line in (run_dir / "journal.jsonl").read_text().splitlines() if "HumanGateApproved" in line]
    assert len(events) == 1 and '"by":"ada"' in events[0].replace(" ", "")
    resumed = stepline(fresh.root, "resume", fresh.blocked, "-q", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert (fresh.root / "docs" / "announce.txt").read_text() == "2.0 is out\n"
    approvals = read_json(run_dir / "approvals.json")
    assert [(a["gate_id"], a["decision"], a["approver"], a["notes"]) for a in approvals] == [
        ("step:announce", "approved", "ada", "looks right")]
    assert [d["signoff"] for d in read_json(run_dir / "drr.json")] == ["ada"]


def test_reject_and_answer_over_http(fresh: Project) -> None:
    """A rejection fails the step at resume; an answer is what the resumed step gets."""
    with client_for(fresh) as client:
        client.headers["Authorization"] = f"Bearer {TOKEN}"
        assert client.post(f"/api/runs/{fresh.blocked}/gates/step:announce/reject",
                           json={"by": "eve", "notes": "not yet"}).status_code == 200
        wrong_kind = client.post(f"/api/runs/{fresh.question}/gates/{fresh.question_gate}/approve", json={"by": "ada"})
        assert wrong_kind.status_code == 409 and "question" in wrong_kind.json()["error"]
        answered = client.post(f"/api/runs/{fresh.question}/gates/{fresh.question_gate}/answer",
                               json={"by": "ada", "answer": "blue"})
        assert answered.status_code == 200, answered.text
    assert stepline(fresh.root, "resume", fresh.blocked, "-q").returncode == 8
    assert read_json(fresh.runs / fresh.blocked / "approvals.json")[0]["decision"] == "rejected"
    resumed = stepline(fresh.root, "resume", fresh.question, "-q")
    assert resumed.returncode == 0, resumed.stderr
    answers = [line for line in (fresh.runs / fresh.question / "journal.jsonl").read_text().splitlines()
               if "AnswerGiven" in line]
    assert answers and '"blue"' in answers[0]


def test_cookie_sessions_need_the_csrf_token_and_this_origin(fresh: Project) -> None:
    """A browser session (the login cookie) may decide a gate only with the CSRF value and from this origin."""
    url = f"/api/runs/{fresh.blocked}/gates/step:announce/approve"
    before = _snapshot(fresh)
    with client_for(fresh) as client:
        login = client.post("/login", data={"token": TOKEN, "next": "/"}, follow_redirects=False)
        assert login.status_code == 303
        cookie = login.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and TOKEN not in cookie
        assert client.get("/api/runs").status_code == 200  # the cookie authenticates reads
        csrf = client.app.state.web.auth.csrf_value  # type: ignore[attr-defined]
        assert client.post(url, json={"by": "x"}).status_code == 403
        assert client.post(url, json={"by": "x"}, headers={"X-CSRF-Token": "forged"}).status_code == 403
        assert client.post(url, json={"by": "x"}, headers={"X-CSRF-Token": csrf,
                                                            "Origin": "http://evil.example"}).status_code == 403
        assert client.post(url, json={"by": "x"}, headers={"X-CSRF-Token": csrf,
                                                            "Sec-Fetch-Site": "cross-site"}).status_code == 403
        assert _snapshot(fresh) == before
        ok = client.post(url, json={"by": "ada"}, headers={"X-CSRF-Token": csrf, "Origin": "http://127.0.0.1:8765"})
        assert ok.status_code == 200, ok.text


def test_a_foreign_host_name_is_refused(shared: Project) -> None:
    """A page of another site that rebinds its name to 127.0.0.1 gets 400 (the Host is not a loopback name)."""
    with TestClient(client_for(shared).app, base_url="http://attacker.example") as client:
        assert client.get("/api/runs", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 400


def test_model_usage_and_cost_are_summed_per_step_and_run(tmp_path: Path) -> None:
    """A run whose model calls were journaled (the openai executor against a fake endpoint): the API and the
    page show each step's calls, tokens and cost, and the run's totals."""
    import asyncio

    from fakes.fake_openai import FakeOpenAI, completion
    from fakes.runs import greeting_workflow
    from stepline import Engine

    root = tmp_path / "project"
    root.mkdir()
    with FakeOpenAI().running() as server:
        server.queue(completion(("write_output", {"content": "Hello, Ada!\n"})),
                     completion(("finish", {"summary": "greeted"})))
        engine = Engine(project_root=root, executor="openai", mode="yolo", executor_options={
            "base_url": server.base_url, "api_key": "sk-test-0123456789abcdefghijklmnopqrstuv", "model": "fake-gpt",
            "prices": {"fake-gpt": {"input": 1.0, "output": 2.0}}})
        run_id = asyncio.run(engine.start(greeting_workflow())).run_id
    project = Project(root=root, blocked=run_id, completed=run_id, question=run_id, damaged_journal="",
                      damaged_manifest="", child="")
    with client_for(project) as client:
        client.headers["Authorization"] = f"Bearer {TOKEN}"
        usage = client.get(f"/api/runs/{run_id}").json()["usage"]
        assert usage["steps"]["write"]["calls"] == 2 and usage["total"]["input_tokens"] == 200
        assert usage["total"]["cost_usd"] == pytest.approx(2 * (100 * 1.0 + 20 * 2.0) / 1e6)
        client.post("/login", data={"token": TOKEN}, headers={"Origin": "http://127.0.0.1:8765"})
        page = client.get(f"/runs/{run_id}").text
        assert "Model usage" in page and "<td>200</td><td>40</td><td>0.0003</td>" in page.replace("\n", "")


def test_the_sprint_board_is_the_boards_entries_with_their_loop_runs(fresh: Project) -> None:
    """GET /api/sprint gives what `stepline sprint status --json` gives, in the board's order (stories without a
    loop run have none); a project without sprint-status.yaml is a 404 naming the fix; no token is a 401."""
    with client_for(fresh) as client:
        client.headers["Authorization"] = f"Bearer {TOKEN}"
        missing = client.get("/api/sprint")
        assert missing.status_code == 404 and "sprint-status.yaml" in missing.text
        board = fresh.root / "_bmad-output" / "implementation-artifacts" / "sprint-status.yaml"
        board.parent.mkdir(parents=True)
        board.write_text("development_status:\n  epic-1: in-progress\n  1-1-add: done\n  1-2-sub: ready-for-dev\n",
                         encoding="utf-8")
        answer = client.get("/api/sprint")
        assert answer.status_code == 200, answer.text
        entries = answer.json()["entries"]
        assert [(e["key"], e["status"], e["run"]) for e in entries] == [
            ("epic-1", "in-progress", None), ("1-1-add", "done", None), ("1-2-sub", "ready-for-dev", None)]
        del client.headers["Authorization"]
        assert client.get("/api/sprint").status_code == 401
