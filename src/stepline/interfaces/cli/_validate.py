"""``stepline validate``: lint a workflow or a whole tree, every problem with file:line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from stepline.interfaces.cli._options import EXIT_INVALID, Directory, JsonOutput, ProjectRoot, app, where
from stepline.interfaces.cli._render import console, print_json


@app.command()
def validate(
    path: Annotated[Path, typer.Argument(help="A workflow file or folder, or a tree of them.")],
    directory: Directory = None,
    project_root: ProjectRoot = None,
    as_json: JsonOutput = False,
) -> None:
    """Report every problem in a workflow (or every workflow under a folder); exit 10 on errors.

    The last line says how many workflows of each kind were checked; a folder with none is an error. With
    --json: {workflows, kinds, errors, warnings, diagnostics}.
    """
    from dataclasses import asdict

    from stepline.families import lint_tree

    at = where(directory, project_root)
    target = at.path(path)
    if not target.is_absolute() and Path.cwd().resolve() != at.root:
        target = target.absolute()  # readers take a relative path from the project folder, which this is not
    diagnostics, checked = lint_tree(target, project_root=at.root)
    # A problem of a file many workflows read (_bmad/config.toml, a shared template) is one problem, said once.
    diagnostics = list(dict.fromkeys(diagnostics))
    errors = sum(1 for d in diagnostics if d.severity == "error")
    if as_json:
        print_json({"workflows": sum(checked.values()), "kinds": dict(sorted(checked.items())), "errors": errors,
                    "warnings": len(diagnostics) - errors, "diagnostics": [asdict(d) for d in diagnostics]})
    else:
        for diagnostic in diagnostics:  # plain lines: editors and CI parse file:line, so never wrap them
            print(diagnostic)
        warnings = len(diagnostics) - errors
        kinds = ", ".join(f"{count} {kind}" for kind, count in sorted(checked.items()))
        console.print(f"checked {sum(checked.values())} workflow(s){': ' + kinds if kinds else ''}; "
                      f"{errors} error(s), {warnings} warning(s)", soft_wrap=True, markup=False)
    if errors:
        raise typer.Exit(EXIT_INVALID)
