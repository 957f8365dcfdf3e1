"""Path confinement, the one implementation (stepline._paths): each way out of a root is refused, and what
stays inside resolves to the real path the caller then opens."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stepline._paths import confine, escape, inside, link_out
from stepline.errors import OutsideRootError


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A project with a folder, a link inside it, a file link out and a folder link out."""
    project = tmp_path / "project"
    (project / "docs").mkdir(parents=True)
    (project / "docs" / "a.md").write_text("# A\n", encoding="utf-8")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("top secret\n", encoding="utf-8")
    (project / "inside-link.md").symlink_to(project / "docs" / "a.md")
    (project / "leak.txt").symlink_to(tmp_path / "outside" / "secret.txt")
    (project / "elsewhere").symlink_to(tmp_path / "outside", target_is_directory=True)
    return project


def test_a_path_inside_resolves_to_its_real_path(root: Path) -> None:
    """Relative, absolute, not yet existing, a '..' that stays inside, a link that stays inside."""
    real = root.resolve()
    assert confine(root, "docs/a.md") == real / "docs" / "a.md"
    assert confine(root, root / "docs" / "a.md") == real / "docs" / "a.md"
    assert confine(root, "new/b.md") == real / "new" / "b.md"
    assert confine(root, "docs/../docs/a.md") == real / "docs" / "a.md"
    assert confine(root, "inside-link.md") == real / "docs" / "a.md"


@pytest.mark.parametrize("path", ["../outside/secret.txt", "docs/../../outside/secret.txt", "/etc/passwd"])
def test_a_path_outside_as_written_is_refused(root: Path, path: str) -> None:
    with pytest.raises(OutsideRootError, match=r"is outside the project root") as caught:
        confine(root, path)
    assert caught.value.exit_code == 4


@pytest.mark.parametrize("path", ["leak.txt", "elsewhere/secret.txt", "elsewhere/new.txt", "elsewhere",
                                  "elsewhere/../outside/secret.txt"])
def test_a_path_that_a_symlink_leads_out_is_refused(root: Path, path: str) -> None:
    """A file link, a folder link (an existing file under it or a new one), and a '..' taken after the link,
    as the system takes it (as written it is project/outside/secret.txt)."""
    with pytest.raises(OutsideRootError, match="through a symlink"):
        confine(root, path)
    found = escape(root, path)
    assert found is not None and found.symlink and not found.real.is_relative_to(root.resolve())
    assert inside(root, path) is None and link_out(root / path, root) == found.real


def test_a_dangling_link_out_is_refused(root: Path, tmp_path: Path) -> None:
    """A link to a file that does not exist yet outside: a write would create it out there."""
    (root / "later").symlink_to(tmp_path / "not-yet.txt")
    assert escape(root, "later") is not None and escape(root, "later").symlink  # type: ignore[union-attr]


def test_allowed_roots_admit_paths_under_them(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    assert confine(root, "../outside/secret.txt", allowed=[outside]) == outside.resolve() / "secret.txt"
    assert confine(root, "leak.txt", allowed=[outside]) == outside.resolve() / "secret.txt"
    with pytest.raises(OutsideRootError):
        confine(root, "/etc/passwd", allowed=[outside])


def test_as_written_only(root: Path) -> None:
    """follow=False judges the path as written (a journal's record): a link is not followed, '..' is."""
    assert escape(root, "leak.txt", follow=False) is None
    assert escape(root, "../x", follow=False) is not None
    assert escape(root, str(root / ".." / "x"), follow=False) is not None


def test_a_root_given_through_a_symlink(root: Path, tmp_path: Path) -> None:
    """The root as a link to the project: paths written under either name are inside."""
    alias = tmp_path / "alias"
    alias.symlink_to(root, target_is_directory=True)
    assert confine(alias, "docs/a.md") == root.resolve() / "docs" / "a.md"
    assert confine(alias, root / "docs" / "a.md") == root.resolve() / "docs" / "a.md"
    assert escape(alias, os.path.join(alias, "leak.txt")) is not None
