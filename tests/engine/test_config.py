"""config/runtime.yaml: the annotated example loads, and every mistake is one line with file:line."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepline.engine import load_runtime_config
from stepline.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "runtime.yaml"


def test_the_annotated_example_is_valid_and_read() -> None:
    """Every key of examples/runtime.yaml is accepted and lands where documented."""
    config = load_runtime_config(Path("."), EXAMPLE)
    assert config.runtime.max_retries == 1 and config.tools.blocklist == ["writeFile"]
    assert config.hitl.policy.high_risk_keywords == ["deploy", "migrate"]
    assert config.guardrails.extra_secret_patterns == {"internal_token": "itk_[A-Za-z0-9]{24}"}
    assert config.executors["openai"]["model"] == "gpt-4o-mini"


def test_found_in_the_project_root(tmp_path: Path) -> None:
    """Without --config the project's config/runtime.yaml is used; without one, the defaults."""
    assert load_runtime_config(tmp_path).runtime.concurrency == 4
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "runtime.yaml").write_text("runtime:\n  concurrency: 2\n", encoding="utf-8")
    assert load_runtime_config(tmp_path).runtime.concurrency == 2


@pytest.mark.parametrize(("text", "line", "message"), [
    ("runtime:\n  max_retries: -1\n", 2, "runtime.max_retries"),
    ("runtime:\n  storage_root: x\ntools:\n  risk_policy:\n    high_requires_approval: maybe\n", 5,
     "tools.risk_policy.high_requires_approval"),
    ("hitl:\n  mode: sometimes\n", 2, "hitl.mode"),
    ("runtime:\n  max_retires: 2\n", 2, "max_retires"),
    ("runtime: [unclosed\n", 2, "YAML error"),
    ("guardrails:\n  extra_secret_patterns:\n    bad: '('\n", 2, "not a valid regex"),
])
def test_mistakes_name_the_file_line_and_key(tmp_path: Path, text: str, line: int, message: str) -> None:
    """A wrong value, an unknown key or broken YAML is a ConfigError naming file:line."""
    path = tmp_path / "runtime.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_runtime_config(tmp_path, path)
    assert str(caught.value).startswith(f"{path}:{line}:") and message in str(caught.value)


def test_missing_config_file(tmp_path: Path) -> None:
    """--config naming a file that does not exist is a clear error."""
    with pytest.raises(ConfigError, match="config file not found"):
        load_runtime_config(tmp_path, tmp_path / "nope.yaml")
