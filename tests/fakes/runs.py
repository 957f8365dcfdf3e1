"""Small workflows and journal helpers for executor tests."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from stepline import Engine
from stepline.model import Run, StepSpec, WorkflowSpec
from stepline.store import RunDir

OUTPUT = "out/greeting.md"


def greeting_workflow() -> WorkflowSpec:
    """One native step that asks the executor to write a greeting to ``out/greeting.md``."""
    return WorkflowSpec(id="greet", name="Greeting", format="native", variables={"user_name": "Ada"}, steps=[
        StepSpec(id="write", name="Write the greeting", outputs=[OUTPUT],
                 body="Write a one-line greeting for {{user_name}} to the output file, then finish."),
    ])


def run_dir(engine: Engine, run: Run) -> RunDir:
    """The run's directory."""
    return engine.store.open(run.run_id)


def memo_records(engine: Engine, run: Run, label: str) -> list[dict[str, Any]]:
    """The ``CallRecorded`` data of every ``memo:<label>`` call of the run, in order."""
    return [event.data for event in run_dir(engine, run).events()
            if event.type == "CallRecorded" and event.data.get("op") == f"memo:{label}"]


def truncate_after_first(engine: Engine, run: Run, op: str) -> None:
    """Cut the journal just after the first record of ``op``, as if the process had died there.

    The manifest a process that died there left was written before the cut (a run's last manifest is written
    at its end), so its ``journal_seq`` is set back to the cut: a manifest newer than its journal is damage.
    """
    directory = run_dir(engine, run)
    lines = directory.journal_path.read_bytes().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if json.loads(line)["data"].get("op") == op)
    directory.journal_path.write_bytes(b"".join(lines[: cut + 1]))
    manifest = json.loads(directory.manifest_path.read_bytes())
    manifest["journal_seq"] = min(manifest.get("journal_seq", 0), cut + 1)
    manifest["status"] = "running"
    directory.manifest_path.write_text(json.dumps(manifest), encoding="utf-8")


def outputs_digest(root: Path, engine: Engine, run: Run) -> dict[str, str]:
    """sha256 of every artifact file and of the artifact index entries (path + hash), for byte comparisons."""
    artifacts = run_dir(engine, run).read("artifacts.json", []) or []
    digests = {a["path"]: hashlib.sha256((root / a["path"]).read_bytes()).hexdigest() for a in artifacts}
    digests["artifacts.sha256"] = ",".join(f"{a['path']}={a['sha256']}" for a in artifacts)
    return digests


def openai_run(root: Path, model: str = "gpt-4o-mini", workflow: WorkflowSpec | None = None) -> tuple[str, list[Any]]:
    """A run of the openai executor against a fake endpoint that caches prompts (the greeting workflow, or
    ``workflow`` with one step ``write``): two model calls; its id and the usage each call journaled (Usage)."""
    import asyncio

    from fakes.fake_openai import FakeOpenAI, completion
    from stepline.executors import Usage

    with FakeOpenAI().running() as server:
        server.caching = True
        server.queue(completion(("write_output", {"content": "Hello, Ada!\n"}), model=model),
                     completion(("finish", {"summary": "greeted"}), model=model))
        engine = Engine(project_root=root, executor="openai", mode="yolo", executor_options={
            "base_url": server.base_url, "api_key": "sk-test-0123456789abcdefghijklmnopqrstuv", "model": model})
        run = asyncio.run(engine.start(workflow or greeting_workflow()))
    assert run.status.value == "completed", run.error
    calls = [e.data["result"]["usage"] for e in engine.store.open(run.run_id).events()
             if e.type == "CallRecorded" and str(e.data.get("op")).startswith("memo:openai")]
    return run.run_id, [Usage.from_record(usage) for usage in calls]
