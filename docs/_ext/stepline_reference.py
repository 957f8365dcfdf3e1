"""The reference pages, generated from the code at build time so that they cannot drift from it.

A page holds a fenced ``{stepline-reference} NAME`` block; while Sphinx reads the page the block is replaced by
the Markdown this module makes from the code: ``cli`` (the typer app, every command and option), ``runtime-config``
and ``sprint-config`` (the pydantic models of config/runtime.yaml and config/sprint.yaml), ``rest`` (the dashboard
app's OpenAPI), ``mcp`` (the MCP server's tools and their input schemas) and ``exit-codes`` (stepline.errors).
"""

from __future__ import annotations

import asyncio
import re
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx

BLOCK = re.compile(r"^```\{stepline-reference\}\s+(\S+)\s*\n```\s*$", re.MULTILINE)


def _cell(text: object) -> str:
    """A table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(text: object) -> str:
    """Inline code that survives backticks inside it."""
    text = str(text)
    return f"`` {text} ``" if "`" in text else f"`{text}`"


# -- the CLI -------------------------------------------------------------------------------------------------------
def cli() -> str:
    """Every command of ``stepline`` in the order ``--help`` lists them, with its usage, help and options."""
    import typer

    from stepline.interfaces.cli import _commands  # noqa: F401 - registers the commands
    from stepline.interfaces.cli._app import app

    out: list[str] = []

    # typer vendors its own click: commands, contexts and parameters are read by what they have, not their class.
    def walk(command: Any, path: list[str], parent: Any) -> None:
        context = command.context_class(command, info_name=path[-1], parent=parent)
        if path[1:]:
            out.append(f"{'#' * min(len(path), 4)} {' '.join(path)}\n")
        usage = _upper(" ".join([*path, *command.collect_usage_pieces(context)]))
        out.append(f"```text\n{usage}\n```\n")
        if command.help:
            out.append(_dedent(command.help) + "\n")
        rows = []
        for param in command.get_params(context):
            if param.hidden or param.name == "help" or param.param_type_name not in ("argument", "option"):
                continue
            record = param.get_help_record(context)
            if record is None:
                continue
            shown, text = record
            if param.param_type_name == "argument":
                shown = _upper(" ".join(param.get_usage_pieces(context)) or shown)
                text = text or ("" if param.required else "optional")
            rows.append(f"| {_code(shown)} | {_cell(text)} |")
        if rows:
            out.append("| argument or option | what |\n| --- | --- |\n" + "\n".join(rows) + "\n")
        for name in command.list_commands(context) if hasattr(command, "list_commands") else []:
            sub = command.get_command(context, name)
            if sub is not None and not sub.hidden:
                walk(sub, [*path, name], context)

    walk(typer.main.get_command(app), ["stepline"], None)
    return "\n".join(out)


def _upper(usage: str) -> str:
    """typer's usage names an argument ``{run_id}``; its help shows ``RUN_ID``, as the docs do."""
    return re.sub(r"\{(\w+)\}", lambda match: match.group(1).upper(), usage)


def _dedent(text: str) -> str:
    import inspect

    return inspect.cleandoc(text).replace("\b\n", "")


# -- configuration files ----------------------------------------------------------------------------------------
def _model_rows(model: Any, prefix: str = "") -> Iterator[str]:
    from pydantic import BaseModel

    for name, field in model.model_fields.items():
        if field.exclude:
            continue
        key = f"{prefix}{name}"
        annotation = field.annotation
        nested = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
        if nested is not None:
            doc = _cell(field.description or (nested.__doc__ or "").strip().split("\n\n")[0])
            yield f"| {_code(key + ':')} | section | | {doc} |"
            yield from _model_rows(nested, key + ".")
            continue
        default = field.get_default(call_default_factory=True)
        shown = "" if default is None and field.is_required() else _code(_yaml(default))
        yield f"| {_code(key)} | {_cell(_type_name(annotation))} | {shown} | {_cell(field.description or '')} |"


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = text or str(annotation)
    return re.sub(r"\b(typing|pathlib|stepline(\.\w+)*)\.", "", text).replace("NoneType", "null")


def _yaml(value: Any) -> str:
    import json

    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return json.dumps(value, default=str)


def _config_page(model: Any, file: str) -> str:
    doc = (model.__doc__ or "").strip()
    head = f"Every key of `{file}` is optional; an unknown key is an error naming file:line (exit 4).\n\n{doc}\n\n"
    return head + "| key | type | default | what |\n| --- | --- | --- | --- |\n" + "\n".join(_model_rows(model)) + "\n"


def runtime_config() -> str:
    from stepline.engine._config import RuntimeConfig

    return _config_page(RuntimeConfig, "config/runtime.yaml")


def sprint_config() -> str:
    from stepline.sprint._config import SprintConfig

    return _config_page(SprintConfig, "config/sprint.yaml")


# -- the REST API ----------------------------------------------------------------------------------------------
def rest() -> str:
    """Each path and method of the dashboard's API, from the app's own OpenAPI document."""
    from stepline.engine import RuntimeConfig
    from stepline.interfaces.web._app import create_app

    with tempfile.TemporaryDirectory() as folder:
        spec = create_app(Path(folder), RuntimeConfig(), "docs").openapi()
    out = [_dedent(spec["info"].get("description", "")) + "\n"]
    for path, methods in spec["paths"].items():
        for method, operation in methods.items():
            out.append(f"## {method.upper()} {path}\n")
            summary = operation.get("description") or operation.get("summary") or ""
            if summary:
                out.append(_dedent(summary) + "\n")
            params = operation.get("parameters", [])
            if params:
                out.append("| parameter | in | type | what |\n| --- | --- | --- | --- |")
                for param in params:
                    schema = param.get("schema", {})
                    out.append(f"| {_code(param['name'])} | {param['in']} | {_cell(_schema_type(schema, spec))} | "
                               f"{_cell(param.get('description', ''))} |")
                out.append("")
            body = operation.get("requestBody", {}).get("content", {})
            for media, content in body.items():
                out.append(f"Request body ({_code(media)}): {_schema_fields(content.get('schema', {}), spec)}\n")
    return "\n".join(out)


def _resolve(schema: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref:
        node: Any = spec
        for part in ref.lstrip("#/").split("/"):
            node = node[part]
        return dict(node)
    return schema


def _schema_type(schema: dict[str, Any], spec: dict[str, Any]) -> str:
    schema = _resolve(schema, spec)
    if "anyOf" in schema:
        return " or ".join(_schema_type(part, spec) for part in schema["anyOf"])
    if schema.get("type") == "array":
        return f"list of {_schema_type(schema.get('items', {}), spec)}"
    if "enum" in schema:
        return " / ".join(_code(value) for value in schema["enum"])
    return str(schema.get("type", schema.get("title", "object")))


def _schema_fields(schema: dict[str, Any], spec: dict[str, Any]) -> str:
    schema = _resolve(schema, spec)
    properties = schema.get("properties", {})
    if not properties:
        return _schema_type(schema, spec)
    required = set(schema.get("required", []))
    return ", ".join(f"{_code(name)} ({_schema_type(value, spec)}{'' if name in required else ', optional'})"
                     for name, value in properties.items())


# -- MCP tools ------------------------------------------------------------------------------------------------
def mcp() -> str:
    """The tools `stepline mcp` serves, with each parameter's type and description, from their schemas."""
    from stepline.interfaces.mcp._server import INSTRUCTIONS, RunHost, build_server

    with tempfile.TemporaryDirectory() as folder:
        server = build_server(RunHost(Path(folder)))
        tools = asyncio.run(server.list_tools())
    out = ["What the server tells a client when it connects:\n", "```text\n" + INSTRUCTIONS.strip() + "\n```\n"]
    for tool in tools:
        out.append(f"## {tool.name}\n")
        out.append(_dedent(tool.description or "") + "\n")
        schema = tool.input_schema
        properties = schema.get("properties", {})
        if properties:
            required = set(schema.get("required", []))
            out.append("| parameter | type | required | what |\n| --- | --- | --- | --- |")
            for name, value in properties.items():
                out.append(f"| {_code(name)} | {_cell(_schema_type(value, schema))} | "
                           f"{'yes' if name in required else 'no'} | {_cell(value.get('description', ''))} |")
            out.append("")
    return "\n".join(out)


# -- exit codes -------------------------------------------------------------------------------------------------
def exit_codes() -> str:
    """Every exit code, what it means, and the errors that exit with it."""
    import stepline.errors as errors

    classes: dict[int, list[str]] = {}
    for name in errors.__all__:
        value = getattr(errors, name)
        if isinstance(value, type) and issubclass(value, errors.SteplineError):
            classes.setdefault(value.exit_code, []).append(name)
    rows = [f"| {code} | {_cell(meaning)} | {', '.join(_code(c) for c in sorted(classes.get(code, [])))} |"
            for code, meaning in sorted(errors.EXIT_CODES.items())]
    return "| code | meaning | raised as |\n| --- | --- | --- |\n" + "\n".join(rows) + "\n"


GENERATORS: dict[str, Callable[[], str]] = {
    "cli": cli, "runtime-config": runtime_config, "sprint-config": sprint_config, "rest": rest, "mcp": mcp,
    "exit-codes": exit_codes,
}


def _fill(app: Sphinx, docname: str, source: list[str]) -> None:
    def generated(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise ValueError(f"{docname}: unknown {{stepline-reference}} {name!r}; known: {', '.join(GENERATORS)}")
        return GENERATORS[name]()

    source[0] = BLOCK.sub(generated, source[0])


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("source-read", _fill)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
