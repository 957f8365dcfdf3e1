"""What a workflow costs in prompt text: stepline's requests against the same workflow run as prompts.

Usage: ``python bench/prompt_economy.py [--requests]``. Workflows: v6.0.0-alpha.23's ``create-product-brief``, then
every step-file skill of v6.11.0 as ``stepline validate`` counts them, each installed into a project of its own.

**stepline**: the workflow run in ``--yolo`` with the ``anthropic`` executor against the tests' scripted Anthropic
server, and with the ``openai`` executor against the scripted OpenAI one (fake model: ``tests/fakes/policy.py``);
each request counted as the SDK sent it. A subagent whose instruction names files is counted again reading them.
**as prompts**: an IDE agent given the workflow in one growing conversation: its fixed part, the entry files and
the config read in (a request each), then per visited step file a request that reads it and one that writes the
step's output; every request resends the conversation, its last block a cache breakpoint. Subagents: a request
launching them, and per subagent a fresh conversation (same fixed part, its instruction, the files it names). Left
out, in its favour: the checkpoints it would halt at. Two fixed parts, two baselines, both printed:
- **conservative**: stepline's tools and the first paragraph of its protocol text (a breakpoint after it);
- **in Claude Code**: the request of the pinned ``claude`` CLI, captured (sizes and breakpoints only) in
  ``bench/claude_code_request.json`` by ``bench/claude_code_request.py``: BMAD workflows are run as prompts so.
The 0.33x target is read against **in Claude Code** under Anthropic's billing: that is what running the workflow
as prompts costs its users; the conservative ratios stay beside it.

Billing, in characters (a token is about 4), as a multiple of the base input price (``Rule``):
- Anthropic (prompt caching guide): the prefix up to a ``cache_control`` breakpoint (tools, system, messages in
  that order) is written at 1.25x, read at 0.1x where an earlier request wrote it (a hit is looked for at block
  boundaries up to 20 blocks before a breakpoint); what follows the last breakpoint is billed at 1.0x.
- OpenAI (automatic prompt caching): the longest prefix shared with an earlier request is read at the model's
  cached price, 0.1x for the gpt-5 family, in steps of 128 tokens; no write premium (gpt-5.6 and later bill writes).
Both cache only prefixes of at least 1,024 tokens (4,096 characters). Prints one row per workflow, the floor (the
visited step files' own text sent once at the write price, against the baseline), each stepline request with
``--requests``, and the section headings left out of step files across the corpus (to check no judgement guidance
is dropped). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests"))  # the fake servers and fake model the tests use

CORPUS = HERE.parent / "shared" / "corpus" / "bmad"
BRIEF = Path("_bmad/bmm/workflows/1-analysis/create-product-brief/workflow.md")
CLAUDE_CODE = HERE / "bench" / "claude_code_request.json"
#: The release whose step-file skills are all measured, and the cache-weighted ratio each should reach.
SKILLS_RELEASE, TARGET = "v6.11.0", 0.33
#: The smallest prefix a provider caches, and OpenAI's cache steps (1,024 and 128 tokens, 4 characters a token).
CACHE_MIN_CHARS, CACHE_STEP_CHARS = 4096, 512
#: How many block boundaries before a breakpoint Anthropic looks back for an earlier cache entry.
LOOKBACK_BLOCKS = 20

#: One block of a request as the provider sees it (tools, system blocks, message blocks), and whether a cache
#: breakpoint (``cache_control``) ends it.
Block = tuple[str, bool]


@dataclass(frozen=True)
class Rule:
    """How a provider bills a request's input, as multiples of its base input price."""

    name: str
    read: float
    write: float


ANTHROPIC = Rule("anthropic", read=0.1, write=1.25)
OPENAI = Rule("openai", read=0.1, write=1.0)


# -- what a request is, block by block --------------------------------------------------------------------------
def _text(request: dict[str, Any]) -> str:
    """An OpenAI request's prompt as the bytes the provider sees: tools first (they precede the messages)."""
    return "".join(text for text, _ in openai_blocks(request))


def openai_blocks(request: dict[str, Any]) -> list[Block]:
    """An OpenAI request: its tools, then each message (OpenAI caches whatever prefix repeats; no breakpoints)."""
    return [(json.dumps(request.get("tools") or [], sort_keys=True), False),
            *((json.dumps(message, sort_keys=True), False) for message in request["messages"])]


def anthropic_blocks(request: dict[str, Any]) -> list[Block]:
    """An Anthropic request: each tool, each system block, each block of each message (a message's string content
    is one text block; a message's role goes with its first block), each marked where ``cache_control`` ends it."""
    def block(raw: dict[str, Any], head: str = "") -> Block:
        return head + json.dumps({k: v for k, v in raw.items() if k != "cache_control"}, sort_keys=True), \
            "cache_control" in raw

    system = request.get("system") or []
    blocks = [block(tool) for tool in request.get("tools") or []]
    blocks += [block(b) for b in ([{"type": "text", "text": system}] if isinstance(system, str) else system)]
    for message in request["messages"]:
        content = message["content"]
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        blocks += [block(part, f"[{message['role']}]" if at == 0 else "") for at, part in enumerate(parts)]
    return blocks


# -- what a provider bills ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Figures:
    """One side's requests and characters: sent, cache-weighted (billed), and read from the cache."""

    requests: int
    uncached: int
    weighted: int
    cached: int


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
    """The characters of request ``index`` OpenAI serves from its cache: the longest prefix it shares with an
    earlier request, in whole cache steps, and nothing below the smallest cacheable prefix."""
    shared = max((_shared(prompts[index], earlier) for earlier in prompts[:index]), default=0)
    return 0 if shared < CACHE_MIN_CHARS else shared - shared % CACHE_STEP_CHARS


def openai_figures(prompts: list[list[Block]], rule: Rule = OPENAI) -> Figures:
    """OpenAI's automatic caching: each request's prefix shared with an earlier one read, the rest at the base."""
    texts = ["".join(text for text, _ in blocks) for blocks in prompts]
    weighted = cached = 0.0
    for index, text in enumerate(texts):
        prefix = cached_prefix(texts, index)
        cached += prefix
        weighted += prefix * rule.read + (len(text) - prefix) * rule.write
    return Figures(len(texts), sum(map(len, texts)), round(weighted), round(cached))


def anthropic_cost(blocks: list[Block], written: set[str], rule: Rule = ANTHROPIC) -> tuple[float, int, int]:
    """One request under Anthropic's caching, given the prefixes earlier requests wrote (``written``, updated):
    its billed characters, those read from the cache, and those written to it."""
    digest, keys, ends, end = hashlib.sha256(), [], [], 0
    for text, _ in blocks:
        digest.update(text.encode("utf-8"))
        keys.append(digest.hexdigest())
        end += len(text)
        ends.append(end)
    marks = [at for at, (_, marked) in enumerate(blocks) if marked]
    if not marks or ends[marks[-1]] < CACHE_MIN_CHARS:
        return float(end), 0, 0
    boundaries = {at for mark in marks for at in range(max(0, mark - LOOKBACK_BLOCKS), mark + 1)}
    hit = max((at for at in boundaries if keys[at] in written), default=None)
    read = 0 if hit is None else ends[hit]
    cacheable = ends[marks[-1]]
    written.update(keys[mark] for mark in marks if ends[mark] >= CACHE_MIN_CHARS)
    return read * rule.read + (cacheable - read) * rule.write + (end - cacheable), read, cacheable - read


def anthropic_figures(prompts: list[list[Block]]) -> Figures:
    """Anthropic's caching over a run's requests, in order (see :func:`anthropic_cost`)."""
    written: set[str] = set()
    weighted = cached = 0.0
    for blocks in prompts:
        billed, read, _ = anthropic_cost(blocks, written)
        weighted += billed
        cached += read
    return Figures(len(prompts), sum(len(t) for blocks in prompts for t, _ in blocks), round(weighted), round(cached))


# -- stepline's run ----------------------------------------------------------------------------------------------
@dataclass
class Run:
    """A stepline run as the server saw it: the requests, the step files visited in order, the text each step
    wrote."""

    requests: list[dict[str, Any]]
    steps: list[Path]
    written: list[str]


def run_stepline(project: Path, workflow: Path, provider: str = "openai") -> Run:
    """Run ``workflow`` with ``provider``'s executor against its fake server."""
    from fakes import fake_anthropic, fake_openai
    from fakes.policy import Policy
    from stepline import Engine
    from stepline.families import load_workflow

    fake = fake_openai if provider == "openai" else fake_anthropic
    server_class = fake_openai.FakeOpenAI if provider == "openai" else fake_anthropic.FakeAnthropic
    with server_class().running() as server:
        server.responder = fake.responder(Policy())
        engine = Engine(project_root=project, executor=provider, mode="yolo",
                        executor_options={"base_url": server.base_url, "api_key": "bench", "model": "fake"})
        run = asyncio.run(engine.start(load_workflow(project / workflow, project_root=project)))
        requests = list(server.requests)
    if run.status.value != "completed":
        raise SystemExit(f"the stepline run did not complete: {run.error}")
    steps = [Path(spec.source.path) for spec in run.workflow.steps  # the step files the run completed, in order
             if spec.source is not None and Path(spec.source.path).name.startswith("step-")
             and spec.id in run.steps and run.steps[spec.id].status.value == "completed"]
    written = [str(args.get("content", "")) for args in _calls(requests, "write_output")]
    return Run(requests, steps, written)


def _calls(requests: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The arguments of every call to ``name`` the model made, in either wire format."""
    found = []
    for request in requests:
        for message in request["messages"]:
            for call in message.get("tool_calls") or ():
                if call["function"]["name"] == name:
                    found.append(json.loads(call["function"]["arguments"]))
            content = message.get("content")
            for block in content if isinstance(content, list) else ():
                if block.get("type") == "tool_use" and block.get("name") == name:
                    found.append(dict(block["input"]))
    return found


def _user(request: dict[str, Any]) -> str:
    """A request's first user message, as text (either wire format)."""
    content = next(m["content"] for m in request["messages"] if m["role"] == "user")
    return content if isinstance(content, str) else "".join(b.get("text", "") for b in content)


class Subagents:
    """The subagents a step of the stepline run launched: the instruction each was given, and what came back."""

    def __init__(self, instructions: list[str], results: str) -> None:
        self.instructions = instructions
        self.results = results


def subagents_of(requests: list[dict[str, Any]]) -> dict[str, Subagents]:
    """By step id: the subagents stepline's run launched (``subagent: <name>`` requests, each counted once) and the
    results its continuation request carried back to the step."""
    from fakes.policy import read_request
    from stepline.skills._subagents import FILES_HEADING

    instructions: dict[str, dict[str, str]] = {}
    results: dict[str, str] = {}
    for request in requests:
        parsed = read_request(_user(request))
        text = parsed.parts.get("Step instructions", "")
        if parsed.title.startswith("subagent: "):  # its instruction (the prompt-run's subagent reads the files)
            given = text.partition(f"\n{FILES_HEADING}\n")[0].rstrip("\n")
            instructions.setdefault(parsed.step_id, {})[parsed.title] = given
        elif "\n## After the subagents\n" in text:
            results[parsed.step_id] = text.split("\n## After the subagents\n", 1)[1]
    return {step: Subagents(list(given.values()), results.get(step, "")) for step, given in instructions.items()}


def subagent_reads(requests: list[dict[str, Any]], project: Path) -> list[dict[str, Any]]:
    """The requests a subagent of stepline's run makes after its first when it reads the files its instruction names
    (the fake model reads none): its first request with what it read appended, as the prompt-run's subagents read
    them."""
    from fakes.policy import read_request
    from stepline.skills._subagents import FILES_HEADING

    follow_ups = []
    for request in requests:
        parsed = read_request(_user(request))
        if not parsed.title.startswith("subagent: "):
            continue
        instruction, _, given = parsed.parts.get("Step instructions", "").partition(f"\n{FILES_HEADING}\n")
        files = [path for path in named_files(project, instruction)  # those stepline sent with it are not read again
                 if path.read_text(encoding="utf-8").strip() not in given]
        if files:
            read = "".join(f"[read {path.name}]\n{path.read_text(encoding='utf-8')}" for path in files)
            follow_ups.append({**request, "messages": [*request["messages"], {"role": "user", "content": read}]})
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


# -- the prompt-run ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Head:
    """An IDE agent's fixed part: the blocks before the person's first message, and those right after it."""

    before: tuple[Block, ...]
    after: tuple[Block, ...] = ()


def conservative_head(tools: str, system: str) -> Head:
    """stepline's tools and the first paragraph of its protocol text, a breakpoint after them."""
    return Head(((tools, False), (system, True)))


def claude_code_head(path: Path = CLAUDE_CODE) -> Head:
    """The captured fixed part of Claude Code's request: each block as long as captured (its text is not kept:
    placeholder characters stand for it), the breakpoints where it puts them."""
    captured = json.loads(path.read_text(encoding="utf-8"))

    def blocks(part: str) -> tuple[Block, ...]:
        return tuple((f"<{part} {at}>".ljust(block["chars"], "."), bool(block["breakpoint"]))
                     for at, block in enumerate(captured["blocks"][part]))

    return Head(blocks("tools") + blocks("system") + blocks("before_prompt"), blocks("after_prompt"))


def prompt_run(entries: list[Path], head: Head, steps: list[Path], sections: list[str],
               subagents: dict[str, Subagents] | None = None, project: Path | None = None) -> list[list[Block]]:
    """The simulated prompt-run: one growing conversation after ``head``, one block list per request, the last
    block the moving breakpoint (see the module docstring); ``subagents``, by step: the fresh conversations a step
    launches, simulated as the skill asks."""
    prompts: list[list[Block]] = []

    def request(said: list[str]) -> None:
        blocks = [*head.before, (said[0], False), *head.after, *((text, False) for text in said[1:])]
        blocks[-1] = (blocks[-1][0], True)
        prompts.append(blocks)

    conversation = [f"Run the workflow {entries[0]} step by step."]

    def turn(added: str) -> None:
        request(conversation)
        conversation.append(added)

    for entry in entries:
        turn(f"[read {entry.name}]\n{entry.read_text(encoding='utf-8')}")
    for index, step in enumerate(steps):
        turn(f"[read {step.name}]\n{step.read_text(encoding='utf-8')}")
        launched = (subagents or {}).get(step.stem)
        if launched is not None:
            turn("".join(f"[launch a subagent]\n{given}\n" for given in launched.instructions)
                 + f"[the subagents returned]\n{launched.results}\n")
            for given in launched.instructions:  # each a fresh conversation: the instruction, the files it names
                files = named_files(project, given) if project is not None else []
                if files:
                    request([given])
                    request([given, "".join(f"[read {path.name}]\n{path.read_text(encoding='utf-8')}"
                                            for path in files)])
                else:
                    request([given])
        section = sections[index] if index < len(sections) else ""
        turn(f"[write the section]\n{section}\n[update the frontmatter: stepsCompleted]\n")
    request(conversation)  # the closing turn
    return prompts


# -- the workflows -----------------------------------------------------------------------------------------------
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


# -- measuring and printing --------------------------------------------------------------------------------------
def _title(request: dict[str, Any]) -> str:
    """What a stepline request was for: its ``# Step`` / ``## Request`` lines, as the prompt names them."""
    found = [line.lstrip("# ").strip() for line in _user(request).splitlines()
             if line.startswith(("# Step", "## Request"))]
    return " / ".join(found)[:80]


def list_requests(requests: list[dict[str, Any]], prompts: list[list[Block]]) -> None:
    """One line per stepline request of the anthropic run: its size, what Anthropic's cache served and what it
    wrote, what followed the last breakpoint, what it was for (the prompts after the requests: the subagents'
    reads, see :func:`subagent_reads`)."""
    print(f"{'#':>4}{'chars':>8}{'read':>8}{'written':>8}{'after':>8}  request")
    titles = [_title(request) for request in requests]
    titles += ["a subagent again, with the files its instruction names read"] * (len(prompts) - len(titles))
    written: set[str] = set()
    for index, (title, blocks) in enumerate(zip(titles, prompts, strict=True)):
        size = sum(len(text) for text, _ in blocks)
        _, read, wrote = anthropic_cost(blocks, written)
        print(f"{index:>4}{size:>8,}{read:>8,}{wrote:>8,}{size - read - wrote:>8,}  {title}")


@dataclass(frozen=True)
class Side:
    """A prompt-run baseline's requests billed under each rule (``bare``: without the subagents it launches)."""

    anthropic: Figures
    openai: Figures
    bare_anthropic: Figures | None = None
    bare_openai: Figures | None = None


@dataclass(frozen=True)
class Row:
    """One workflow measured: stepline's two runs and the two prompt-run baselines."""

    workflow: Workflow
    steps: int
    subagents: int
    anthropic: Figures
    openai: Figures
    conservative: Side
    claude_code: Side
    #: Characters of the visited step files' own text (their control prose left out), each counted once.
    step_text: int

    def floor(self, rule: Rule, baseline: Figures) -> float:
        """The step files' own text written to the cache once, against ``baseline``: no runtime that sends each
        step's instructions can cost less (the protocol, the standing text and the subagents come on top)."""
        return self.step_text * rule.write / baseline.weighted


def _side(files: list[Path], head: Head, run: Run, launched: dict[str, Subagents], project: Path) -> Side:
    full = prompt_run(files, head, run.steps, run.written, launched, project)
    bare = prompt_run(files, head, run.steps, run.written) if launched else None
    return Side(anthropic_figures(full), openai_figures(full),
                None if bare is None else anthropic_figures(bare), None if bare is None else openai_figures(bare))


def measure(workflow: Workflow, *, per_request: bool = False) -> Row:
    """Run one workflow with each executor, each in a fresh project of its own, and simulate its prompt-runs."""
    from stepline.stepchain._lean_text import lean_step_text

    runs: dict[str, Run] = {}
    follow_ups: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for provider in ("anthropic", "openai"):
            project = (Path(tmp) / provider / "shop").resolve()
            install(workflow.release, project)
            runs[provider] = run_stepline(project, workflow.path, provider)
            follow_ups[provider] = subagent_reads(runs[provider].requests, project)
        run = runs["openai"]  # the prompt-runs are simulated from the openai run (the anthropic one is alike)
        first = run.requests[0]
        # the protocol's own paragraph only: not stepline's guide to its request layout, nor the run's standing part
        # (workflow.md / the config, which the prompt-run reads)
        system = "".join(m["content"] for m in first["messages"] if m["role"] == "system").split("\n\n")[0]
        tools = json.dumps(first.get("tools") or [], sort_keys=True)
        files = [project / entry for entry in workflow.entries() if (project / entry).is_file()]
        launched = subagents_of(run.requests)
        conservative = _side(files, conservative_head(tools, system), run, launched, project)
        claude_code = _side(files, claude_code_head(), run, launched, project)
        step_text = sum(len(lean_step_text(step.read_text(encoding="utf-8")).text)
                        for step in dict.fromkeys(run.steps))
    anthropic = [anthropic_blocks(r) for r in runs["anthropic"].requests + follow_ups["anthropic"]]
    if per_request:
        print(f"\n{workflow.name} ({workflow.release}): each stepline request (anthropic executor, in characters)")
        list_requests(runs["anthropic"].requests, anthropic)
    return Row(workflow, len(run.steps), sum(len(s.instructions) for s in launched.values()),
               anthropic_figures(anthropic),
               openai_figures([openai_blocks(r) for r in runs["openai"].requests + follow_ups["openai"]]),
               conservative, claude_code, step_text)


def print_table(rows: list[Row]) -> None:
    """One line per workflow (and per baseline without its subagents): cache-weighted characters of stepline's two
    runs and of the two prompt-runs under each provider's rule, the ratios and the floors; then the ranges."""
    print(f"\ncache-weighted characters (characters x what the provider bills them, base input price = 1); "
          f"skills of {SKILLS_RELEASE} unless named")
    print(f"{'':42}{'stepline':>22}{'as prompts':>22}{'in Claude':>11}{'stepline / in Claude Code':>27}"
          f"{'stepline / conservative':>27}")
    print(f"{'workflow':44}{'steps':>6}{'subs':>5}{'reqs':>5}{'anthropic':>11}{'openai':>11}{'reqs':>5}"
          f"{'anthropic':>11}{'openai':>11}{'Code':>11}{'anthropic':>11}{'floor':>8}{'':>8}"
          f"{'anthropic':>11}{'openai':>8}{'floor':>8}")

    def line(label: str, steps: str, subs: str, row: Row, conservative: Figures, conservative_openai: Figures,
             claude_code: Figures) -> None:
        print(f"{label:44}{steps:>6}{subs:>5}{row.anthropic.requests:>5}{row.anthropic.weighted:>11,}"
              f"{row.openai.weighted:>11,}{conservative.requests:>5}{conservative.weighted:>11,}"
              f"{conservative_openai.weighted:>11,}{claude_code.weighted:>11,}"
              f"{row.anthropic.weighted / claude_code.weighted:>10.2f}x{row.floor(ANTHROPIC, claude_code):>7.2f}x"
              f"{'':>8}{row.anthropic.weighted / conservative.weighted:>10.2f}x"
              f"{row.openai.weighted / conservative_openai.weighted:>7.2f}x{row.floor(ANTHROPIC, conservative):>7.2f}x")

    for row in rows:
        line(row.workflow.name + ("" if row.workflow.release == SKILLS_RELEASE else f" ({row.workflow.release})"),
             str(row.steps),
             str(row.subagents), row, row.conservative.anthropic, row.conservative.openai, row.claude_code.anthropic)
        bare, bare_openai, bare_cc = (row.conservative.bare_anthropic, row.conservative.bare_openai,
                                      row.claude_code.bare_anthropic)
        if bare is not None and bare_openai is not None and bare_cc is not None:
            line("  prompts w/o subagents", "", "", row, bare, bare_openai, bare_cc)
    print("anthropic / openai: billed as each provider bills (stepline run with that executor; the prompt-runs'\n"
          "       requests as they are). floor: the visited step files' own text (control prose left out) sent once\n"
          "       at Anthropic's write price, against that baseline: sending each step's instructions costs that much")
    skills = [row for row in rows if row.workflow.release == SKILLS_RELEASE]
    if skills:
        ratios = {"in Claude Code, anthropic": [r.anthropic.weighted / r.claude_code.anthropic.weighted
                                               for r in skills],
                  "conservative, anthropic": [r.anthropic.weighted / r.conservative.anthropic.weighted for r in skills],
                  "conservative, openai": [r.openai.weighted / r.conservative.openai.weighted for r in skills]}
        for label, found in ratios.items():
            met = sum(r <= TARGET for r in found)
            print(f"{len(skills)} step-file skills of {SKILLS_RELEASE}, stepline / prompts {label}: "
                  f"{min(found):.2f}x-{max(found):.2f}x, {met} of {len(skills)} at most {TARGET:.2f}x"
                  + ("  <- the target's column" if label.startswith("in Claude Code") else ""))


def left_out_across_the_corpus() -> None:
    """Every section heading lean_step_text leaves out of the corpus's step files, with how often."""
    from collections import Counter

    from stepline.stepchain._lean_text import lean_step_text

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
