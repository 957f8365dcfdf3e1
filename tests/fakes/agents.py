"""The real agent CLIs (pinned in tests/agents/, installed by scripts/agents.sh) run against the fake model servers.

Each CLI runs in a temporary project folder with a temporary HOME (never the user's own configuration), and with
nothing of the caller's environment but PATH and the locale: :func:`environment` builds that, :func:`binary` finds
the CLI or skips the test naming what is missing. How each CLI is pointed at the local server and made to run
unattended, as found by running the pinned versions (tests/agentcli/test_real_clis.py proves each one):

claude (@anthropic-ai/claude-code 2.1.x) — Anthropic Messages, streamed (:mod:`fakes.fake_anthropic`)
    env ``ANTHROPIC_BASE_URL=http://127.0.0.1:PORT`` (no ``/v1``), ``ANTHROPIC_API_KEY=<anything>``,
    ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`` (no telemetry, update or side requests: only ``/v1/messages``);
    ``claude -p PROMPT --output-format stream-json --verbose --permission-mode acceptEdits`` (writes allowed, Bash not:
    add ``--allowedTools Bash``); ``--dangerously-skip-permissions`` / ``bypassPermissions`` are refused when running as
    root. MCP: ``--mcp-config FILE --strict-mcp-config --allowedTools mcp__NAME``; MCP tools are deferred behind
    ``ToolSearch`` (see :mod:`fakes.fake_anthropic`, whose responder makes that round trip). Usage: every ``assistant``
    line carries the streamed message's usage, the last line (``"type": "result"``) the run's total ``usage`` and
    ``total_cost_usd``; ``session_id`` is on every line.

codex (@openai/codex 0.169) — OpenAI Responses, streamed (:mod:`fakes.fake_openai`)
    ``$CODEX_HOME/config.toml`` (default ``~/.codex``; :func:`codex_env` writes it): ``model_provider`` naming a
    ``[model_providers.X]`` with ``base_url = "http://127.0.0.1:PORT/v1"``, ``wire_api = "responses"`` and ``env_key``
    naming the variable holding the key; ``codex exec --json --skip-git-repo-check -C DIR -s workspace-write PROMPT``
    with stdin closed (it reads stdin when it is not a terminal). There is no ``--full-auto`` any more: ``exec`` never
    asks (approval policy ``never``), ``-s`` picks the sandbox (``read-only`` for analysis: a command's write fails with
    "Read-only file system"); the shell tool is ``exec_command`` (``{"cmd": "..."}``). MCP: ``[mcp_servers.NAME]`` with
    ``command``/``args``, and ``required = true`` (else the first turn can start before the server is up and its tools
    are then never offered) and ``default_tools_approval_mode = "approve"`` (else every call fails: "MCP tool call
    requires approval, but approval policy is never"). Its tools are offered as the namespace ``mcp__NAME`` (called with
    ``"namespace"`` on the ``function_call``; the fake's responder does that for a call to ``mcp__NAME__tool``). An
    unknown model name adds an ``error`` item ("Model metadata for ... not found") to the stream and nothing else.
    Usage: ``turn.completed`` carries the turn's summed ``usage`` (``input_tokens``, ``cached_input_tokens``,
    ``output_tokens``); the session id is ``thread.started``'s ``thread_id``.

gemini (@google/gemini-cli 0.61) — Gemini ``streamGenerateContent?alt=sse`` (:mod:`fakes.fake_gemini`)
    env ``GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:PORT`` (http is accepted for 127.0.0.1/localhost only) and
    ``GEMINI_API_KEY=<anything>``, plus ``security.auth.selectedType = "gemini-api-key"`` in a settings file
    (:func:`gemini_env` writes ``~/.gemini/settings.json``): with the base URL set and no selected type the CLI picks
    "gateway" auth and stops with "Invalid auth method selected.". ``gemini -p PROMPT --output-format stream-json
    --approval-mode yolo --skip-trust -m MODEL``: ``--skip-trust`` (or env ``GEMINI_CLI_TRUST_WORKSPACE=true``) trusts
    the folder for this run; without it yolo is "overridden to default" and the run exits 55 ("Gemini CLI is not running
    in a trusted directory"); ``-m`` skips the model router's classifier request (with ``auto`` it asks
    ``gemini-…-flash-lite`` for a JSON verdict first). MCP: ``mcpServers`` in a settings file the CLI trusts — the user
    settings (``$GEMINI_CLI_HOME/.gemini/settings.json``, GEMINI_CLI_HOME defaulting to HOME) or the trusted project's
    ``.gemini/settings.json``; a system settings file in a world-writable folder such as /tmp is skipped ("Parent
    directory '/tmp' is insecure") — and ``--allowed-mcp-server-names NAME``; tools are named ``mcp_NAME_tool``. Usage:
    the last line (``"type": "result"``) has ``stats`` with ``input_tokens``, ``output_tokens``, ``cached`` and per
    model; the session id is on ``init``.

qwen (@qwen-code/qwen-code 0.24) — OpenAI Chat Completions, streamed with ``stream_options.include_usage``
    env ``OPENAI_BASE_URL=http://127.0.0.1:PORT/v1``, ``OPENAI_API_KEY=<anything>``, ``OPENAI_MODEL=MODEL``
    (:func:`qwen_env`); ``qwen --auth-type openai --output-format stream-json --approval-mode yolo PROMPT`` (without
    ``--auth-type`` it stops: "set an auth type"; ``auto-edit`` approves edits only, ``plan`` is read-only). MCP:
    ``--mcp-config FILE`` (``{"mcpServers": {...}}``, as claude's); its tools are deferred behind ``tool_search`` and
    not offered, but a call by the full name ``mcp__NAME__tool`` works at once. The stream is claude's format:
    ``assistant`` lines with ``usage``, a last ``result`` line with the total ``usage`` and ``session_id``.

opencode (opencode-ai 1.18) — OpenAI Chat Completions through its bundled ``@ai-sdk/openai-compatible``
    env ``OPENCODE_CONFIG_CONTENT`` holding the whole config (:func:`opencode_env`): ``provider.X`` with ``npm:
    "@ai-sdk/openai-compatible"``, ``options.baseURL = "http://127.0.0.1:PORT/v1"`` and ``apiKey``, ``models``,
    ``"model": "X/MODEL"``, ``mcp.NAME = {"type": "local", "command": [...]}``; ``OPENCODE_DISABLE_AUTOUPDATE=1``,
    ``OPENCODE_DISABLE_MODELS_FETCH=1`` (no models.dev download). ``opencode run --format json PROMPT``: ``run`` allows
    edits, bash and MCP tools without asking. ``--agent plan`` denies edits but still runs bash (a command can write):
    for analysis give ``"permission": {"edit": "deny", "bash": "deny"}``, which takes both tools away (MCP tools stay).
    It first asks for a title in a side request without tools (the fake answers it with a text). MCP tools are named
    ``NAME_tool``. It costs about 8 s of CPU per run (a Bun binary). Usage: every ``step_finish`` line has
    ``part.tokens`` (``input``, ``output``, ``cache.read``) and ``part.cost``; ``sessionID`` on every line.

mcp-inspector-cli (@modelcontextprotocol/inspector-cli 1.0.x) — a standard MCP client, no model
    ``mcp-inspector-cli --cli COMMAND ARGS... --method tools/list`` (or ``--method tools/call --tool-name NAME
    --tool-arg key=value``) prints the JSON answer. Run it with the working directory in tests/agents/node_modules
    (:data:`INSPECTOR_CWD`): 1.0.3 looks for its own package.json relative to the working directory and fails ("Cannot
    find module '…/@modelcontextprotocol/package.json'") anywhere else. It warns on stderr that inspector v1 is
    deprecated (v2 is ``@modelcontextprotocol/inspector``).

A script names an MCP tool as claude does (``mcp__stepline__finish``); the fakes send the call under the name the
CLI at hand offers (:func:`fakes._script.offered_name`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fakes.policy import Call, Conversation, Play

#: Where scripts/agents.sh installs the pinned CLIs.
BIN = Path(__file__).resolve().parents[1] / "agents" / "node_modules" / ".bin"
#: The working directory mcp-inspector-cli must run in (it finds its package.json from there).
INSPECTOR_CWD = BIN.parent


def binary(name: str) -> Path:
    """The installed CLI ``name``; skips the test (saying why and how to get it) when it is not installed."""
    path = BIN / name
    if not path.exists():
        pytest.skip(f"the real `{name}` CLI is not installed in {BIN}: run scripts/agents.sh (needs npm and the "
                    "registry)")
    return path


def environment(home: Path, **extra: str) -> dict[str, str]:
    """A clean environment for a real CLI: ``home`` as HOME and every XDG folder inside it, PATH with the CLIs
    first, the locale, and ``extra``; nothing else of the caller's (no API keys, no config locations). Creates
    ``home``."""
    home.mkdir(parents=True, exist_ok=True)
    env = {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}", "HOME": str(home),
           "LANG": "C.UTF-8", "TERM": "dumb", "NO_COLOR": "1",
           **{f"XDG_{kind}_HOME": str(home / f".xdg-{kind.lower()}") for kind in ("CONFIG", "DATA", "CACHE", "STATE")}}
    return {**env, **extra}


def claude_env(home: Path, base_url: str) -> dict[str, str]:
    """The environment that points ``claude`` at a :class:`~fakes.fake_anthropic.FakeAnthropic` at ``base_url``."""
    return environment(home, ANTHROPIC_BASE_URL=base_url, ANTHROPIC_API_KEY="sk-ant-fake",
                       CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")


def codex_env(home: Path, base_url: str, mcp: dict[str, list[str]] | None = None) -> dict[str, str]:
    """The environment (and ``home/.codex/config.toml``) that points ``codex`` at a
    :class:`~fakes.fake_openai.FakeOpenAI` at ``base_url``; ``mcp`` maps server names to their command lines."""
    lines = ['model = "fake-gpt"', 'model_provider = "fake"', "[model_providers.fake]", 'name = "fake"',
             f"base_url = {json.dumps(base_url)}", 'wire_api = "responses"', 'env_key = "FAKE_OPENAI_KEY"']
    for name, argv in (mcp or {}).items():
        lines += [f"[mcp_servers.{name}]", f"command = {json.dumps(argv[0])}", f"args = {json.dumps(argv[1:])}",
                  "required = true", 'default_tools_approval_mode = "approve"']
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    (home / ".codex" / "config.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return environment(home, FAKE_OPENAI_KEY="sk-fake")


def gemini_env(home: Path, base_url: str, mcp: dict[str, list[str]] | None = None) -> dict[str, str]:
    """The environment (and ``home/.gemini/settings.json``) that points ``gemini`` at a
    :class:`~fakes.fake_gemini.FakeGemini` at ``base_url``; ``mcp`` maps server names to their command lines."""
    settings: dict[str, object] = {"security": {"auth": {"selectedType": "gemini-api-key"}}}
    if mcp:
        settings["mcpServers"] = {name: {"command": argv[0], "args": argv[1:]} for name, argv in mcp.items()}
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
    return environment(home, GEMINI_API_KEY="fake-key", GOOGLE_GEMINI_BASE_URL=base_url)


def qwen_env(home: Path, base_url: str) -> dict[str, str]:
    """The environment that points ``qwen --auth-type openai`` at a :class:`~fakes.fake_openai.FakeOpenAI` at
    ``base_url`` (MCP servers come with ``--mcp-config``)."""
    return environment(home, OPENAI_API_KEY="sk-fake", OPENAI_BASE_URL=base_url, OPENAI_MODEL="fake-gpt",
                       QWEN_CODE_SUPPRESS_YOLO_WARNING="1")


def opencode_env(home: Path, base_url: str, mcp: dict[str, list[str]] | None = None) -> dict[str, str]:
    """The environment that points ``opencode`` at a :class:`~fakes.fake_openai.FakeOpenAI` at ``base_url``, its
    whole configuration in ``OPENCODE_CONFIG_CONTENT``; ``mcp`` maps server names to their command lines."""
    config = {
        "provider": {"fake": {"npm": "@ai-sdk/openai-compatible", "name": "Fake",
                              "options": {"baseURL": base_url, "apiKey": "sk-fake"},
                              "models": {"fake-gpt": {"name": "Fake GPT"}}}},
        "model": "fake/fake-gpt",
        "mcp": {name: {"type": "local", "command": argv, "enabled": True} for name, argv in (mcp or {}).items()},
    }
    return environment(home, OPENCODE_CONFIG_CONTENT=json.dumps(config), OPENCODE_DISABLE_AUTOUPDATE="1",
                       OPENCODE_DISABLE_MODELS_FETCH="1")


def turns(*answers: list[Call]) -> Play:
    """A fake model that gives ``answers`` in order, one per turn of the conversation (its tool results come
    back before the next), and then ends the turn; a request of a side conversation is one the CLI makes
    without tools (a title, a summary): it gets no tool call either."""

    def play(conversation: Conversation) -> list[Call]:
        if not conversation.tools or conversation.turns >= len(answers):
            return []
        return answers[conversation.turns]

    return play
