"""Language servers over stdio, through pygls's LSP client: hover and signatureHelp for a step's context.

A server is started the first time a step asks about its language, reused by every later step of the run,
and shut down (``shutdown``, ``exit``, then the process is waited for, killed if it lingers) when the run
ends. A server that is not installed, does not start, or does not answer in time is a *warning* in the
step's context, never a failure of the step: context helps a step, it is not its work.

The commands come from ``telis.servers`` in the runtime config; the defaults are ``pylsp
--check-parent-process`` (python; a killed stepline closes its input, and it checks for its parent too),
``typescript-language-server --stdio`` (typescript, javascript), ``vscode-json-language-server --stdio``
(json) and ``yaml-language-server --stdio`` (yaml). A command is looked for on ``PATH`` and then beside the
running Python (a virtual environment's ``bin/``, where ``pip install python-lsp-server`` puts ``pylsp``).

Positions (``telis_line``, ``telis_character``) are the protocol's: 0-based line, 0-based character.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pygls.lsp.client import LanguageClient

__all__ = ["DEFAULT_SERVERS", "LANGUAGE_IDS", "LspAnswer", "LspPool", "find_command", "position_outside"]

DEFAULT_SERVERS: dict[str, list[str]] = {
    "python": ["pylsp", "--check-parent-process"],  # it exits when stepline does, even killed
    "typescript": ["typescript-language-server", "--stdio"],
    "javascript": ["typescript-language-server", "--stdio"],
    "json": ["vscode-json-language-server", "--stdio"],
    "yaml": ["yaml-language-server", "--stdio"],
}
#: The languageId the protocol names each language by, and the file suffixes that imply it.
LANGUAGE_IDS: dict[str, str] = {"python": "python", "typescript": "typescript", "javascript": "javascript",
                                 "json": "json", "yaml": "yaml"}
SUFFIXES: dict[str, str] = {".py": "python", ".pyi": "python", ".ts": "typescript", ".tsx": "typescript",
                            ".js": "javascript", ".jsx": "javascript", ".mjs": "javascript", ".cjs": "javascript",
                            ".json": "json", ".yaml": "yaml", ".yml": "yaml"}
_INSTALL_HINTS = {"pylsp": "pip install python-lsp-server",
                  "typescript-language-server": "npm install -g typescript-language-server typescript@5",
                  "vscode-json-language-server": "npm install -g vscode-langservers-extracted",
                  "yaml-language-server": "npm install -g yaml-language-server"}
_STDERR_KEPT = 2000


@dataclass(slots=True)
class LspAnswer:
    """What a server said (``result``: hover text or signatures, as plain JSON) or why it said nothing."""

    server: str | None = None
    result: dict[str, Any] | None = None
    warning: str | None = None


def find_command(command: list[str]) -> list[str] | None:
    """``command`` with its program found on PATH or beside the running Python; None when it is nowhere."""
    program = command[0]
    found = shutil.which(program)
    if found is None:
        beside = Path(sys.executable).parent / program
        found = str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None
    return [found, *command[1:]] if found else None


def position_outside(text: str, line: int, character: int) -> str | None:
    """Why ``line``:``character`` (the protocol's: 0-based, characters in UTF-16 units) is no position of
    ``text``, or None. A server asked about such a position answers nothing, which would read as "nothing to
    say here" rather than as the wrong position it is."""
    rows = text.split("\n")  # after a final newline, the empty last row is where a cursor can still stand
    if not 0 <= line < len(rows):
        return f"line {line} is outside the document ({len(text.splitlines())} lines, numbered from 0)"
    length = len(rows[line].removesuffix("\r").encode("utf-16-le")) // 2
    if not 0 <= character <= length:
        return f"character {character} is outside line {line} ({length} characters, numbered from 0)"
    return None


@dataclass(slots=True)
class _Server:
    """One running server: its client, process id, the documents it has open and their versions."""

    name: str
    client: LanguageClient
    pid: int
    stderr: bytearray = field(default_factory=bytearray)
    documents: dict[str, tuple[int, str]] = field(default_factory=dict)  # uri -> (version, text)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    drain: asyncio.Task[None] | None = None


class LspPool:
    """The language servers of one run, by language; started on demand, closed with :meth:`aclose`."""

    def __init__(self, root: Path, servers: dict[str, list[str]] | None = None, *, timeout: float = 30.0) -> None:
        self.root = root
        self.commands = {**DEFAULT_SERVERS, **(servers or {})}
        self.timeout = timeout
        self._servers: dict[str, _Server] = {}
        self._failed: dict[str, str] = {}  # language -> why its server is not there (not retried in this run)
        self._starting: dict[str, asyncio.Lock] = {}

    @property
    def pids(self) -> list[int]:
        """The process ids of the servers running now."""
        return [server.pid for server in self._servers.values()]

    async def ask(self, language: str, uri: str, text: str, line: int, character: int, method: str) -> LspAnswer:
        """Ask ``language``'s server ``method`` (hover | signatureHelp) at ``line``:``character`` of ``text``."""
        server = await self._server(language)
        if isinstance(server, str):
            return LspAnswer(warning=server)
        try:
            async with server.lock:
                self._sync(server, language, uri, text)
                result = await asyncio.wait_for(self._request(server.client, uri, line, character, method),
                                                self.timeout)
        except TimeoutError:
            return LspAnswer(server=server.name, warning=f"{server.name} did not answer {method} within "
                                                         f"{self.timeout:g}s (telis.lsp_timeout_seconds)")
        except Exception as exc:  # the server's own error, or a server that died: a warning, the step goes on
            return LspAnswer(server=server.name, warning=f"{server.name} failed on {method}: "
                                                         f"{_one_line(exc)}{self._stderr_tail(server)}")
        return LspAnswer(server=server.name, result=result)

    async def aclose(self) -> None:
        """Shut every server down: ``shutdown`` and ``exit``, then wait for its process (killed if it lingers)."""
        servers, self._servers = list(self._servers.values()), {}
        await asyncio.gather(*(self._stop(server) for server in servers), return_exceptions=True)

    # -- the servers -------------------------------------------------------------------------------------------
    async def _server(self, language: str) -> _Server | str:
        running = self._servers.get(language)
        if running is not None:
            return running
        if language in self._failed:
            return self._failed[language]
        lock = self._starting.setdefault(language, asyncio.Lock())
        async with lock:
            running = self._servers.get(language)
            if running is not None:
                return running
            if language in self._failed:
                return self._failed[language]
            started = await self._start(language)
            if isinstance(started, str):
                self._failed[language] = started
            else:
                self._servers[language] = started
            return started

    async def _start(self, language: str) -> _Server | str:
        from lsprotocol import types as lsp
        from pygls.lsp.client import LanguageClient

        _quiet_pygls()
        command = self.commands.get(language)
        if not command:
            return (f"no language server is configured for {language!r} "
                    f"(add one under telis.servers in config/runtime.yaml)")
        argv = find_command(command)
        if argv is None:
            hint = _INSTALL_HINTS.get(Path(command[0]).name)
            return (f"language server {command[0]!r} for {language} is not installed"
                    + (f" ({hint})" if hint else ""))
        client = LanguageClient("stepline", "1")
        for method in ("textDocument/publishDiagnostics", "window/logMessage", "window/showMessage", "$/progress"):
            client.feature(method)(_ignore)
        try:
            await client.start_io(*argv, cwd=str(self.root))
        except OSError as exc:
            return f"language server {argv[0]!r} did not start: {exc}"
        process = getattr(client, "_server", None)
        server = _Server(name=Path(argv[0]).name, client=client, pid=process.pid if process else -1)
        if process is not None and process.stderr is not None:
            server.drain = asyncio.ensure_future(_drain(process.stderr, server.stderr))
        capabilities = lsp.ClientCapabilities(text_document=lsp.TextDocumentClientCapabilities(
            hover=lsp.HoverClientCapabilities(content_format=[lsp.MarkupKind.Markdown, lsp.MarkupKind.PlainText]),
            signature_help=lsp.SignatureHelpClientCapabilities(
                signature_information=lsp.ClientSignatureInformationOptions(
                    documentation_format=[lsp.MarkupKind.Markdown, lsp.MarkupKind.PlainText]))))
        try:
            await asyncio.wait_for(client.initialize_async(lsp.InitializeParams(
                capabilities=capabilities, process_id=os.getpid(), root_uri=self.root.as_uri(),
                workspace_folders=[lsp.WorkspaceFolder(uri=self.root.as_uri(), name=self.root.name)])), self.timeout)
            client.initialized(lsp.InitializedParams())
        except Exception as exc:
            why = f"no answer within {self.timeout:g}s" if isinstance(exc, TimeoutError) else _one_line(exc)
            warning = f"language server {server.name} did not initialize: {why}{self._stderr_tail(server)}"
            await self._stop(server)
            return warning
        return server

    def _sync(self, server: _Server, language: str, uri: str, text: str) -> None:
        """Open the document on the server, or send its new text when it changed since."""
        from lsprotocol import types as lsp

        known = server.documents.get(uri)
        if known is None:
            server.client.text_document_did_open(lsp.DidOpenTextDocumentParams(lsp.TextDocumentItem(
                uri=uri, language_id=LANGUAGE_IDS.get(language, language), version=1, text=text)))
            server.documents[uri] = (1, text)
        elif known[1] != text:
            version = known[0] + 1
            server.client.text_document_did_change(lsp.DidChangeTextDocumentParams(
                text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=text)]))
            server.documents[uri] = (version, text)

    async def _request(self, client: LanguageClient, uri: str, line: int, character: int,
                       method: str) -> dict[str, Any]:
        from lsprotocol import types as lsp

        where = lsp.Position(line=line, character=character)
        document = lsp.TextDocumentIdentifier(uri=uri)
        if method == "hover":
            hover = await client.text_document_hover_async(lsp.HoverParams(text_document=document, position=where))
            return {"text": _markup(hover.contents) if hover is not None else ""}
        help_ = await client.text_document_signature_help_async(
            lsp.SignatureHelpParams(text_document=document, position=where))
        if help_ is None:
            return {"signatures": [], "active_signature": None, "active_parameter": None}
        signatures = []
        for signature in help_.signatures:
            parameters = []
            for parameter in signature.parameters or []:
                label = parameter.label
                if not isinstance(label, str):  # [start, end] offsets into the signature's label
                    label = signature.label[label[0]:label[1]]
                parameters.append({"label": label, "documentation": _markup(parameter.documentation)})
            signatures.append({"label": signature.label, "documentation": _markup(signature.documentation),
                               "parameters": parameters})
        return {"signatures": signatures, "active_signature": help_.active_signature,
                "active_parameter": help_.active_parameter}

    async def _stop(self, server: _Server) -> None:
        client = server.client
        process = getattr(client, "_server", None)
        with contextlib.suppress(Exception):
            if process is not None and process.returncode is None:
                await asyncio.wait_for(client.shutdown_async(None), 5)
                client.exit(None)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.stop(), 5)  # type: ignore[no-untyped-call]  # pygls leaves it untyped
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(process.wait(), 5)
        if server.drain is not None:
            server.drain.cancel()
            with contextlib.suppress(BaseException):
                await server.drain

    @staticmethod
    def _stderr_tail(server: _Server) -> str:
        tail = bytes(server.stderr[-300:]).decode("utf-8", "replace").strip()
        return f" (its stderr: {_one_line(tail)})" if tail else ""


def _markup(value: Any) -> str:
    """Hover contents or documentation as text: MarkupContent, a MarkedString, a list of them, or a string."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        return "\n\n".join(_markup(item) for item in value)
    text = getattr(value, "value", None)
    if isinstance(text, str):
        language = getattr(value, "language", None)
        return f"```{language}\n{text}\n```" if isinstance(language, str) else text
    return str(value)


def _ignore(*_args: Any) -> None:
    """Notifications a context needs nothing from (diagnostics, log messages, progress)."""


async def _drain(stream: asyncio.StreamReader, kept: bytearray) -> None:
    """Read a server's stderr as it comes (a full pipe would stall the server), keeping its end for warnings."""
    while chunk := await stream.read(4096):
        kept.extend(chunk)
        del kept[:-_STDERR_KEPT]


def _quiet_pygls() -> None:
    """pygls logs a server's oddities (an unknown notification) as warnings; a context reports what matters
    as its own warnings, so pygls's records go nowhere rather than to the terminal through logging's last resort."""
    logger = logging.getLogger("pygls")
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
        logger.propagate = False


def _one_line(value: Any) -> str:
    return " ".join(str(value).split())[:300]
