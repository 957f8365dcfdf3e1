"""ToolPolicy: what tools may run and how, as the runtime configuration states it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from stepline._paths import escape
from stepline.model import Risk
from stepline.time import DEFAULT_TIMEZONE

__all__ = ["ToolPolicy"]


class ToolPolicy(BaseModel):
    """What tools may run and how (embedded in the runtime configuration as ``tools:``).

    An empty ``allowlist`` allows every registered tool; ``blocklist`` always wins. Only idempotent tools are
    retried, and only on retryable errors (including timeouts), at most ``max_retries`` times. Code a tool runs
    (:attr:`ToolSpec.code`) must really be inside the project, or under one of ``allowed_paths``.
    """

    model_config = ConfigDict(extra="forbid")

    allowlist: list[str] = Field(default_factory=list)
    blocklist: list[str] = Field(default_factory=list)
    timeout_seconds: float = Field(default=60.0, gt=0)
    high_requires_approval: bool = True
    medium_requires_approval: bool = False
    max_retries: int = Field(default=2, ge=0, le=10)
    retry_backoff_seconds: float = Field(default=0.5, ge=0)
    max_output_bytes: int = Field(default=65_536, gt=0, description="stdout/stderr kept per call")
    default_timezone: str = Field(default=DEFAULT_TIMEZONE, description="getCurrentTime without a timezone")
    allowed_paths: list[str] = Field(default_factory=list, description="folders outside the project whose code "
                                     "a tool may run (runScript); symlinks are followed before the check")

    def refusal(self, name: str) -> str | None:
        """Return why ``name`` may not run under this policy, or ``None`` when it may."""
        if name in self.blocklist:
            return f"tool {name!r} is blocklisted"
        if self.allowlist and name not in self.allowlist:
            return f"tool {name!r} is not in the allowlist ({', '.join(self.allowlist)})"
        return None

    def code_refusal(self, path: str, project_root: str) -> str | None:
        """Why the code file ``path`` (relative to the project root, or absolute) may not run, or None: its real
        path (symlinks followed) must be inside the project or under an allowed path."""
        found = escape(project_root, path, allowed=self.allowed_paths)
        if found is None:
            return None
        return (f"{path} is outside the project (it is {found.real}): code from there runs only from a folder "
                "config/runtime.yaml allows (tools.allowed_paths)")

    def requires_approval(self, risk: Risk) -> bool:
        """Say whether a call of this risk must wait for a person's approval."""
        return (risk == "high" and self.high_requires_approval) or (
            risk == "medium" and self.medium_requires_approval)
