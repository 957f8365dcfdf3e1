"""A real language server: pylsp over stdio through pygls's client — hover, signatureHelp, reuse, shutdown."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import psutil
import pytest

from fakes import agents
from stepline.context import ContextResolver, LspPool, TelisConfig, TelisRequest
from stepline.context._lsp import find_command

pytestmark = pytest.mark.skipif(find_command(["pylsp"]) is None, reason="pylsp (python-lsp-server) is not installed")

MODULE = '''\
def greet(name: str, excited: bool = False) -> str:
    """Say hello to someone.

    The greeting ends with an exclamation mark when excited.
    """
    return "hello " + name + ("!" if excited else "")


message = greet("ada", True)
'''


@pytest.fixture
def code(project: Path) -> Path:
    (project / "app").mkdir()
    (project / "app" / "greeting.py").write_text(MODULE, encoding="utf-8")
    return project


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_hover_and_signature_help_from_pylsp_then_the_server_is_gone(code: Path) -> None:
    """Hover on the call gives the function's signature and docstring; signatureHelp inside the call gives its
    parameters and the active one; one server serves both; after aclose its process no longer exists."""

    async def go() -> tuple[dict, dict, list[int], list[int]]:
        resolver = ContextResolver(code, TelisConfig())
        try:
            hover = await resolver.resolve(TelisRequest(document_path="app/greeting.py", line=8, character=11))
            pids = resolver.lsp.pids
            signature = await resolver.resolve(TelisRequest(document_path="app/greeting.py", line=8,
                                                            character=23, method="signatureHelp"))
            assert resolver.lsp.pids == pids  # reused, not started again
        finally:
            await resolver.aclose()
        return hover, signature, pids, resolver.lsp.pids

    hover, signature, pids, after = asyncio.run(go())
    assert hover["lsp"]["server"] == "pylsp" and hover["warnings"] == []
    text = hover["lsp"]["result"]["text"]
    assert "greet(name: str, excited: bool = False) -> str" in text and "Say hello to someone." in text
    (sig,) = signature["lsp"]["result"]["signatures"]
    assert [p["label"] for p in sig["parameters"]] == ["name", "excited"]
    assert sig["label"].startswith("greet(") and "Say hello" in sig["documentation"]
    assert signature["lsp"]["result"]["active_parameter"] == 1
    assert hover["sources"] == {"app/greeting.py": signature["sources"]["app/greeting.py"]}
    assert len(pids) == 1 and after == [] and _gone(pids[0])


def test_inline_document_text_is_answered_too(project: Path) -> None:
    """telis_document_text + telis_language: the server is given the text itself; nothing is written to disk."""
    request = TelisRequest(document_text=MODULE, language="python", line=8, character=11)

    async def go() -> dict:
        resolver = ContextResolver(project, TelisConfig())
        try:
            return await resolver.resolve(request)
        finally:
            await resolver.aclose()

    context = asyncio.run(go())
    assert "Say hello to someone." in context["lsp"]["result"]["text"]
    assert context["lsp"]["document"].startswith("inline:") and not (project / ".stepline").exists()


def test_a_missing_server_is_a_warning_in_the_context_not_a_failure(project: Path) -> None:
    """A language whose server is not installed: the context says so and still has its shards."""
    (project / "a.ts").write_text("export function f(x: number) { return x }\n", encoding="utf-8")
    (project / "README.md").write_text("# Numbers\n\nThe f function doubles numbers.\n", encoding="utf-8")
    config = TelisConfig(servers={"typescript": ["no-such-language-server-xyz", "--stdio"]})

    async def go() -> dict:
        resolver = ContextResolver(project, config)
        try:
            return await resolver.resolve(TelisRequest(query="numbers", document_path="a.ts", line=0, character=17))
        finally:
            await resolver.aclose()

    context = asyncio.run(go())
    assert context["lsp"]["result"] is None and context["lsp"]["language"] == "typescript"
    assert context["warnings"] == ["language server 'no-such-language-server-xyz' for typescript is not installed"]
    assert [s["id"] for s in context["shards"]] == ["README.md#numbers"]


def test_a_server_that_dies_at_start_is_a_warning_naming_it(project: Path, tmp_path: Path) -> None:
    """A 'server' that exits at once: the warning says it did not initialize; no process is left."""
    fake = tmp_path / "dead-server"
    fake.write_text("#!/bin/sh\necho broken >&2\nexit 3\n", encoding="utf-8")
    fake.chmod(0o755)
    pool = LspPool(project, {"python": [str(fake)]}, timeout=10)

    async def go() -> str | None:
        answer = await pool.ask("python", (project / "x.py").as_uri(), "x = 1\n", 0, 0, "hover")
        await pool.aclose()
        return answer.warning

    warning = asyncio.run(go())
    assert warning is not None and warning.startswith("language server dead-server did not initialize")
    assert pool.pids == []
    assert not [p for p in psutil.Process(os.getpid()).children(recursive=True) if "dead-server" in " ".join(
        p.cmdline())]


def _typescript_ready() -> bool:
    """typescript-language-server and a TypeScript with tsserver (5.x; TypeScript 7 has none), as scripts/agents.sh
    installs them (pinned in tests/agents/package.json)."""
    return (agents.BIN / "typescript-language-server").is_file() and (
        agents.BIN.parent / "typescript" / "lib" / "tsserver.js").is_file()


@pytest.mark.skipif(not _typescript_ready(), reason="typescript-language-server with TypeScript 5 is not installed "
                                                    "in tests/agents: run scripts/agents.sh (needs npm)")
def test_typescript_hover_and_signature_help_from_typescript_language_server(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A .ts document goes to typescript-language-server (found on PATH, as a user's would be): hover gives the
    signature and the JSDoc, signatureHelp the parameters; the server is gone after aclose."""
    monkeypatch.setenv("PATH", f"{agents.BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    (project / "shapes.ts").write_text("/** Area of a rectangle. */\nexport function area(width: number, height: "
                                       "number): number {\n  return width * height;\n}\n\nconst a = area(2, 3);\n",
                                       encoding="utf-8")

    async def go() -> tuple[dict, dict, list[int]]:
        resolver = ContextResolver(project, TelisConfig(lsp_timeout_seconds=90))
        try:
            hover = await resolver.resolve(TelisRequest(document_path="shapes.ts", line=5, character=11))
            pids = resolver.lsp.pids
            signature = await resolver.resolve(TelisRequest(document_path="shapes.ts", line=5, character=16,
                                                            method="signatureHelp"))
        finally:
            await resolver.aclose()
        return hover, signature, pids

    hover, signature, pids = asyncio.run(go())
    assert hover["warnings"] == [] and hover["lsp"]["server"] == "typescript-language-server"
    assert "function area(width: number, height: number): number" in hover["lsp"]["result"]["text"]
    assert "Area of a rectangle." in hover["lsp"]["result"]["text"]
    (sig,) = signature["lsp"]["result"]["signatures"]
    assert [p["label"] for p in sig["parameters"]] == ["width: number", "height: number"]
    assert len(pids) == 1 and _gone(pids[0])


def test_a_position_outside_the_document_is_a_warning_and_no_server_is_asked(code: Path) -> None:
    """Line 500 of a 9-line file, or a character past its line's end, is named in a warning (the server would
    answer nothing, which reads as "nothing to say"); the empty row after the final newline is still a position."""

    async def go() -> tuple[dict, dict, list[int], dict]:
        resolver = ContextResolver(code, TelisConfig())
        try:
            past_end = await resolver.resolve(TelisRequest(document_path="app/greeting.py", line=500, character=0))
            past_line = await resolver.resolve(TelisRequest(document_path="app/greeting.py", line=8, character=200))
            started = resolver.lsp.pids
            last_row = await resolver.resolve(TelisRequest(document_path="app/greeting.py", line=9, character=0))
        finally:
            await resolver.aclose()
        return past_end, past_line, started, last_row

    past_end, past_line, started, last_row = asyncio.run(go())
    assert past_end["warnings"] == ["app/greeting.py: telis_line/telis_character: line 500 is outside the document "
                                    "(9 lines, numbered from 0); no language server was asked"]
    assert past_end["lsp"]["result"] is None and past_end["lsp"]["line"] == 500
    assert past_line["warnings"] == ["app/greeting.py: telis_line/telis_character: character 200 is outside line 8 "
                                     "(28 characters, numbered from 0); no language server was asked"]
    assert started == []  # neither was sent to a server
    assert last_row["warnings"] == [] and last_row["lsp"]["server"] == "pylsp"
