"""Why an agent that did not finish failed, when the reason is not the work's: a permission, trust or login
prompt, a rate limit or quota, an endpoint it cannot reach (a stall is seen while it runs). Read from what the CLI
said last — its error, its stderr, the last lines of its stream — never from the work's own output in between."""

from __future__ import annotations

import re

from stepline.errors import AgentEnvironmentError, AgentNeedsPermission, AgentRateLimited, AgentUnreachable
from stepline.executors.cli_agents._spec import AgentCli

__all__ = ["classify"]

_KINDS: tuple[tuple[type[AgentEnvironmentError], re.Pattern[str]], ...] = (
    (AgentRateLimited, re.compile(
        r"\b429\b|rate[ _-]?limit|too many requests|quota|usage limit|insufficient_quota|credit balance"
        r"|overloaded|\b529\b|resource[ _]exhausted", re.IGNORECASE)),
    (AgentNeedsPermission, re.compile(
        r"\b401\b|\b403\b|unauthori[sz]ed|forbidden|invalid[ _-]?(x-)?api[ _-]?key|api key (is )?(missing|not set)"
        r"|/login|not logged in|log ?in (again|first|required)|authenticat|auth(entication)? (type|method)"
        r"|requires? (your )?(approval|permission)|permission prompt|approval (is )?required|not trusted",
        re.IGNORECASE)),
    (AgentUnreachable, re.compile(
        r"\b(econnrefused|econnreset|enotfound|etimedout|eai_again)\b|connection (refused|reset|error|closed)"
        r"|could not connect|cannot connect|failed to connect|network error|fetch failed|getaddrinfo"
        r"|error sending request|stream disconnected|unable to connect|connect(ion)? timed? ?out", re.IGNORECASE)),
)


def classify(cli: AgentCli, said: str) -> tuple[type[AgentEnvironmentError], str | None] | None:
    """The error class for what the agent said last (``said``), and the fix when the CLI's setup is known to lack
    one (``cli.setup_problems``); None for a failure of the work itself."""
    lowered = said.lower()
    for fragment, fix in cli.setup_problems:
        if fragment in lowered:
            return AgentNeedsPermission, fix
    for cls, pattern in _KINDS:
        if pattern.search(said):
            return cls, None
    return None
