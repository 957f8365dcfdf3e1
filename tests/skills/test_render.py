"""Rendering a skill's text: ``{{.var}}``, ``{{config.…}}``, ``{workflow.…}``, snapshot links and plain names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from stepline.skills import RenderEnv, load_central_config, render_skill_text, resolve_customization
from stepline.skills._render import unknown_tokens


def _env(project: Path, skill: Path, **names: str) -> RenderEnv:
    central, _ = load_central_config(project, "mini")
    return RenderEnv(project_root=project, skill_root=skill, central=central,
                     customization=resolve_customization(skill, project).values, names=dict(names))


def test_short_config_tokens(mini: Path) -> None:
    """{{.key}} is the one config value of that name, wherever it sits; {project-root} in it is resolved."""
    skill = mini / "_bmad" / "mini" / "tiny-build"
    text = "Speak {{.communication_language}}; write to {{.work_folder}}; {{config.modules.mini.user_name}}."
    assert render_skill_text(text, _env(mini, skill), "mini") == (
        f"Speak English; write to {mini}/out/work; Tester.")


def test_a_short_token_found_twice_takes_the_skills_module(tmp_path: Path) -> None:
    """When two modules define the key, the skill's own module's value is used."""
    env = RenderEnv(project_root=tmp_path, skill_root=tmp_path,
                    central={"modules": {"a": {"out": "A"}, "b": {"out": "B"}}})
    assert render_skill_text("{{.out}}", env, "b") == "B"


def test_customization_values_are_formatted_as_bmad_does(mini: Path) -> None:
    """Strings as written, an empty list as _None._, a list as Markdown items, review-layer tables as sections
    with {skill-root} resolved inside them."""
    skill = mini / "_bmad" / "mini" / "tiny-build"
    env = _env(mini, skill)
    assert render_skill_text("{workflow.greeting}", env) == "Hello from the defaults"
    assert render_skill_text("{workflow.activation_steps_prepend}", env) == "_None._"
    assert render_skill_text("{workflow.persistent_facts}", env, plain=False) == (
        "- file:{project-root}/**/house-rules.md\n- Prefer small diffs.")
    assert render_skill_text("{workflow.checks}", env) == (
        f"#### Linter (`lint`)\n\nRun the linter on {skill}/references/guide.md.\n\n"
        "#### Tests (`tests`)\n\nRun the tests.")


def test_snapshot_links_and_plain_names(mini: Path) -> None:
    """[[bmad-snapshot:x.md]] is the skill's file; {project-root}, {skill-root}, {skill-name} and run variables."""
    skill = mini / "_bmad" / "mini" / "tiny-build"
    env = _env(mini, skill, spec_file="out/spec.md")
    text = "`[[bmad-snapshot:step-02-plan.md]]` {project-root} {skill-root} {skill-name} {spec_file} {unknown}"
    assert render_skill_text(text, env) == (
        f"`{skill}/step-02-plan.md` {mini} {skill} tiny-build out/spec.md {{unknown}}")


def test_unknown_tokens_are_left_and_reported(mini: Path) -> None:
    """A field customize.toml lacks, or a config key nobody defines, stays as written and is reported with its line."""
    skill = mini / "_bmad" / "mini" / "tiny-build"
    env = _env(mini, skill)
    text = "ok {workflow.greeting}\n{workflow.nope} and {{.missing}}\n"
    assert "{workflow.nope}" in render_skill_text(text, env)
    assert [(line, token) for line, token, _ in unknown_tokens(text, env, "mini")] == [
        (2, "{{.missing}}"), (2, "{workflow.nope}")]


@pytest.mark.corpus
def test_same_text_as_bmads_render_skill(v611: Path) -> None:
    """Every Markdown file of bmad-build and bmad-build-auto renders exactly as render_skill.py publishes it."""
    script = v611 / "_bmad" / "scripts" / "render_skill.py"
    for name in ("bmad-build", "bmad-build-auto"):
        skill = v611 / "_bmad" / "bmm" / "ship" / name
        printed = subprocess.run([sys.executable, str(script), "--project-root", str(v611), "--skill", str(skill)],
                                 capture_output=True, text=True, check=True).stdout
        published = Path(printed.strip().removeprefix("read and follow ")).parent
        central, _ = load_central_config(v611, "bmm")
        env = RenderEnv(project_root=v611, skill_root=published, central=central,
                        customization=resolve_customization(skill, v611).values)
        sources = sorted(p for p in skill.rglob("*.md") if p.name != "SKILL.md")
        assert len(sources) >= 5
        for source in sources:
            rel = source.relative_to(skill)
            ours = render_skill_text(source.read_text(encoding="utf-8"), env, "bmm", plain=False)
            assert ours == (published / rel).read_text(encoding="utf-8"), rel


def test_a_double_braced_name_renders_its_value_not_the_value_in_braces(tmp_path: Path) -> None:
    """Issue 25: ``{{user_name}}`` (a step file's runtime variable) is ``Ada``, not ``{Ada}``; an unknown one
    (``{{fr_list}}``, a template placeholder the model fills) stays as written."""
    env = RenderEnv(project_root=tmp_path, skill_root=tmp_path, names={"user_name": "Ada", "date": "2026-11-27"})
    text = "Hello {{user_name}} ({user_name}), {{ date }}: fill {{fr_list}} and {unknown}."
    assert render_skill_text(text, env) == "Hello Ada (Ada), 2026-11-27: fill {{fr_list}} and {unknown}."
