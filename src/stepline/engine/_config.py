"""Runtime configuration: ``config/runtime.yaml`` in the project root, or the file ``--config`` names.

An annotated example ships as ``examples/runtime.yaml``. Every key is optional; unknown keys are errors so a
typo does not silently change behaviour.
"""

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stepline._yaml import find_yaml_line, load_yaml_text
from stepline.context import TelisConfig
from stepline.errors import ConfigError
from stepline.executors import DEFAULT_PRICES, Price, PriceTable
from stepline.formats import read_text
from stepline.guardrails import GuardrailPolicy
from stepline.time import DEFAULT_TIMEZONE

__all__ = ["HitlPolicy", "PricesSection", "RuntimeConfig", "load_runtime_config"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RuntimeSection(_Section):
    """Where runs are stored and how long and how often steps may run."""

    storage_root: str = ".stepline/runs"
    max_retries: int = Field(default=0, ge=0)
    step_timeout_seconds: float = Field(default=1800.0, gt=0)
    max_step_visits: int = Field(default=25, ge=1, description="a goto loop revisiting a step more often fails")
    concurrency: int = Field(default=4, ge=1)
    backend: Literal["local", "ray"] = Field(default="local", description="where executor work runs (ray: a cluster)")
    ray_address: str | None = Field(default=None, description="the Ray cluster to join (None: RAY_ADDRESS or local)")


class RiskPolicy(_Section):
    """Which tool risks need a person's approval before the tool runs."""

    high_requires_approval: bool = True
    medium_requires_approval: bool = False


class ToolsSection(_Section):
    """The tool pipeline's allow/block lists, timeout and risk gate."""

    allowlist: list[str] = Field(default_factory=list)
    blocklist: list[str] = Field(default_factory=list)
    timeout_seconds: float = Field(default=60.0, gt=0)
    risk_policy: RiskPolicy = Field(default_factory=RiskPolicy)
    allowed_paths: list[str] = Field(default_factory=list, description="folders outside the project whose code "
                                     "runScript may run")


class HitlPolicy(_Section):
    """Seed 004 HITL policy: which steps block for a person beyond ``human_gate: required``."""

    required_phases: list[str] = Field(default_factory=list)
    conditional_phases: list[str] = Field(default_factory=list)
    high_risk_keywords: list[str] = Field(default_factory=list)
    conditional_keywords: list[str] = Field(default_factory=list)
    conditional_required: bool = False
    recommended_required: bool = False


class HitlSection(_Section):
    """How people are reached: ``auto`` asks in a terminal when there is one, else blocks the run."""

    mode: Literal["auto", "interactive", "non-interactive"] = "auto"
    policy: HitlPolicy = Field(default_factory=HitlPolicy)


class TimeSection(_Section):
    """The timezone getCurrentTime uses when a call names none."""

    default_timezone: str = DEFAULT_TIMEZONE


class PromptsSection(_Section):
    """What a model request carries (SPEC R-X7)."""

    full_step_text: bool = Field(default=False, description="send step files whole, control prose included (the "
                                 "menu, next-step loading, frontmatter rules the runtime owns)")


class ModelPrice(_Section):
    """Dollars per million tokens; a cache read or write without its own price costs ``input``'s."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_read: float | None = Field(default=None, ge=0)
    cache_write: float | None = Field(default=None, ge=0)

    def price(self) -> Price:
        """As the executors weigh with it."""
        return Price(self.input, self.output, self.cache_read, self.cache_write)


class PricesSection(_Section):
    """What tokens cost, for ``stepline cost`` and the budgets: a model's price is the one under its name (or the
    longest name it starts with), these over the dated defaults; ``fallback`` for any other model (none: unknown)."""

    models: dict[str, ModelPrice] = Field(default_factory=dict)
    fallback: ModelPrice | None = None
    defaults: bool = Field(default=True, description="start from stepline's dated list prices of the main models")
    as_of: str | None = Field(default=None, description="when these prices were taken (said next to the figures)")

    def table(self) -> PriceTable:
        """The price table these settings make."""
        base = DEFAULT_PRICES if self.defaults else PriceTable()
        mine = {name: price.price() for name, price in self.models.items()}
        as_of = self.as_of or (base.as_of if not mine else None)
        return PriceTable({**base.models, **mine}, None if self.fallback is None else self.fallback.price(), as_of)


class RuntimeConfig(_Section):
    """The whole runtime configuration."""

    runtime: RuntimeSection = Field(default_factory=RuntimeSection)
    tools: ToolsSection = Field(default_factory=ToolsSection)
    hitl: HitlSection = Field(default_factory=HitlSection)
    guardrails: GuardrailPolicy = Field(default_factory=GuardrailPolicy)
    time: TimeSection = Field(default_factory=TimeSection)
    executors: dict[str, dict[str, Any]] = Field(default_factory=dict)
    prompts: PromptsSection = Field(default_factory=PromptsSection)
    telis: TelisConfig = Field(default_factory=TelisConfig)  # TELIS context: shards, retrieval, language servers
    prices: PricesSection = Field(default_factory=PricesSection)
    source: str | None = Field(default=None, exclude=True)


def load_runtime_config(project_root: Path, path: Path | None = None) -> RuntimeConfig:
    """Load ``path`` (or ``<project_root>/config/runtime.yaml`` when present) into a :class:`RuntimeConfig`."""
    if path is None:
        path = project_root / "config" / "runtime.yaml"
        if not path.is_file():
            return RuntimeConfig()
    elif not path.is_file():
        raise ConfigError("config file not found", path=str(path), hint="pass an existing --config FILE")
    text = read_text(path)
    data = load_yaml_text(text, path=str(path), error=ConfigError) or {}
    if not isinstance(data, dict):
        raise ConfigError("the runtime config must be a mapping of sections", path=str(path), line=1)
    try:
        config = RuntimeConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{where}: {first['msg']}", path=str(path), line=find_yaml_line(text, tuple(first["loc"])),
                          hint="see examples/runtime.yaml for every key") from None
    config.source = str(path)
    return config
