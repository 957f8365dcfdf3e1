"""Hostile files over every reader and the CCW/skill paths (issue 28): YAML aliases (a value without end, a
billion laughs, alias chains), deep nesting (YAML, TOML, JSON), huge files and symlinks out of the project, each
put into a real workflow of every family and read by every entry point (`load_workflow`, `lint_path`,
`validate`, `run --executor dry-run --yolo`, `ccw check`, `ccw execute`).

Each case must end within its time bound, as a return or one line (a SteplineError; the CLI: a documented exit
code, at most one `error:` line, no traceback), and nothing of a file outside the project may reach a run's
journal. The cases are derandomized (hypothesis draws the same ones every run); STEPLINE_FUZZ_EXAMPLES=200
hunts longer. `python -m pytest tests/hostile/test_fuzz_hostile.py -s` prints tried / held / broke.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from hostile.hostile_support import cli
from stepline.ccw._check import check_ccw_session
from stepline.errors import SteplineError
from stepline.families import lint_path, load_workflow

TESTS = Path(__file__).resolve().parents[1]
FIXTURES = TESTS / "fixtures"
SKILLS = TESTS / "skills" / "fixtures" / "src"
EXIT_CODES = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
SECRET = "OUTSIDE-THE-PROJECT-7f3a"
#: Every case of one file must end within this (the reader's second, the CLI's start and a dry run, on a loaded
#: two-core machine).
BOUND_SECONDS = 20.0
FUZZ = settings(max_examples=int(os.environ.get("STEPLINE_FUZZ_EXAMPLES", "40")), derandomize=True, deadline=None,
                database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
TALLY: Counter[str] = Counter()


# -- payloads: text that replaces or extends a file ---------------------------------------------------------
def _laughs(levels: int) -> str:
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(lines) + f"\nbomb: *l{levels - 1}\n"


YAML_PAYLOADS: dict[str, Callable[[int], str]] = {
    "recursive-alias": lambda n: "loop: &a [*a]\n",
    "recursive-map": lambda n: "loop: &m {self: *m}\n",
    "billion-laughs": lambda n: _laughs(7 + n % 4),
    "alias-chain": lambda n: "c0: &c0 [1]\n" + "".join(f"c{i}: &c{i} [*c{i - 1}]\n" for i in range(1, 300 + n * 40)),
    "deep-flow": lambda n: "deep: " + "[" * (900 + n) + "]" * (900 + n) + "\n",
    "deep-block": lambda n: "deep:\n" + "".join("  " * i + "- \n" for i in range(1, 250 + n)),
    "huge": lambda n: "padding: |\n" + ("  " + "y" * 99 + "\n") * 90_000,
}
TOML_PAYLOADS: dict[str, Callable[[int], str]] = {
    "deep-tables": lambda n: "[" + ".".join(["a"] * (4000 + n)) + "]\nx = 1\n",
    "deep-arrays": lambda n: "deep = " + "[" * (4000 + n) + "]" * (4000 + n) + "\n",
    "deep-inline": lambda n: "deep = " + "{a = " * (3000 + n) + "1" + "}" * (3000 + n) + "\n",
    "huge": lambda n: 'padding = """\n' + ("z" * 99 + "\n") * 90_000 + '"""\n',
}
JSON_PAYLOADS: dict[str, Callable[[int], str]] = {
    "deep-arrays": lambda n: "[" * (100_000 + n) + "]" * (100_000 + n),
    "deep-objects": lambda n: '{"a":' * (50_000 + n) + "1" + "}" * (50_000 + n),
    "huge": lambda n: '{"padding": "' + "j" * 9_000_000 + '"}',
}


def _inject_yaml(original: str, payload: str) -> str:
    return payload + original  # the hostile keys first: a reader meets them before anything it knows


def _inject_frontmatter(original: str, payload: str) -> str:
    if original.startswith("---\n"):
        return "---\n" + payload + original[4:]
    return "---\n" + payload + "---\n" + original


# -- subjects: a workflow laid out in a project, its files, and how to read it -------------------------------
@dataclass(frozen=True)
class Subject:
    name: str
    kind: str  # native, bmad, skill, ccw
    build: Callable[[Path], Path]  # lays out the workflow under the project; returns its path
    files: dict[str, str]  # a file of it (relative to the project) -> its syntax: yaml, frontmatter, toml, json


def _copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, dirs_exist_ok=True) if source.is_dir() else (
        target.parent.mkdir(parents=True, exist_ok=True), shutil.copyfile(source, target))
    return target


_MINI_STEPS = Path("_bmad/demo/workflows/mini/steps")
_SESSION = Path(".workflow/active/WFS-payment-module")


def _skill(project: Path) -> Path:
    from stepline.bmad import install_bmad

    install_bmad(SKILLS, project, {})
    return project / "_bmad" / "mini" / "tiny-build"


SUBJECTS = [
    Subject("native", "native", lambda p: _copy(TESTS.parent / "examples" / "release-notes" / "workflow.yaml",
                                                p / "flow.yaml"), {"flow.yaml": "yaml"}),
    Subject("bmad-legacy", "bmad", lambda p: _copy(FIXTURES / "bmad_run" / "flow", p / "wf") / "workflow.yaml",
            {"wf/workflow.yaml": "yaml"}),
    Subject("bmad-microfile", "bmad",
            lambda p: _copy(FIXTURES / "microfile" / "project", p) / "_bmad/demo/workflows/mini/workflow.md",
            {str(_MINI_STEPS / "step-01-init.md"): "frontmatter", str(_MINI_STEPS / "step-02-draft.md"): "frontmatter",
             "_bmad/demo/config.yaml": "yaml"}),
    Subject("skill", "skill", _skill,
            {"_bmad/mini/tiny-build/step-02-plan.md": "frontmatter", "_bmad/mini/tiny-build/customize.toml": "toml",
             "_bmad/mini/tiny-build/workflow.md": "frontmatter"}),
    Subject("ccw", "ccw", lambda p: _copy(FIXTURES / "ccw" / "project-active", p) / _SESSION,
            {str(_SESSION / ".task" / "IMPL-2.json"): "json", str(_SESSION / "workflow-session.json"): "json"}),
    Subject("runtime-config", "native", lambda p: (_copy(FIXTURES.parent.parent / "examples" / "runtime.yaml",
                                                         p / "config" / "runtime.yaml"),
                                                   _copy(TESTS.parent / "examples" / "release-notes" /
                                                         "workflow.yaml", p / "flow.yaml"))[1],
            {"config/runtime.yaml": "yaml"}),
]


def _payloads(syntax: str) -> dict[str, Callable[[int], str]]:
    return {"yaml": YAML_PAYLOADS, "frontmatter": YAML_PAYLOADS, "toml": TOML_PAYLOADS, "json": JSON_PAYLOADS}[syntax]


# -- reading it everywhere -----------------------------------------------------------------------------------
def _api(call: Callable[[], object]) -> None:
    try:
        call()
    except SteplineError as exc:
        assert "\n" not in exc.format_message() and "Traceback" not in exc.format_message()


def _cli(*argv: str) -> None:
    outcome = cli(*argv)
    assert outcome.code in EXIT_CODES, outcome
    assert len(outcome.errors) <= 1, outcome


def read_everywhere(project: Path, target: Path, kind: str) -> None:
    _api(lambda: load_workflow(target, project_root=project))
    _api(lambda: lint_path(target, project_root=project))
    _cli("validate", str(target), "-C", str(project))
    if kind == "ccw":
        _api(lambda: check_ccw_session(target))
        _cli("ccw", "check", str(target), "-C", str(project))
        _cli("ccw", "execute", "--executor", "dry-run", "-y", "-q", "-C", str(project))
    else:
        _cli("run", str(target), "--executor", "dry-run", "--yolo", "-q", "-C", str(project))
    for journal in (project / ".stepline" / "runs").glob("run-*/journal.jsonl"):
        assert SECRET not in journal.read_text(encoding="utf-8", errors="replace"), journal


@pytest.fixture(scope="module", autouse=True)
def _tally() -> Iterator[None]:
    """Print what was tried, what held and what broke (for the issue's closing note)."""
    yield
    print("\nhostile cases: " + ", ".join(f"{key} {TALLY[key]}" for key in ("tried", "held", "broke")) + " — "
          + ", ".join(f"{k.split(':', 1)[1]} {v}" for k, v in sorted(TALLY.items()) if k.startswith("case:")))


def _case(label: str, project: Path, target: Path, kind: str) -> None:
    TALLY["tried"] += 1
    TALLY[f"case:{label}"] += 1
    started = time.monotonic()
    try:
        read_everywhere(project, target, kind)
        assert time.monotonic() - started < BOUND_SECONDS, f"{label}: {time.monotonic() - started:.1f}s"
    except BaseException:
        TALLY["broke"] += 1
        raise
    TALLY["held"] += 1


@FUZZ
@given(data=st.data())
def test_hostile_content_in_every_reader_ends_in_one_line(data: st.DataObject) -> None:
    subject = data.draw(st.sampled_from(SUBJECTS), label="subject")
    file, syntax = data.draw(st.sampled_from(sorted(subject.files.items())), label="file")
    name = data.draw(st.sampled_from(sorted(_payloads(syntax))), label="payload")
    n = data.draw(st.integers(0, 40), label="n")
    event(f"{subject.name}: {name}")
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "project"
        project.mkdir()
        target = subject.build(project)
        path = project / file
        original = path.read_text(encoding="utf-8")
        payload = _payloads(syntax)[name](n)
        if syntax == "yaml":
            path.write_text(_inject_yaml(original, payload), encoding="utf-8")
        elif syntax == "frontmatter":
            path.write_text(_inject_frontmatter(original, payload), encoding="utf-8")
        elif syntax == "toml":
            path.write_text(payload + "\n" + original, encoding="utf-8")
        else:
            path.write_text(payload, encoding="utf-8")
        _case(name, project, target, subject.kind)


@pytest.mark.parametrize(("subject", "file"), [(s, f) for s in SUBJECTS for f in sorted(s.files)],
                         ids=[f"{s.name}:{Path(f).name}" for s in SUBJECTS for f in sorted(s.files)])
def test_a_file_symlinked_out_of_the_project_leaks_nothing(tmp_path: Path, subject: Subject, file: str) -> None:
    """Each file of each workflow replaced by a symlink to a copy outside the project that carries a secret."""
    project = tmp_path / "project"
    project.mkdir()
    target = subject.build(project)
    path = project / file
    outside = tmp_path / "outside" / path.name
    outside.parent.mkdir()
    text = path.read_text(encoding="utf-8")
    marker = {"yaml": f"# {SECRET}\n", "toml": f"# {SECRET}\n", "json": ""}.get(subject.files[file], f"{SECRET}\n")
    if subject.files[file] == "json":
        text = text.rstrip().rstrip("}") + f', "note": "{SECRET}"}}\n'
    outside.write_text(marker + text if subject.files[file] != "frontmatter" else text + "\n" + marker,
                       encoding="utf-8")
    path.unlink()
    path.symlink_to(outside)
    _case("symlink-out", project, target, subject.kind)
