"""Native workflows: stepline's own YAML/JSON format (a list of StepSpecs, R-F1).

``_reader`` turns a file into a WorkflowSpec and never imports the engine; ``_driver`` runs its steps and is
registered with the engine by :func:`stepline.families.register_drivers`.
"""

from __future__ import annotations

from stepline.native._reader import is_native_workflow, lint_native, load_native

__all__ = ["is_native_workflow", "lint_native", "load_native"]
