"""Readers bound what they accept (issue 28 item 4): YAML aliases (a value without end, a billion laughs),
nesting (YAML, TOML), file size. Exceeding a limit is one line naming the file and the limit, exit 4, within a
second; the limits are set in the environment."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest

from hostile.hostile_support import cli
from stepline.errors import ConfigError, ReaderError
from stepline.formats._data import load_toml
from stepline.formats._frontmatter import read_frontmatter
from stepline.native import load_native

RECURSIVE = "description: &a [*a]\n"


def laughs(levels: int = 9) -> str:
    """A billion laughs: ``levels`` anchors each repeating the one before nine times (9**9 values)."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(lines) + f"\nbomb: *l{levels - 1}\n"


def native(project: Path, step_extra: str = "", top: str = "") -> Path:
    path = project / "flow.yaml"
    path.write_text(f"id: flow\n{top}steps:\n  - id: one\n    name: One\n{step_extra}", encoding="utf-8")
    return path


def _run_refused(project: Path, path: Path, *needles: str) -> str:
    started = time.monotonic()
    outcome = cli("run", str(path), "--executor", "dry-run", "--yolo", "-q", "-C", str(project))
    assert time.monotonic() - started < 2.0  # a second for the reader; the CLI's own start on a loaded machine
    assert outcome.code == 4, outcome
    assert len(outcome.errors) == 1 and outcome.err.count("\n") == 1, outcome
    for needle in needles:
        assert needle in outcome.err, outcome
    return outcome.err


def test_a_recursive_alias_in_a_native_workflow_is_one_line_exit_4(project: Path) -> None:
    path = native(project, "    " + RECURSIVE)
    err = _run_refused(project, path, f"{path}:5:", "value without end")
    assert "RecursionError" not in err


def test_a_billion_laughs_workflow_is_refused_within_a_second_in_bounded_memory(project: Path) -> None:
    path = native(project, "    meta: *l8\n", top=laughs().replace("bomb: *l8\n", ""))
    tracemalloc.start()
    started = time.monotonic()
    with pytest.raises(ReaderError, match="STEPLINE_MAX_YAML_VALUES") as caught:
        load_native(path)
    elapsed = time.monotonic() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert elapsed < 1.0 and peak < 50_000_000, (elapsed, peak)
    assert str(path) in str(caught.value)
    _run_refused(project, path, "STEPLINE_MAX_YAML_VALUES")
    outcome = cli("validate", str(path), "-C", str(project))
    assert outcome.code == 10 and "STEPLINE_MAX_YAML_VALUES" in outcome.out + outcome.err


def test_aliases_chained_deeper_than_the_depth_limit_are_refused(project: Path) -> None:
    """Each line is flat, but ``cN: [*cN-1]`` nests one level more: 5,000 levels broke every later walk."""
    chain = "c0: &c0 [1]\n" + "".join(f"c{i}: &c{i} [*c{i - 1}]\n" for i in range(1, 5000))
    path = native(project, top=chain)
    _run_refused(project, path, "STEPLINE_MAX_DEPTH")


def test_the_limits_are_set_in_the_environment(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = native(project, "    meta: {a: {b: {c: 1}}}\n")
    assert load_native(path).steps[0].meta == {"a": {"b": {"c": 1}}}
    monkeypatch.setenv("STEPLINE_MAX_DEPTH", "4")
    with pytest.raises(ReaderError, match="deeper than 4 levels"):
        load_native(path)
    monkeypatch.setenv("STEPLINE_MAX_DEPTH", "many")
    with pytest.raises(ConfigError, match="STEPLINE_MAX_DEPTH"):
        load_native(path)
    monkeypatch.delenv("STEPLINE_MAX_DEPTH")
    monkeypatch.setenv("STEPLINE_MAX_FILE_BYTES", "50")
    _run_refused(project, path, str(path), "over the reader's limit of 50 bytes", "STEPLINE_MAX_FILE_BYTES")


def test_a_10_mb_native_workflow_is_refused_by_size_before_it_is_read(project: Path) -> None:
    path = native(project, "    description: |\n" + ("      " + "x" * 100 + "\n") * 100_000)
    _run_refused(project, path, "over the reader's limit", "STEPLINE_MAX_FILE_BYTES")


@pytest.mark.parametrize("payload", [RECURSIVE, laughs()], ids=["recursive-alias", "billion-laughs"])
def test_hostile_step_frontmatter_is_one_line_naming_the_step_file(payload: str) -> None:
    text = "---\nname: x\n" + payload + "---\n# Step\n"
    started = time.monotonic()
    with pytest.raises(ReaderError) as caught:
        read_frontmatter(text, path="step-01.md")
    assert time.monotonic() - started < 1.0
    assert str(caught.value).startswith("step-01.md:") and "\n" not in str(caught.value)


@pytest.mark.parametrize("payload", [RECURSIVE, laughs()], ids=["recursive-alias", "billion-laughs"])
def test_a_skill_step_with_hostile_frontmatter_is_refused_before_it_runs(mini: Path, payload: str) -> None:
    step = mini / "_bmad" / "mini" / "tiny-build" / "step-02-plan.md"
    step.write_text("---\nname: plan\n" + payload + "---\n" + step.read_text(encoding="utf-8"), encoding="utf-8")
    _run_refused(mini, mini / "_bmad" / "mini" / "tiny-build", str(step))


def test_a_10_mb_skill_step_file_is_refused_by_size(mini: Path) -> None:
    step = mini / "_bmad" / "mini" / "tiny-build" / "step-02-plan.md"
    step.write_text(step.read_text(encoding="utf-8") + ("Plan the work carefully. " * 4 + "\n") * 100_000,
                    encoding="utf-8")
    _run_refused(mini, mini / "_bmad" / "mini" / "tiny-build", str(step), "STEPLINE_MAX_FILE_BYTES")


@pytest.mark.parametrize("payload", ["[" + ".".join(["a"] * 5000) + "]\nx = 1\n",
                                     "x = " + "[" * 5000 + "]" * 5000 + "\n",
                                     "x = " + "{a = " * 5000 + "1" + "}" * 5000 + "\n"],
                         ids=["tables", "arrays", "inline-tables"])
def test_5000_deep_toml_is_refused_with_the_depth_limit(mini: Path, payload: str) -> None:
    toml = mini / "_bmad" / "mini" / "tiny-build" / "customize.toml"
    toml.write_text(toml.read_text(encoding="utf-8") + "\n" + payload, encoding="utf-8")
    with pytest.raises(ReaderError, match="STEPLINE_MAX_DEPTH"):
        load_toml(toml)
    _run_refused(mini, mini / "_bmad" / "mini" / "tiny-build", str(toml), "STEPLINE_MAX_DEPTH")
