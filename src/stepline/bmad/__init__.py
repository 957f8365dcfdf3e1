"""BMAD-METHOD workflows: legacy (``workflow.yaml`` + instructions), micro-file (``workflow.md`` + steps),
hybrid, and the installer that lays a BMAD source tree out as ``{project}/_bmad/``.

Readers (``_config``, ``_instructions``, ``_conditions``, ``_legacy``, ``_microfile``) turn files into a
WorkflowSpec and never import the engine. Drivers (``_legacy_driver`` with ``_conditions_driver``,
``_discover`` and ``_template_output``; ``_microfile_driver`` with ``_menus``) run the steps and register
themselves with the engine when :func:`stepline.families.register_drivers` imports them. ``_install`` builds
an installed tree. Names below are imported on first use, so importing this package costs nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stepline._lazy import lazy_exports as _lazy_exports

_EXPORTS = {
    "LegacyFlow": "._legacy_driver",
    "run_legacy_step": "._legacy_driver",
    "holds_xml_steps": "._legacy",
    "markdown_workflow": "._legacy",
    "InstallReport": "._install",
    "InstalledModule": "._install",
    "install_bmad": "._install",
    "is_bmad_legacy": "._legacy",
    "lint_bmad_legacy": "._legacy",
    "load_bmad_legacy": "._legacy",
    "lint_bmad_microfile": "._microfile",
    "load_bmad_microfile": "._microfile",
    "load_bmad_workflow": "._load",
}

__all__ = [
    "InstallReport",
    "InstalledModule",
    "LegacyFlow",
    "holds_xml_steps",
    "install_bmad",
    "is_bmad_legacy",
    "lint_bmad_legacy",
    "lint_bmad_microfile",
    "load_bmad_legacy",
    "load_bmad_microfile",
    "load_bmad_workflow",
    "markdown_workflow",
    "run_legacy_step",
]

if TYPE_CHECKING:
    from stepline.bmad._install import InstalledModule, InstallReport, install_bmad
    from stepline.bmad._legacy import (
        holds_xml_steps,
        is_bmad_legacy,
        lint_bmad_legacy,
        load_bmad_legacy,
        markdown_workflow,
    )
    from stepline.bmad._legacy_driver import LegacyFlow, run_legacy_step
    from stepline.bmad._load import load_bmad_workflow
    from stepline.bmad._microfile import lint_bmad_microfile, load_bmad_microfile

__getattr__, __dir__ = _lazy_exports("stepline.bmad", globals(), _EXPORTS)
