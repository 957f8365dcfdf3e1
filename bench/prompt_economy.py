"""What a workflow costs in prompt text: stepline's requests against the same workflow run as prompts.

Usage: ``python bench/prompt_economy.py [--requests]``

Each workflow is installed from the corpus into a temporary project of its own: BMAD v6.0.0-alpha.23's
``create-product-brief`` (micro-file, 6 step files), then every step-file skill of v6.11.0, found as ``stepline
validate`` counts them (``bmad-skill/step-files``; the bench stops if there are none): ``SKILL.md`` (+
``workflow.md``) + step files.

**stepline**: the workflow run with the ``openai`` executor in ``--yolo`` against the tests' local fake
OpenAI-compatible server, whose deterministic fake model (``tests/fakes/policy.py``) answers every request with
the step protocol's tool calls. The server logs every request; each request's prompt is its tools and messages
serialised as the SDK sends them. The fake model reads no file; where a subagent's instruction names files (a
review layer's prompt), the subagent's request again with those files read is counted too, as for the prompt-run.

**as prompts** (the simulated baseline): an IDE agent given the same workflow in one growing conversation, as
it is meant to be run by hand: the system text and the tool definitions, then the entry files (``workflow.md``
or ``SKILL.md`` + ``workflow.md`` + ``customize.toml``) and the module's config read into the conversation (one
request each), then for every step file the runtime visited, in order: a request that reads it (its whole text
lands in the conversation) and a request that writes that step's output (the same text stepline's fake model
wrote), never stopping at a menu. Every request resends the whole conversation so far. Its system text is the
first paragraph of stepline's protocol text (a real IDE agent's is several times longer). The subagents a step
launches (the review layers) are simulated as the skill asks, minimal: where stepline ran them, the conversation
gets one request that launches them and their results back; each subagent is a fresh conversation of its own — the
same protocol text and tools, then the instruction the skill gives it, a request that reads the files the
instruction names (those that exist in the project) and one that returns its result. The ratio is printed with and
without them. Left out, all in its favour: the checkpoint a step halts at, and ``render_skill.py``'s call and output.

Both are counted in characters (a model's tokens are about a quarter of them), uncached and cache-weighted: a
request's prefix shared byte for byte with an earlier request of the same run is billed at 0.1x (a cache read),
the rest at 1.25x (a cache write), as Anthropic bills and OpenAI's automatic caching approximates. As the providers
do, a prefix counts as cached only from 1,024 tokens on (4,096 characters; OpenAI's and Anthropic's smallest
cacheable prompt) and in steps of 128 tokens (512 characters, OpenAI's cache granularity). Prints one table row
per workflow (requests, characters uncached and cache-weighted, the share read from the cache, for stepline and
for the prompt-run, the ratios, and the floor: the visited step files' own text sent once at the cache-write
price, against the prompt-run), each stepline request with ``--requests`` (its size, the prefix it shares with an
earlier request, its title), and the section headings left out of step files across the corpus (so a reader can
check that no judgement guidance is dropped). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests"))  # the fake server and fake model the tests use

CORPUS = HERE.parent / "shared" / "corpus" / "bmad"
BRIEF = Path("_bmad/bmm/workflows/1-analysis/create-product-brief/workflow.md")
#: The release whose step-file skills are all measured, and the cache-weighted ratio each should reach.
SKILLS_RELEASE, TARGET = "v6.11.0", 0.33
CACHE_READ, CACHE_WRITE = 0.1, 1.25
#: The smallest prefix a provider caches, and the steps it caches in (1,024 and 128 tokens, 4 characters a token).
CACHE_MIN_CHARS, CACHE_STEP_CHARS = 4096, 512


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


def cached_prefix(prompts: list[str], index: int) -> int:
    """The characters of request ``index`` a provider serves from its cache: the longest prefix it shares with
    an earlier request, in whole cache steps, and nothing below the smallest cacheable prefix."""
    shared = max((_shared(prompts[index], earlier) for earlier in prompts[:index]), default=0)
    return 0 if shared < CACHE_MIN_CHARS else shared - shared % CACHE_STEP_CHARS


def costs(prompts: list[str]) -> tuple[int, int, int]:
    """Uncached characters, cache-weighted characters, and characters read from the cache."""
    uncached = cached = 0
    weighted_f = 0.0
    for index, prompt in enumerate(prompts):
        prefix = cached_prefix(prompts, index)
        uncached += len(prompt)
        cached += prefix
        weighted_f += prefix * CACHE_READ + (len(prompt) - prefix) * CACHE_WRITE
    weighted = round(weighted_f)
    return uncached, weighted, cached


def run_stepline(project: Path, workflow: Path) -> tuple[list[dict[str, Any]], list[Path], dict[str, str]]:
    """Run ``workflow`` with the openai executor against the fake server; return the requests, the step files
    visited in order, and the text each step wrote."""
    from fakes import fake_openai
    from fakes.policy import Policy
    from stepline import Engine
    from stepline.families import load_workflow

    policy = Policy()
    with fake_openai.FakeOpenAI().running() as server:
        server.responder = fake_openai.responder(policy)
        engine = Engine(project_root=project, executor="openai", mode="yolo",
                        executor_options={"base_url": server.base_url, "api_key": "bench", "model": "fake"})
        run = asyncio.run(engine.start(load_workflow(project / workflow, project_root=project)))
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


class Subagents:
    """The subagents a step of the stepline run launched: the instruction each was given, and what came back."""

    def __init__(self, instructions: list[str], results: str) -> None:
        self.instructions = instructions
        self.results = results


def subagents_of(requests: list[dict[str, Any]]) -> dict[str, Subagents]:
    """By step id: the subagents stepline's run launched (``subagent: <name>`` requests, each counted once) and the
    results its continuation request carried back to the step."""
    from fakes.policy import read_request

    instructions: dict[str, dict[str, str]] = {}
    results: dict[str, str] = {}
    for request in requests:
        parsed = read_request(next(str(m["content"]) for m in request["messages"] if m["role"] == "user"))
        text = parsed.parts.get("Step instructions", "")
        if parsed.title.startswith("subagent: "):
            instructions.setdefault(parsed.step_id, {})[parsed.title] = text
        elif "\n## After the subagents\n" in text:
            results[parsed.step_id] = text.split("\n## After the subagents\n", 1)[1]
    return {step: Subagents(list(given.values()), results.get(step, "")) for step, given in instructions.items()}


def subagent_reads(requests: list[dict[str, Any]], project: Path) -> list[str]:
    """The requests a subagent of stepline's run makes after its first when it reads the files its instruction names
    (the fake model reads none): its first request, then what it read, as the prompt-run's subagents read them."""
    from fakes.policy import read_request

    follow_ups = []
    for request in requests:
        parsed = read_request(next(str(m["content"]) for m in request["messages"] if m["role"] == "user"))
        files = named_files(project, parsed.parts.get("Step instructions", "")) \
            if parsed.title.startswith("subagent: ") else []
        if files:
            follow_ups.append(_text(request) + "".join(f"[read {path.name}]\n{path.read_text(encoding='utf-8')}"
                                                       for path in files))
    return follow_ups


def named_files(project: Path, instruction: str) -> list[Path]:
    """The project files an instruction names in backticks (``Read `review-prompts/x.md` ``), as a subagent reads
    them: relative to the project root, or absolute."""
    found = []
    for name in re.findall(r"`([^`\s]+\.[A-Za-z0-9]+)`", instruction):
        path = Path(name) if Path(name).is_absolute() else project / name
        if path.is_file() and path not in found:
            found.append(path)
    return found


def prompt_run(entries: list[Path], system: str, tools: str, steps: list[Path], sections: list[str],
               subagents: dict[str, Subagents] | None = None, project: Path | None = None) -> list[str]:
    """The simulated prompt-run: one growing conversation, one string per request (see the module docstring);
    ``subagents``, by step: the fresh conversations a step launches, simulated as the skill asks."""
    conversation = tools + system + f"\nRun the workflow {entries[0]} step by step.\n"
    prompts: list[str] = []

    def turn(added: str) -> None:
        nonlocal conversation
        prompts.append(conversation)
        conversation += added

    for entry in entries:
        turn(f"[read {entry.name}]\n{entry.read_text(encoding='utf-8')}")
    for index, step in enumerate(steps):
        turn(f"[read {step.name}]\n{step.read_text(encoding='utf-8')}")
        launched = (subagents or {}).get(step.stem)
        if launched is not None:
            turn("".join(f"[launch a subagent]\n{given}\n" for given in launched.instructions)
                 + f"[the subagents returned]\n{launched.results}\n")
            for given in launched.instructions:  # each a fresh conversation: the instruction, the files it names
                fresh = tools + system + "\n" + given
                files = named_files(project, given) if project is not None else []
                if files:
                    prompts.append(fresh)
                    fresh += "".join(f"[read {path.name}]\n{path.read_text(encoding='utf-8')}" for path in files)
                prompts.append(fresh)
        section = sections[index] if index < len(sections) else ""
        turn(f"[write the section]\n{section}\n[update the frontmatter: stepsCompleted]\n")
    prompts.append(conversation)  # the closing turn
    return prompts


@dataclass(frozen=True)
class Workflow:
    """One workflow measured: its name, corpus release and path in the installed project."""

    name: str
    release: str
    path: Path

    def entries(self) -> list[Path]:
        """The files a prompt-run reads first (those the project holds): a micro-file workflow's ``workflow.md``,
        a skill's ``SKILL.md``, ``workflow.md`` and ``customize.toml``; then the module's config."""
        files = [self.path] if self.path.suffix == ".md" else [
            self.path / "SKILL.md", self.path / "workflow.md", self.path / "customize.toml"]
        return [*files, Path("_bmad/bmm/config.yaml")]


def install(release: str, project: Path) -> None:
    """The corpus release installed into ``project`` as a user installs it (with the task it references)."""
    from stepline.bmad import install_bmad

    install_bmad(CORPUS / release, project, {"user_name": "Ada"})
    tasks = project / "_bmad" / "core" / "tasks"
    tasks.mkdir(parents=True, exist_ok=True)
    shutil.copy2(CORPUS / "extras" / "validate-workflow.xml", tasks / "validate-workflow.xml")


def workflows() -> list[Workflow]:
    """v6.0.0-alpha.23's ``create-product-brief``, then every step-file skill of v6.11.0, found as ``stepline
    validate`` counts them (``bmad-skill/step-files``) in an installed project, so none is silently left out."""
    from stepline.families import workflows_of_kind

    brief = Workflow("create-product-brief", "v6.0.0-alpha.23", BRIEF)
    found = [brief] if (CORPUS / brief.release).is_dir() else []
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        install(SKILLS_RELEASE, project)
        skills = workflows_of_kind(project / "_bmad", "bmad-skill/step-files")
    if not skills:
        raise SystemExit(f"no step-file skill found in {SKILLS_RELEASE}: the bench measures nothing")
    return found + [Workflow(path.name.removeprefix("bmad-"), SKILLS_RELEASE, path.relative_to(project))
                    for path in skills]


def _title(request: dict[str, Any]) -> str:
    """What a stepline request was for: its ``# Step`` / ``## Request`` lines, as the prompt names them."""
    user = next((m["content"] for m in request["messages"] if m["role"] == "user"), "")
    found = [line.lstrip("# ").strip() for line in str(user).splitlines() if line.startswith(("# Step", "## Request"))]
    return " / ".join(found)[:90]


def list_requests(requests: list[dict[str, Any]], prompts: list[str]) -> None:
    """One line per stepline request: its size, what of it the cache served, what it was for (the prompts after
    the requests: the subagents' reads, see :func:`subagent_reads`)."""
    print(f"{'#':>4}{'chars':>8}{'cached':>8}  request")
    titles = [_title(request) for request in requests]
    titles += ["a subagent again, with the files its instruction names read"] * (len(prompts) - len(titles))
    for index, (title, prompt) in enumerate(zip(titles, prompts, strict=True)):
        print(f"{index:>4}{len(prompt):>8,}{cached_prefix(prompts, index):>8,}  {title}")


@dataclass(frozen=True)
class Figures:
    """One side's requests and characters: uncached, cache-weighted, and read from the cache."""

    requests: int
    uncached: int
    weighted: int
    cached: int

    @classmethod
    def of(cls, prompts: list[str]) -> Figures:
        return cls(len(prompts), *costs(prompts))


@dataclass(frozen=True)
class Row:
    """One workflow measured both ways (``bare``: the prompt-run without the subagents it launches)."""

    workflow: Workflow
    steps: int
    subagents: int
    ours: Figures
    theirs: Figures
    bare: Figures | None
    #: Characters of the visited step files' own text (their control prose left out), each counted once.
    step_text: int

    def floor(self, theirs: Figures) -> float:
        """The step files' own text written to the cache once, against ``theirs``: no runtime that sends each step's
        instructions can cost less (the protocol, the standing text and the subagents come on top)."""
        return self.step_text * CACHE_WRITE / theirs.weighted


def measure(workflow: Workflow, *, per_request: bool = False) -> Row:
    """Run one workflow both ways in a fresh project of its own."""
    from stepline.formats._prose import lean_step_text

    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "shop"
        install(workflow.release, project)
        requests, steps, written = run_stepline(project.resolve(), workflow.path)
        ours = [_text(request) for request in requests] + subagent_reads(requests, project.resolve())
        first = requests[0]
        # the protocol's own paragraph only: not stepline's guide to its request layout, nor the run's standing part
        # (workflow.md / the config, which the prompt-run reads)
        system = "".join(m["content"] for m in first["messages"] if m["role"] == "system").split("\n\n")[0]
        tools = json.dumps(first.get("tools") or [], sort_keys=True)
        files = [project / entry for entry in workflow.entries() if (project / entry).is_file()]
        launched = subagents_of(requests)
        theirs = prompt_run(files, system, tools, steps, list(written.values()), launched, project.resolve())
        bare = prompt_run(files, system, tools, steps, list(written.values())) if launched else None
        step_text = sum(len(lean_step_text(step.read_text(encoding="utf-8")).text) for step in dict.fromkeys(steps))
    if per_request:
        print(f"\n{workflow.name} ({workflow.release}): each stepline request")
        list_requests(requests, ours)
    return Row(workflow, len(steps), sum(len(s.instructions) for s in launched.values()), Figures.of(ours),
               Figures.of(theirs), None if bare is None else Figures.of(bare), step_text)


def print_table(rows: list[Row]) -> None:
    """One line per workflow: stepline's figures, the prompt-run's, the ratios and the floor; then the range over
    the skills."""
    print(f"\n{'':53}{'stepline':>24}{'as prompts (simulated)':>31}{'stepline / prompts':>28}")
    print(f"{'workflow':26}{'release':>16}{'steps':>6}{'subs':>5}{'reqs':>5}{'uncached':>10}{'weighted':>10}"
          f"{'cached':>7}{'reqs':>5}{'uncached':>10}{'weighted':>10}{'cached':>7}{'uncached':>10}{'weighted':>10}"
          f"{'floor':>8}")

    def line(label: str, release: str, steps: str, subs: str, ours: Figures, theirs: Figures, floor: float) -> None:
        print(f"{label:26}{release:>16}{steps:>6}{subs:>5}{ours.requests:>5}{ours.uncached:>10,}{ours.weighted:>10,}"
              f"{ours.cached / ours.uncached:>7.0%}{theirs.requests:>5}{theirs.uncached:>10,}{theirs.weighted:>10,}"
              f"{theirs.cached / theirs.uncached:>7.0%}{ours.uncached / theirs.uncached:>9.2f}x"
              f"{ours.weighted / theirs.weighted:>9.2f}x{floor:>7.2f}x")

    for row in rows:
        line(row.workflow.name, row.workflow.release, str(row.steps), str(row.subagents), row.ours, row.theirs,
             row.floor(row.theirs))
        if row.bare is not None:
            line("  prompts w/o subagents", "", "", "", row.ours, row.bare, row.floor(row.bare))
    print("floor: the visited step files' own text (control prose left out) sent once, at the cache-write price,\n"
          "       against the prompt-run: sending each step's instructions costs at least that much")
    skills = [row for row in rows if row.workflow.release == SKILLS_RELEASE]
    if skills:
        weighted = [row.ours.weighted / row.theirs.weighted for row in skills]
        print(f"{len(skills)} step-file skills of {SKILLS_RELEASE}: cache-weighted ratio "
              f"{min(weighted):.2f}x-{max(weighted):.2f}x (target: at most {TARGET:.2f}x each)")


def left_out_across_the_corpus() -> None:
    """Every section heading lean_step_text leaves out of the corpus's step files, with how often."""
    from collections import Counter

    from stepline.formats._prose import lean_step_text

    headings: Counter[str] = Counter()
    files = lines = 0
    for path in sorted(CORPUS.rglob("step-*.md")):
        lean = lean_step_text(path.read_text(encoding="utf-8", errors="replace"))
        files += 1
        lines += lean.lines
        headings.update(heading.strip() for heading in lean.sections)
    print(f"\nleft out of {files} corpus step files: {sum(headings.values())} sections, {lines} single lines")
    for heading, count in sorted(headings.items(), key=lambda item: (-item[1], item[0])):
        print(f"  {count:4}  {heading}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", action="store_true", help="list each stepline request")
    args = parser.parse_args()
    print_table([measure(workflow, per_request=args.requests) for workflow in workflows()])
    left_out_across_the_corpus()


if __name__ == "__main__":
    main()
