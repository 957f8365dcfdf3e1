"""customize.toml resolution: BMAD's merge rules over the team and personal layers, and the central config."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from stepline.errors import ReaderError
from stepline.formats._data import load_toml
from stepline.skills import load_central_config, resolve_customization, structural_merge

from .conftest import CORPUS_V611


class TestMergeRules:
    """The rules customize.toml's header states, one by one."""

    def test_strings_replace(self) -> None:
        """A scalar in the override replaces the default."""
        assert structural_merge({"a": "x", "n": 1}, {"a": "y", "n": 2}) == {"a": "y", "n": 2}

    def test_lists_append(self) -> None:
        """A plain list in the override is appended to the default list, never replacing it."""
        assert structural_merge({"l": ["a", "b"]}, {"l": ["c"]}) == {"l": ["a", "b", "c"]}

    def test_tables_merge_key_by_key(self) -> None:
        """Tables merge recursively; keys only in the base survive."""
        merged = structural_merge({"t": {"a": 1, "u": {"x": 1, "y": 2}}}, {"t": {"b": 2, "u": {"y": 3}}})
        assert merged == {"t": {"a": 1, "b": 2, "u": {"x": 1, "y": 3}}}

    def test_arrays_of_tables_merge_by_id(self) -> None:
        """A matching id replaces the item in place, a new id is appended."""
        base = [{"id": "a", "v": 1}, {"id": "b", "v": 2}]
        merged = structural_merge({"r": base}, {"r": [{"id": "b", "v": 20}, {"id": "c", "v": 3}]})
        assert merged == {"r": [{"id": "a", "v": 1}, {"id": "b", "v": 20}, {"id": "c", "v": 3}]}

    def test_code_is_preferred_to_id(self) -> None:
        """Items carrying both are keyed by code (the agents' roster), as BMAD's resolver does."""
        merged = structural_merge({"r": [{"code": "x", "id": "1", "v": 1}]}, {"r": [{"code": "x", "id": "2", "v": 2}]})
        assert merged == {"r": [{"code": "x", "id": "2", "v": 2}]}

    def test_tables_without_a_common_key_append(self) -> None:
        """When not every item has an id, the arrays simply append."""
        merged = structural_merge({"r": [{"id": "a"}]}, {"r": [{"name": "b"}]})
        assert merged == {"r": [{"id": "a"}, {"name": "b"}]}


def test_team_then_user_layers(mini: Path) -> None:
    """_bmad/custom/<skill>.toml then .user.toml apply over the defaults, and the layers are named in order."""
    skill = mini / "_bmad" / "mini" / "tiny-build"
    custom = mini / "_bmad" / "custom"
    (custom / "tiny-build.toml").write_text(
        '[workflow]\ngreeting = "team"\npersistent_facts = ["Team fact."]\n'
        '[[workflow.checks]]\nid = "tests"\nname = "Tests"\ninstruction = "Run the team tests."\n', encoding="utf-8")
    (custom / "tiny-build.user.toml").write_text('[workflow]\ngreeting = "mine"\n', encoding="utf-8")
    resolved = resolve_customization(skill, mini)
    block = resolved.values["workflow"]
    assert block["greeting"] == "mine"
    assert block["persistent_facts"] == ["file:{project-root}/**/house-rules.md", "Prefer small diffs.", "Team fact."]
    assert [c["instruction"] for c in block["checks"]] == [
        "Run the linter on {skill-root}/references/guide.md.", "Run the team tests."]
    assert [Path(p).name for p in resolved.layers] == ["customize.toml", "tiny-build.toml", "tiny-build.user.toml"]
    assert resolved.block() == "workflow"


def test_a_broken_override_names_its_file_and_line(mini: Path) -> None:
    """A TOML syntax error is one ReaderError with file:line."""
    bad = mini / "_bmad" / "custom" / "tiny-build.toml"
    bad.write_text('[workflow]\ngreeting = "x"\nbroken = [1,\n', encoding="utf-8")
    with pytest.raises(ReaderError) as caught:
        resolve_customization(mini / "_bmad" / "mini" / "tiny-build", mini)
    assert str(bad) in str(caught.value) and "TOML does not parse" in str(caught.value)
    assert caught.value.line is not None


def test_central_config_layers(mini: Path) -> None:
    """config.toml, config.user.toml and the two custom config files merge in that order."""
    (mini / "_bmad" / "custom" / "config.user.toml").write_text('[modules.mini]\nuser_name = "Ada"\n',
                                                               encoding="utf-8")
    central, files = load_central_config(mini, "mini")
    assert central["modules"]["mini"]["user_name"] == "Ada"
    assert central["modules"]["mini"]["work_folder"] == "{project-root}/out/work"
    assert [Path(f).name for f in files] == ["config.toml", "config.user.toml", "config.user.toml"]


@pytest.mark.corpus
def test_same_result_as_bmads_resolver(v611: Path) -> None:
    """For every v6.11.0 skill with overrides in both layers, the merge equals resolve_customization.py's output."""
    custom = v611 / "_bmad" / "custom"
    checked = 0
    for defaults in sorted((v611 / "_bmad").rglob("customize.toml")):
        skill = defaults.parent
        data = load_toml(defaults)
        block = next((k for k, v in data.items() if isinstance(v, dict)), None)
        if block is None:
            continue
        (custom / f"{skill.name}.toml").write_text(
            f'[{block}]\npersistent_facts = ["team fact"]\nextra = "team"\n'
            f'[[{block}.review_layers]]\nid = "blind-hunter"\nname = "Team hunter"\ninstruction = "team"\n',
            encoding="utf-8")
        (custom / f"{skill.name}.user.toml").write_text(f'[{block}]\nextra = "mine"\n', encoding="utf-8")
        ours = resolve_customization(skill, v611).values
        script = v611 / "_bmad" / "scripts" / "resolve_customization.py"
        theirs = subprocess.run([sys.executable, str(script), "--skill", str(skill), "--project-root", str(v611)],
                                capture_output=True, text=True, check=True).stdout
        assert ours == json.loads(theirs), skill.name
        checked += 1
    assert checked >= 30
    assert CORPUS_V611.is_dir()
