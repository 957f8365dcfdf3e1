"""``config/sprint.yaml``: how the sprint loop verifies, reviews, retries, isolates and budgets a story.

Every key is optional; an unknown key is an error naming file:line (a typo must not silently change what
"verified" means). An annotated example is in docs/guides/sprint.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stepline._yaml import find_yaml_line, load_yaml_text
from stepline.errors import ConfigError
from stepline.executors import Price
from stepline.formats import read_text

#: The budgets' prices for a model the runtime's price table has none for, unless sprint.yaml names others.
DEFAULT_BUDGET_PRICE = Price(3.0, 15.0, 0.3)

__all__ = ["BudgetLimit", "SprintConfig", "load_sprint_config"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class VerifySection(_Section):
    """The project's own checks, run after every build and before the commit; each must exit 0."""

    commands: list[str] = Field(default_factory=list)
    timeout_seconds: float = Field(default=600.0, gt=0)


class LayerConfig(_Section):
    """A review layer given in the config (replaces the dev skill's layers when any is given)."""

    id: str
    name: str = ""
    instruction: str


class ReviewSection(_Section):
    """Review in fresh contexts: the layers, and whether to review at all."""

    enabled: bool = True
    layers: list[LayerConfig] = Field(default_factory=list)


class RetriesSection(_Section):
    """How many times a stage may be tried for one story before the story is deferred."""

    build: int = Field(default=3, ge=1, description="builds per story (the first and the fixes)")
    review: int = Field(default=2, ge=1, description="review rounds per story")
    agent: int = Field(default=2, ge=0, description="tries again of a build whose agent failed for a reason "
                       "outside the work (stall, rate limit, unreachable endpoint), before a person is asked")


class BudgetLimit(_Section):
    """A limit on what the agents' calls cost, in tokens and/or dollars (cache reads at their price)."""

    tokens: float | None = Field(default=None, gt=0)
    cost_usd: float | None = Field(default=None, gt=0)


class BudgetsSection(_Section):
    """Per story and per loop; ``warn`` reports going past a limit, ``enforce`` defers the story / stops."""

    mode: Literal["warn", "enforce"] = "warn"
    #: What an enforced limit does to a story: ``defer`` it, or ``escalate`` (a person answers defer or continue).
    on_exceeded: Literal["defer", "escalate"] = "defer"
    story: BudgetLimit = Field(default_factory=BudgetLimit)
    run: BudgetLimit = Field(default_factory=BudgetLimit)
    #: Dollars per million tokens, for executors that report tokens but no cost.
    input_per_mtok: float = Field(default=DEFAULT_BUDGET_PRICE.input, ge=0)
    output_per_mtok: float = Field(default=DEFAULT_BUDGET_PRICE.output, ge=0)
    cache_read_per_mtok: float = Field(default=DEFAULT_BUDGET_PRICE.cache_read or 0.0, ge=0)


class CheckpointsSection(_Section):
    """Per-story human gates (``stepline approve RUN``, then ``stepline sprint resume``); a rejection defers."""

    before_build: bool = False
    after_commit: bool = False


class CloseoutSection(_Section):
    """What follows a story's commit: a push to a git remote, and a command per story (a pull request, a CI wait),
    each try's output and exit code journaled; a failure is tried again, then a person decides."""

    remote: str | None = Field(default=None, description="the git remote to push to (a name or a URL)")
    push: Literal["integration", "story"] = Field(
        default="integration", description="the integration branch, or each story's commit as sprint/<story>")
    command: str | None = Field(default=None, description="run in the project per story; {story} {commit} {branch}")
    retries: int = Field(default=1, ge=0)
    retry_wait_seconds: float = Field(default=10.0, ge=0)
    timeout_seconds: float = Field(default=600.0, gt=0)


class SprintConfig(_Section):
    """The whole ``config/sprint.yaml``."""

    verify: VerifySection = Field(default_factory=VerifySection)
    review: ReviewSection = Field(default_factory=ReviewSection)
    retries: RetriesSection = Field(default_factory=RetriesSection)
    budgets: BudgetsSection = Field(default_factory=BudgetsSection)
    checkpoints: CheckpointsSection = Field(default_factory=CheckpointsSection)
    closeout: CloseoutSection | None = None
    isolation: Literal["none", "worktree"] = "none"
    #: Stories built and reviewed at once (``stepline sprint run -j N``); more than 1 needs ``isolation: worktree``.
    max_parallel: int = Field(default=1, ge=1)
    executor: str | None = None
    agent_timeout_seconds: float = Field(default=3600.0, gt=0)
    #: A CLI agent that prints no line and changes no file this long is stopped as stalled (the cli-agent
    #: executor's ``stall_seconds``; unset: the executor's own).
    stall_seconds: float | None = Field(default=None, gt=0)
    #: The wait before the first try again after such a failure (the n-th waits n times as long).
    agent_retry_wait_seconds: float = Field(default=30.0, ge=0)
    #: The loop stops once this many stories in a row ended (not committed) with the same agent failure: the agent
    #: is broken, not the stories.
    stop_after_same_failure: int = Field(default=2, ge=1)


def load_sprint_config(root: Path, path: Path | None = None) -> SprintConfig:
    """``path`` (or ``config/sprint.yaml`` under ``root`` when it exists; defaults otherwise)."""
    target = path or root / "config" / "sprint.yaml"
    if not target.is_file():
        if path is not None:
            raise ConfigError("no such sprint config file", path=str(path))
        return SprintConfig()
    text = read_text(target)
    data = load_yaml_text(text, path=str(target), error=ConfigError) or {}
    if not isinstance(data, dict):
        raise ConfigError("must be a mapping of sections (verify, review, retries, …)", path=str(target), line=1)
    try:
        return SprintConfig.model_validate(data)
    except ValidationError as exc:
        problem = exc.errors()[0]
        keys = tuple(problem["loc"])
        raise ConfigError(f"{'.'.join(str(k) for k in keys)}: {problem['msg']}", path=str(target),
                          line=find_yaml_line(text, keys)) from None
