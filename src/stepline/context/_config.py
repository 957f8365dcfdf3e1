"""What a step asks of TELIS: its ``telis_*`` inputs (seed 004), the runtime config's defaults, and the rules
that give TELIS inputs to steps of workflows that were not written with them (BMAD, CCW).

A step's own ``telis_*`` inputs win; a rule of ``telis.inputs`` (the first whose ``formats`` match) fills
what they leave out; ``telis.*`` defaults fill the rest. A rule names *fields* by dotted paths into:

* ``step``: the StepSpec (``step.name``, ``step.description``, ``step.inputs.X``, ``step.meta.X``);
* ``workflow``: the WorkflowSpec (``workflow.meta.input_file_patterns`` of a BMAD workflow);
* ``variables``: the run's variables;
* ``file``: the JSON or YAML file that ``load`` names (``load: step.meta.task_json`` reads a CCW task, so
  ``file.context.focus_paths`` and ``file.flow_control.target_files`` are its fields).

Every text found under a field (a list or mapping is walked) has the run's variables put in. ``query``
fields are joined into ``telis_query``; ``documents`` fields are project paths, folders or globs whose files
are sharded and searched for the step, ranked before the project's docs.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from stepline.context._tiers import TIERS, Tier
from stepline.errors import ConfigError

__all__ = ["TelisConfig", "TelisInputRule", "TelisRequest", "request_for_step"]

Method = Literal["hover", "signatureHelp"]
#: Puts the run's variables into a text.
Render = Callable[[str], str]


class TelisInputRule(BaseModel):
    """One rule of ``telis.inputs``: TELIS inputs for the steps of workflows of ``formats``."""

    model_config = ConfigDict(extra="forbid")

    formats: list[str] = Field(default_factory=list, description="workflow formats (bmad-legacy, ccw, …); "
                                                                 "empty: every format")
    load: str | None = Field(default=None, description="a field naming a JSON or YAML file, read as `file`")
    query: list[str] = Field(default_factory=lambda: ["step.name", "step.description"],
                             description="fields whose texts, joined, are the step's telis_query")
    documents: list[str] = Field(default_factory=list, description="fields whose texts are project paths, "
                                                                   "folders or globs to shard and search")
    set: dict[str, Any] = Field(default_factory=dict, description="telis_* inputs given as they are")


class TelisConfig(BaseModel):
    """``telis:`` of config/runtime.yaml: where shards come from and the defaults of every step's retrieval."""

    model_config = ConfigDict(extra="forbid")

    shards_file: str | None = Field(default=None, description="a shards YAML file (default: config/shards.yaml "
                                                              "when it exists)")
    docs: list[str] = Field(default_factory=lambda: ["docs/**/*.md", "*.md"],
                            description="globs of markdown documents, split by headings into shards")
    split_level: int = Field(default=3, ge=1, le=6, description="headings of this level or less start a shard")
    budget_tokens: int = Field(default=4000, ge=1, description="tokens a step's context may hold")
    shard_limit: int = Field(default=5, ge=0)
    min_score: float = 0.0
    phase_tiers: list[Tier] = Field(default_factory=lambda: list(TIERS))
    max_phase: int = Field(default=3, ge=1)
    full_tokens: int = Field(default=4000, ge=2000, description="a full shard is cut beyond this many tokens")
    cache_ttl_seconds: float = Field(default=30.0, ge=0, description="how long shards and server answers "
                                                                     "are reused")
    lsp_timeout_seconds: float = Field(default=30.0, gt=0)
    servers: dict[str, list[str]] = Field(default_factory=dict, description="language -> server command")
    inputs: list[TelisInputRule] = Field(default_factory=list)


@dataclass(slots=True)
class TelisRequest:
    """Everything TELIS resolves for one step, its inputs checked and its defaults filled in."""

    query: str | None = None
    language: str | None = None
    document_path: str | None = None
    document_text: str | None = None
    method: Method = "hover"
    line: int | None = None
    character: int | None = None
    shard_limit: int = 5
    min_score: float = 0.0
    max_phase: int = 3
    phase_tiers: list[Tier] = field(default_factory=lambda: list(TIERS))
    budget_tokens: int = 4000
    documents: list[str] = field(default_factory=list)

    @property
    def wants_lsp(self) -> bool:
        """Whether a language server is asked (a document and a position)."""
        return (self.document_path is not None or self.document_text is not None) and self.line is not None

    def describe(self) -> dict[str, Any]:
        """The request as the context records it."""
        return {"query": self.query, "shard_limit": self.shard_limit, "min_score": self.min_score,
                "max_phase": self.max_phase, "phase_tiers": list(self.phase_tiers),
                "budget_tokens": self.budget_tokens, "documents": list(self.documents)}


_KEYS = ("telis_query", "telis_language", "telis_document_path", "telis_document_text", "telis_method",
         "telis_line", "telis_character", "telis_shard_limit", "telis_min_score", "telis_max_phase",
         "telis_phase_tiers", "telis_budget_tokens", "telis_documents")


def request_for_step(step: dict[str, Any], workflow: dict[str, Any], variables: dict[str, Any],
                     config: TelisConfig, *, render: Render, project_root: Path) -> TelisRequest | None:
    """The step's TELIS request, or None when neither its inputs nor a rule ask for context.

    ``step`` and ``workflow`` are the specs as plain data; ``render`` puts the run's variables into a text.

    Raises:
        ConfigError: a ``telis_*`` input has a value of the wrong kind (the message names the step and key).
    """
    inputs: dict[str, Any] = {k: v for k, v in (step.get("inputs") or {}).items() if k.startswith("telis_")}
    rule = next((r for r in config.inputs if not r.formats or workflow.get("format") in r.formats), None)
    if not inputs and rule is None:
        return None
    step_id = str(step.get("id"))
    if rule is not None:
        scope: dict[str, Any] = {"step": step, "workflow": workflow, "variables": variables}
        if rule.load:
            scope["file"] = _load(_texts(_field(scope, rule.load), render), project_root)
        mapped: dict[str, Any] = {k: v for k, v in rule.set.items() if k.startswith("telis_")}
        query = " ".join(text for name in rule.query for text in _texts(_field(scope, name), render)).strip()
        if query:
            mapped["telis_query"] = query
        documents = [text for name in rule.documents for text in _texts(_field(scope, name), render)]
        if documents:
            mapped["telis_documents"] = documents
        inputs = {**mapped, **inputs}
    unknown = sorted(k for k in inputs if k not in _KEYS)
    if unknown:
        raise ConfigError(f"step {step_id!r}: unknown TELIS input {unknown[0]!r}",
                          hint="the inputs are " + ", ".join(_KEYS))

    def text(key: str) -> str | None:
        value = inputs.get(key)
        if value is None:
            return None
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise ConfigError(f"step {step_id!r}: {key} must be a text, not {type(value).__name__}")
        return str(render(str(value)))

    def number(key: str, default: float, kind: type[int] | type[float]) -> Any:
        value = inputs.get(key)
        if value is None:
            return default
        if isinstance(value, str):
            value = render(value)
        try:
            if isinstance(value, bool):
                raise ValueError
            return kind(value) if kind is float else int(str(value))
        except (TypeError, ValueError):
            raise ConfigError(f"step {step_id!r}: {key} must be {'an integer' if kind is int else 'a number'}, "
                              f"not {value!r}") from None

    tiers = inputs.get("telis_phase_tiers", config.phase_tiers)
    if isinstance(tiers, str):
        tiers = [t.strip() for t in tiers.replace(",", " ").split()]
    if not isinstance(tiers, list) or not tiers or any(t not in TIERS for t in tiers):
        raise ConfigError(f"step {step_id!r}: telis_phase_tiers must list tiers of {', '.join(TIERS)}, "
                          f"not {tiers!r}")
    method = text("telis_method") or "hover"
    if method not in ("hover", "signatureHelp"):
        raise ConfigError(f"step {step_id!r}: telis_method must be hover or signatureHelp, not {method!r}")
    documents = inputs.get("telis_documents") or []
    if isinstance(documents, str):
        documents = [documents]
    line = number("telis_line", -1, int)
    character = number("telis_character", 0, int)
    request = TelisRequest(
        query=text("telis_query"), language=(text("telis_language") or "").lower() or None,
        document_path=text("telis_document_path"), document_text=inputs.get("telis_document_text"),
        method=method,  # type: ignore[arg-type]  # checked just above
        line=line if line >= 0 else None, character=max(0, character),
        shard_limit=number("telis_shard_limit", config.shard_limit, int),
        min_score=number("telis_min_score", config.min_score, float),
        max_phase=max(1, number("telis_max_phase", config.max_phase, int)),
        phase_tiers=list(tiers), budget_tokens=max(0, number("telis_budget_tokens", config.budget_tokens, int)),
        documents=[str(render(str(d))) for d in documents])
    if request.document_text is not None and not isinstance(request.document_text, str):
        raise ConfigError(f"step {step_id!r}: telis_document_text must be a text")
    return request


def _field(scope: dict[str, Any], dotted: str) -> Any:
    """The value at ``dotted`` (``step.meta.task_json``) in ``scope``; None where a part is missing."""
    value: Any = scope
    for part in dotted.split("."):
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


def _texts(value: Any, render: Render) -> list[str]:
    """Every text under ``value`` (lists and mappings walked in order), variables put in, blanks left out."""
    found: list[str] = []
    if isinstance(value, str):
        rendered = str(render(value)).strip()
        if rendered:
            found.append(rendered)
    elif isinstance(value, dict):
        for item in value.values():
            found.extend(_texts(item, render))
    elif isinstance(value, list | tuple):
        for item in value:
            found.extend(_texts(item, render))
    return found


def _load(paths: list[str], project_root: Path) -> Any:
    """The JSON or YAML file a rule's ``load`` names (None when it names none or it is not there)."""
    if not paths:
        return None
    from stepline._yaml import load_yaml_text
    from stepline.formats import read_text

    target = Path(paths[0]) if Path(paths[0]).is_absolute() else project_root / paths[0]
    if not target.is_file():
        return None
    text = read_text(target)
    if target.suffix == ".json":
        try:
            return json.loads(text)
        except ValueError:
            return None
    return load_yaml_text(text, path=str(target), error=ConfigError)
