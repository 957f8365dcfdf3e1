"""What a workflow costs in prompt text: stepline's requests against the same workflow run as prompts.

Usage: ``python bench/prompt_economy.py [--workflow brief]``

**stepline**: BMAD v6.0.0-alpha.23's ``create-product-brief`` (micro-file, 6 step files) is installed from the
corpus into a temporary project and run with the ``openai`` executor in ``--yolo`` against the tests' local fake
OpenAI-compatible server, whose deterministic fake model (``tests/fakes/policy.py``) answers every request with
the step protocol's tool calls. The server logs every request; each request's prompt is its messages and tool
definitions serialised as the SDK sends them.

**as prompts** (the simulated baseline): an IDE agent given the same workflow in one growing conversation, as
BMAD intends it to be run by hand: the system text and the tool definitions, then ``workflow.md`` and the
module's ``config.yaml`` read into the conversation (one request each), then for every step file the runtime
visited, in order: a request that reads it (its whole text lands in the conversation) and a request that writes
that step's section (the same text stepline's fake model wrote for it), never stopping at a menu. Every request
resends the whole conversation so far.

Both are counted in characters (a model's tokens are about a quarter of them), uncached and cache-weighted: a
request's prefix shared byte for byte with an earlier request of the same run is billed at 0.1× (a cache read),
the rest at 1.25× (a cache write), as Anthropic bills and OpenAI's automatic caching approximates. Prints the
totals, the ratios stepline / prompts, and how much of stepline's text is its shared prefix. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests"))  # the fake server and fake model the tests use

CORPUS = HERE.parent / "shared" / "corpus" / "bmad"
BRIEF = Path("_bmad/bmm/workflows/1-analysis/create-product-brief/workflow.md")
CACHE_READ, CACHE_WRITE = 0.1, 1.25


def _text(request: dict[str, Any]) -> str:
    """A request's prompt as bytes the provider sees: tools first (they precede the messages), then messages."""
    return json.dumps(request.get("tools") or [], sort_keys=True) + "".join(
        json.dumps(message, sort_keys=True) for message in request["messages"])


def _shared(a: str, b: str) -> int:
    limit = min(len(a), len(b))
    low, high = 0, limit
    while low < high:  # binary search on the common prefix length (the texts are long)
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def costs(prompts: list[str]) -> tuple[int, float, int]:
    """Uncached characters, cache-weighted characters, and characters read from the cache."""
    uncached = weighted = cached = 0
    weighted_f = 0.0
    for index, prompt in enumerate(prompts):
        prefix = max((_shared(prompt, earlier) for earlier in prompts[:index]), default=0)
        uncached += len(prompt)
        cached += prefix
        weighted_f += prefix * CACHE_READ + (len(prompt) - prefix) * CACHE_WRITE
    weighted = round(weighted_f)
    return uncached, weighted, cached


def run_stepline(project: Path) -> tuple[list[dict[str, Any]], list[Path], dict[str, str]]:
    """Run the brief with the openai executor against the fake server; return the requests, the step files
    visited in order, and the section each step wrote."""
    from fakes import fake_openai
    from fakes.policy import Policy
    from stepline import Engine
    from stepline.families import load_workflow

    policy = Policy()
    with fake_openai.FakeOpenAI().running() as server:
        server.responder = fake_openai.responder(policy)
        engine = Engine(project_root=project, executor="openai", mode="yolo",
                        executor_options={"base_url": server.base_url, "api_key": "bench", "model": "fake"})
        run = asyncio.run(engine.start(load_workflow(project / BRIEF, project_root=project)))
        requests = list(server.requests)
    if run.status.value != "completed":
        raise SystemExit(f"the stepline run did not complete: {run.error}")
    steps = [Path(spec.source.path) for spec in run.workflow.steps  # the step files the run completed, in order
             if spec.source is not None and Path(spec.source.path).name.startswith("step-")
             and spec.id in run.steps and run.steps[spec.id].status.value == "completed"]
    written: dict[str, str] = {}
    for request in requests:
        for message in request["messages"]:
            for call in message.get("tool_calls") or ():
                if call["function"]["name"] == "write_output":
                    args = json.loads(call["function"]["arguments"])
                    written[str(len(written))] = str(args.get("content", ""))
    return requests, steps, written


def prompt_run(project: Path, system: str, tools: str, steps: list[Path], sections: list[str]) -> list[str]:
    """The simulated prompt-run: one growing conversation, one string per request (see the module docstring)."""
    workflow = (project / BRIEF).read_text(encoding="utf-8")
    config = (project / "_bmad" / "bmm" / "config.yaml").read_text(encoding="utf-8")
    conversation = tools + system + f"\nRun the workflow {BRIEF} step by step.\n"
    prompts: list[str] = []

    def turn(added: str) -> None:
        nonlocal conversation
        prompts.append(conversation)
        conversation += added

    turn(f"[read workflow.md]\n{workflow}")
    turn(f"[read config.yaml]\n{config}")
    for index, step in enumerate(steps):
        turn(f"[read {step.name}]\n{step.read_text(encoding='utf-8')}")
        section = sections[index] if index < len(sections) else ""
        turn(f"[write the section]\n{section}\n[update the frontmatter: stepsCompleted]\n")
    prompts.append(conversation)  # the closing turn
    return prompts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", default="v6.0.0-alpha.23")
    options = parser.parse_args()
    from stepline.bmad import install_bmad

    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "shop"
        install_bmad(CORPUS / options.release, project, {"user_name": "Ada"})
        tasks = project / "_bmad" / "core" / "tasks"
        tasks.mkdir(parents=True, exist_ok=True)
        shutil.copy2(CORPUS / "extras" / "validate-workflow.xml", tasks / "validate-workflow.xml")
        requests, steps, written = run_stepline(project.resolve())
        ours = [_text(request) for request in requests]
        first = requests[0]
        system = "".join(m["content"] for m in first["messages"] if m["role"] == "system")
        tools = json.dumps(first.get("tools") or [], sort_keys=True)
        theirs = prompt_run(project, system, tools, steps, list(written.values()))

    ours_u, ours_w, ours_c = costs(ours)
    theirs_u, theirs_w, theirs_c = costs(theirs)
    print(f"create-product-brief ({options.release}), {len(steps)} step files visited")
    print(f"{'':24}{'requests':>9}{'uncached chars':>16}{'cache-weighted':>16}{'from cache':>12}")
    print(f"{'stepline':24}{len(ours):>9}{ours_u:>16,}{ours_w:>16,}{ours_c / ours_u:>11.0%}")
    print(f"{'as prompts (simulated)':24}{len(theirs):>9}{theirs_u:>16,}{theirs_w:>16,}{theirs_c / theirs_u:>11.0%}")
    print(f"ratio stepline / prompts: uncached {ours_u / theirs_u:.2f}x, cache-weighted {ours_w / theirs_w:.2f}x "
          "(issue 21's targets: <= 0.25x and <= 0.5x)")


if __name__ == "__main__":
    main()
