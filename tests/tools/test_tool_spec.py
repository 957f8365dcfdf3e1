"""ToolSpec checks, the registry, the policy, and the public surface of the tools package."""

from __future__ import annotations

import inspect

import pytest
import tool_test_handlers as handlers

import stepline.evidence
import stepline.guardrails
import stepline.tools
from stepline.errors import ToolError
from stepline.tools import ToolPolicy, ToolRegistry, ToolSpec, default_registry


def spec(name: str = "mine", **kw: object) -> ToolSpec:
    return ToolSpec(name=name, description="d", handler=handlers.touch, **kw)  # type: ignore[arg-type]


class TestToolSpec:
    """A spec is checked when it is made, so a broken tool fails at registration, not mid-run."""

    def test_lambda_handler_is_rejected(self) -> None:
        """A handler that cannot be sent to a worker process is refused with the fix."""
        with pytest.raises(ToolError, match="module-level function"):
            ToolSpec(name="x", description="d", handler=lambda args, ctx: None)

    @pytest.mark.parametrize("kw", [{}, {"handler": handlers.touch, "command": lambda args: ["true"]}])
    def test_a_tool_is_a_handler_or_a_command(self, kw: dict[str, object]) -> None:
        """Exactly one of ``handler`` and ``command``: the spec says how the tool runs."""
        with pytest.raises(ToolError, match="either a handler or a command"):
            ToolSpec(name="x", description="d", **kw)  # type: ignore[arg-type]

    def test_a_command_may_be_a_lambda(self) -> None:
        """A command's argv is built in the engine's process, so it need not be picklable."""
        assert ToolSpec(name="x", description="d", command=lambda args: ["true"]).handler is None

    def test_invalid_schema_is_rejected(self) -> None:
        """An args_schema that is not valid JSON Schema is refused."""
        with pytest.raises(ToolError, match="not a valid JSON Schema"):
            spec(args_schema={"type": "nonsense"})

    @pytest.mark.parametrize("kw", [{"name": "has space"}, {"risk": "extreme"}, {"timeout_seconds": 0}])
    def test_bad_fields_are_rejected(self, kw: dict[str, object]) -> None:
        """Names with spaces, unknown risks and non-positive timeouts are refused."""
        with pytest.raises(ToolError):
            spec(**kw)  # type: ignore[arg-type]


class TestRegistry:
    """Tools are registered and found by name; third parties register the same way as built-ins."""

    def test_third_party_tool_joins_the_builtins(self) -> None:
        """A new tool registers next to the built-ins and is returned by name."""
        registry = default_registry()
        registry.register(spec())
        assert registry.get("mine").handler is handlers.touch and "mine" in registry

    def test_duplicate_needs_replace(self) -> None:
        """Registering a name twice is an error unless ``replace`` is set."""
        registry = ToolRegistry([spec()])
        with pytest.raises(ToolError, match="already registered"):
            registry.register(spec())
        registry.register(spec(risk="high"), replace=True)
        assert registry.get("mine").risk == "high"

    @pytest.mark.parametrize(("asked", "suggested"), [("readfile", "readFile"), ("getCurentTime", "getCurrentTime")])
    def test_unknown_name_suggests(self, asked: str, suggested: str) -> None:
        """An unknown name gets "Did you mean …?" with the closest known name (case slips included)."""
        with pytest.raises(ToolError, match=f"did you mean '{suggested}'"):
            default_registry().get(asked)

    def test_registries_are_independent(self) -> None:
        """default_registry() returns a new registry each time: no global state to leak between runs."""
        first = default_registry()
        first.register(spec())
        assert "mine" not in default_registry()


def test_policy_defaults() -> None:
    """By default everything is allowed, high risk needs approval and medium does not."""
    policy = ToolPolicy()
    assert policy.refusal("anything") is None
    assert policy.requires_approval("high") and not policy.requires_approval("medium")
    assert not policy.requires_approval("low")


@pytest.mark.parametrize("module", [stepline.tools, stepline.guardrails, stepline.evidence])
def test_public_surface(module: object) -> None:
    """``__all__`` has no duplicates, every name resolves, and nothing public is left out of it (ruff sorts it)."""
    names = module.__all__  # type: ignore[attr-defined]
    assert len(set(names)) == len(names)
    for name in names:
        assert getattr(module, name) is not None
    defined = {name for name, value in vars(module).items()
               if not name.startswith("_") and not inspect.ismodule(value)}
    assert defined - {"annotations", "TYPE_CHECKING", "Any"} <= set(names)
