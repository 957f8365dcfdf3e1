"""``stepline providers``: which executors exist, how they are configured, and whether the model APIs answer."""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer

from stepline.interfaces.cli._options import ConfigOption, Directory, JsonOutput, ProjectRoot, app, where
from stepline.interfaces.cli._render import console, print_json

#: Built-ins that do not call a model API; every other executor is offered a connectivity check.
_NOT_LLM = frozenset({"dry-run", "scripted", "cli-agent", "human", "replay"})
_ENV_PREFIX = {"openai": "OPENAI", "anthropic": "ANTHROPIC"}


def mask(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` with secret-named values (``api_key``) and secret-looking strings redacted."""
    from stepline.guardrails import redact_obj

    return dict(redact_obj(settings))


def _env_settings(name: str) -> dict[str, str]:
    """The environment variables an LLM executor falls back to, when they are set."""
    prefix = _ENV_PREFIX.get(name)
    if prefix is None:
        return {}
    names = (f"{prefix}_BASE_URL", f"{prefix}_API_KEY", f"STEPLINE_{prefix}_MODEL")
    return {f"${var}": os.environ[var] for var in names if os.environ.get(var)}


async def check_provider(name: str, settings: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One connectivity check: list the endpoint's models once, without retries, within ``timeout``."""
    from stepline.errors import SteplineError
    from stepline.executors import LLMExecutor, create_executor

    try:
        executor = create_executor(name, {**settings, "timeout_seconds": timeout, "retries": 0})
    except SteplineError as exc:
        return {"executor": name, "status": "skipped", "detail": exc.format_message()}
    if not isinstance(executor, LLMExecutor):
        return {"executor": name, "status": "skipped", "detail": "not a model API executor"}
    try:
        found = await executor.check()
    except SteplineError as exc:
        return {"executor": name, "status": "failed", "detail": exc.format_message()}
    listed = "" if found["model_listed"] else " (not in the list)"
    detail = (f"{found['base_url']} · model {found['model']}{listed} · {found['models']} models · "
              f"{found['latency_ms']:g} ms")
    return {"executor": name, "status": "ok", "detail": detail, **found}


@app.command()
def providers(
    check: Annotated[bool, typer.Option("--check", help="Send one cheap request (list models) to each model "
                                                        "API executor and report the result.")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds each check may take.", min=0.1)] = 5.0,
    directory: Directory = None,
    project_root: ProjectRoot = None,
    config: ConfigOption = None,
    as_json: JsonOutput = False,
) -> None:
    """List the executors and their settings (secrets masked); --check tests each model API's connection."""
    from rich.table import Table
    from rich.text import Text

    from stepline.engine import load_runtime_config
    from stepline.executors import available_executors

    at = where(directory, project_root)
    runtime = load_runtime_config(at.root, at.option(config))
    names = sorted(set(available_executors()) | set(runtime.executors))
    rows: list[dict[str, Any]] = [
        {"executor": name, "configured": name in runtime.executors,
         "settings": mask({**runtime.executors.get(name, {}), **_env_settings(name)})}
        for name in names]
    checks: list[dict[str, Any]] = []
    if check:
        import asyncio

        targets = [name for name in names if name not in _NOT_LLM]

        async def run_checks() -> list[dict[str, Any]]:
            return list(await asyncio.gather(*(check_provider(name, runtime.executors.get(name, {}), timeout)
                                               for name in targets)))

        checks = asyncio.run(run_checks())
    if as_json:
        print_json({"executors": rows, "checks": checks} if check else {"executors": rows})
    else:
        table = Table("executor", "settings", box=None)
        for row in rows:
            settings = ", ".join(f"{k}={v}" for k, v in row["settings"].items()) or "-"
            table.add_row(row["executor"], settings)
        console.print(table)
        styles = {"ok": "green", "failed": "red", "skipped": "yellow"}
        for result in checks:
            style = styles[result["status"]]
            console.print(Text.assemble(f"{result['executor']}: ", (result["status"], style), f" {result['detail']}"),
                          soft_wrap=True)  # Text: a detail's "[x]" (a server's answer) is not markup
    if any(result["status"] == "failed" for result in checks):
        raise typer.Exit(7)
