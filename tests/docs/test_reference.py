"""The reference pages made from the code (docs/_ext/stepline_reference.py) cover all of it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

import stepline.errors as errors

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture(scope="module")
def reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location("stepline_reference", DOCS / "_ext" / "stepline_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("stepline_reference", module)
    spec.loader.exec_module(module)
    return module


def test_every_exit_code_is_explained() -> None:
    """Each error's exit code and each outcome code the CLI returns has a line in EXIT_CODES."""
    from stepline.interfaces.cli import _options, _sprint

    raised = {getattr(errors, name).exit_code for name in errors.__all__
              if isinstance(getattr(errors, name), type) and issubclass(getattr(errors, name), errors.SteplineError)}
    outcomes = {_options.EXIT_FAILED, _options.EXIT_BLOCKED, _options.EXIT_INVALID, _options.EXIT_DIFFERENT,
                _options.EXIT_DAMAGED, _sprint.EXIT_DEFERRED, 0, 2, 130}
    assert raised | outcomes <= set(errors.EXIT_CODES)


def test_cli_reference_has_every_command_and_option(reference: ModuleType) -> None:
    """Every command, subcommand and option typer knows is on the CLI page."""
    import typer

    from stepline.interfaces.cli import _commands  # noqa: F401
    from stepline.interfaces.cli._app import app

    page = reference.cli()
    root = typer.main.get_command(app)
    context = root.context_class(root, info_name="stepline")
    seen = 0
    for name in root.list_commands(context):
        command = root.get_command(context, name)
        assert f"## stepline {name}\n" in page
        subs = command.list_commands(context) if hasattr(command, "list_commands") else []
        for sub in subs:
            assert f"### stepline {name} {sub}\n" in page
        for param in command.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("-"):
                    assert opt in page, f"stepline {name}: {opt}"
        seen += 1
    assert seen >= 20


def test_config_reference_has_every_key(reference: ModuleType) -> None:
    """Every top-level key of config/runtime.yaml and config/sprint.yaml is in its table."""
    from stepline.engine._config import RuntimeConfig
    from stepline.sprint._config import SprintConfig

    runtime, sprint = reference.runtime_config(), reference.sprint_config()
    for name, field in RuntimeConfig.model_fields.items():
        if not field.exclude:
            assert f"`{name}" in runtime, name
    assert "`runtime.max_step_visits` | int | `25`" in runtime
    for name in SprintConfig.model_fields:
        assert f"`{name}" in sprint, name


def test_rest_and_mcp_references_have_every_endpoint_and_tool(reference: ModuleType) -> None:
    """Each path of the dashboard's OpenAPI and each tool `stepline mcp` serves has its section."""
    import asyncio
    import tempfile

    from stepline.engine import RuntimeConfig
    from stepline.interfaces.mcp._server import RunHost, build_server
    from stepline.interfaces.web._app import create_app

    rest, mcp = reference.rest(), reference.mcp()
    with tempfile.TemporaryDirectory() as folder:
        spec = create_app(Path(folder), RuntimeConfig(), "t").openapi()
        tools = asyncio.run(build_server(RunHost(Path(folder))).list_tools())
    for path, methods in spec["paths"].items():
        for method in methods:
            assert f"## {method.upper()} {path}\n" in rest
    assert {tool.name for tool in tools} >= {"start_run", "current_step", "answer", "finish"}
    for tool in tools:
        assert f"## {tool.name}\n" in mcp
        for parameter in tool.input_schema.get("properties", {}):
            assert f"`{parameter}`" in mcp


def test_exit_code_reference_names_the_errors(reference: ModuleType) -> None:
    """The exit-code table lists each code with the error classes that exit with it."""
    page = reference.exit_codes()
    assert "| 9 | the run is blocked" in page
    assert "| 6 |" in page and "`NondeterminismError`" in page.split("| 6 |")[1].split("\n")[0]
