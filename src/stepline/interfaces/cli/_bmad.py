"""The ``bmad`` commands: install BMAD modules from a source tree into a project."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Annotated

import typer

from stepline.interfaces.cli._options import Directory, JsonOutput, app, where
from stepline.interfaces.cli._render import console, err_console, print_json

bmad_app = typer.Typer(help="BMAD-METHOD modules: install them into a project.", no_args_is_help=True)
app.add_typer(bmad_app, name="bmad")


def install_extras(extras: Path, project: Path) -> list[str]:
    """Copy task files deleted upstream (``validate-workflow.xml`` …) into ``_bmad/core/tasks`` when missing."""
    from stepline.errors import NotFoundError

    if not extras.is_dir():
        raise NotFoundError(f"{extras}: no such folder", hint="pass the folder holding the extra task files")
    tasks = project / "_bmad" / "core" / "tasks"
    tasks.mkdir(parents=True, exist_ok=True)
    copied: list[str] = []
    for source in sorted(extras.glob("*.xml")):
        if not (tasks / source.name).exists():
            shutil.copy2(source, tasks / source.name)
            copied.append(source.name)
    return copied


_SETTING = re.compile(r"[\w-]+(?:\.[\w-]+)?")


def parse_settings(pairs: list[str]) -> dict[str, str]:
    """``--set KEY=VALUE`` or ``--set MODULE.KEY=VALUE`` pairs as a mapping; a malformed one is a UsageError."""
    from stepline.errors import UsageError

    settings: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not _SETTING.fullmatch(name.strip()):
            raise UsageError(f"--set expects KEY=VALUE or MODULE.KEY=VALUE, got {pair!r}",
                             hint="for example --set user_name=Ada or --set bmm.project_name=demo")
        settings[name.strip()] = value
    return settings


def _files_under(folder: Path) -> dict[Path, set[str]]:
    """The files of each module folder already under ``folder`` (``_bmad``), relative to that module folder."""
    if not folder.is_dir():
        return {}
    return {module.resolve(): {p.relative_to(module).as_posix() for p in module.rglob("*") if p.is_file()}
            for module in folder.iterdir() if module.is_dir()}


def _left_over(before: set[str], source: Path, extras: Path | None) -> list[str]:
    """Files an earlier install left that this release does not ship: not the module's config (the installer
    writes config.yaml, the person config.user.yaml), nor the task files ``--extras`` adds."""
    def ours(rel: str) -> bool:
        name = Path(rel).name
        return name in ("config.yaml", "config.user.yaml") or (extras is not None and (extras / name).is_file())

    return sorted(rel for rel in before if not (source / rel).exists() and not ours(rel))


@bmad_app.command("install")
def install(
    src: Annotated[Path, typer.Argument(help="A BMAD repository, its src/ folder, or one module folder.")],
    project: Annotated[Path | None, typer.Option("--project", "--project-root", file_okay=False, metavar="DIR",
                                                 help="The project to install into (default: the -C folder, else "
                                                      "the current one).")] = None,
    setting: Annotated[list[str] | None, typer.Option("--set", help="A module setting: KEY=VALUE or "
                                                      "MODULE.KEY=VALUE (repeatable).")] = None,
    extras: Annotated[Path | None, typer.Option("--extras", help="A folder of task files that workflows name "
                                                "but the source no longer ships; installed when missing.",
                                                file_okay=False)] = None,
    directory: Directory = None,
    as_json: JsonOutput = False,
) -> None:
    """Install the BMAD modules under SRC into PROJECT/_bmad/ and write each module's config.yaml.

    SRC, --project and --extras, when relative, are taken from the current folder (or from -C DIR).
    """
    from stepline.bmad import install_bmad
    from stepline.errors import NotFoundError, StorageError

    settings = parse_settings(setting or [])
    at = where(directory, None)  # the project folder may not exist yet: the installer makes it
    if extras is not None and not at.path(extras).is_dir():  # checked first: a failed command installs nothing
        raise NotFoundError(f"{at.path(extras)}: no such folder", hint="pass the folder holding the extra task files")
    target = at.root if project is None else at.path(project)
    earlier = _files_under(target / "_bmad")  # an upgrade over another release leaves that release's files
    try:
        report = install_bmad(at.path(src), target, settings)
    except OSError as exc:  # a project that cannot be written (not a folder, read-only, full): one line
        error = StorageError.from_os(exc, exc.filename or target)
        error.hint = error.hint or f"{target.absolute()} and its _bmad/ must be folders you can write"
        raise error from exc
    extras_folder = at.path(extras) if extras is not None else None
    stale = {m.target: _left_over(earlier.get(m.target.resolve(), set()), m.source, extras_folder)
             for m in report.modules}
    copied = install_extras(at.path(extras), report.project) if extras is not None else []
    if as_json:
        print_json({"project": str(report.project), "extras": copied, "unused_settings": list(report.unused_settings),
                    "modules": [{"name": m.name, "target": str(m.target), "config": str(m.config_path),
                                 "files": m.files} for m in report.modules],
                    "scripts": str(report.scripts) if report.scripts else None,
                    "central_config": [str(p) for p in report.central_config]})
        return
    for module in report.modules:
        console.print(f"installed {module.name:<6} {module.files:4} files -> {module.target}", markup=False)
    if report.scripts is not None:
        console.print(f"installed shared scripts -> {report.scripts}", markup=False)
    for written in report.central_config:
        console.print(f"wrote {written}", markup=False)
    if copied:
        console.print(f"installed extra tasks: {', '.join(copied)}", markup=False)
    for key in report.unused_settings:
        err_console.print(f"warning: no module declares the setting {key!r}", markup=False)
    for warning in report.warnings:
        err_console.print(f"warning: {warning}", markup=False, soft_wrap=True)
    for module_folder, files in stale.items():
        if files:
            err_console.print(f"warning: {module_folder} keeps {len(files)} file(s) of an earlier install that this "
                              f"release does not ship (e.g. {files[0]}); for a clean install, remove the folder and "
                              "install again", markup=False, soft_wrap=True, highlight=False)
