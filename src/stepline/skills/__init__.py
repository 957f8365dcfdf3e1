"""Agent Skills (BMAD v6.5+): a ``SKILL.md`` folder with ``customize.toml``, step files or sections, scripts.

Readers (``_customize``: customization and central config with BMAD's merge rules; ``_render``: the tokens
``render_skill.py`` resolves; ``_skill``: a skill's files, links and kind; ``_load``: a skill as a
WorkflowSpec; ``_lint``: ``stepline validate``) never import the engine. The driver (``_driver``) runs the
steps and registers with the engine when :func:`stepline.families.register_drivers` imports it. Names below
are imported on first use, so importing this package costs nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stepline._lazy import lazy_exports as _lazy_exports

_EXPORTS = {
    "skill_finder": "._load",
    "run_skill_step": "._driver",
    "Customization": "._customize",
    "RenderEnv": "._render",
    "SKILL_FORMAT": "._load",
    "is_skill": "._skill",
    "lint_skill": "._lint",
    "load_central_config": "._customize",
    "load_skill": "._load",
    "render_skill_text": "._render",
    "resolve_customization": "._customize",
    "skill_frame": "._load",
    "skill_kind": "._lint",
    "skill_md_missing": "._skill",
    "structural_merge": "._customize",
}

__all__ = [
    "SKILL_FORMAT",
    "Customization",
    "RenderEnv",
    "is_skill",
    "lint_skill",
    "load_central_config",
    "load_skill",
    "render_skill_text",
    "resolve_customization",
    "run_skill_step",
    "skill_finder",
    "skill_frame",
    "skill_kind",
    "skill_md_missing",
    "structural_merge",
]

if TYPE_CHECKING:
    from stepline.skills._customize import (
        Customization,
        load_central_config,
        resolve_customization,
        structural_merge,
    )
    from stepline.skills._driver import run_skill_step
    from stepline.skills._lint import lint_skill, skill_kind
    from stepline.skills._load import SKILL_FORMAT, load_skill, skill_finder, skill_frame
    from stepline.skills._render import RenderEnv, render_skill_text
    from stepline.skills._skill import is_skill, skill_md_missing

__getattr__, __dir__ = _lazy_exports("stepline.skills", globals(), _EXPORTS)
