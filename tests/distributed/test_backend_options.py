"""``--backend``/``--ray-address`` and ``runtime.backend``: a wrong choice is one clear line and a usage exit
code, before any run is created; ``local`` stays the default and imports no Ray."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from stepline.interfaces.cli._app import run_cli


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "Traceback" not in err[0], err
    return err[0]


@pytest.mark.parametrize(("args", "says"), [
    (["--backend", "spark"], "unknown backend 'spark'"),
    (["--ray-address", "127.0.0.1:6379"], "--ray-address goes with --backend ray"),
])
def test_a_wrong_backend_option_is_a_usage_error_and_no_run_is_created(
        project: Path, write_workflow: Callable[..., Path], capsys: pytest.CaptureFixture[str],
        args: list[str], says: str) -> None:
    """A backend that does not exist, or an address without the Ray backend: exit 2, nothing written."""
    path = write_workflow([{"id": "a"}])
    assert run_cli(["run", str(path), "-C", str(project), "-q", *args]) == 2
    assert says in _one_line_error(capsys)
    assert not (project / ".stepline" / "runs").exists() or not any((project / ".stepline" / "runs").iterdir())


def test_a_wrong_runtime_backend_names_the_config_file_and_line(
        project: Path, write_workflow: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    """runtime.backend is checked with the rest of config/runtime.yaml (file:line, exit 4)."""
    path = write_workflow([{"id": "a"}])
    (project / "config").mkdir()
    (project / "config" / "runtime.yaml").write_text("runtime:\n  backend: spark\n", encoding="utf-8")
    assert run_cli(["run", str(path), "-C", str(project), "-q"]) == 4
    line = _one_line_error(capsys)
    assert "runtime.yaml:2" in line and "runtime.backend" in line


def test_the_local_backend_runs_without_importing_ray(project: Path, write_workflow: Callable[..., Path]) -> None:
    """The default backend never imports Ray (a fresh interpreter runs a workflow; ray is not in sys.modules)."""
    path = write_workflow([{"id": "a"}])
    code = ("import sys; from stepline.interfaces.cli._app import run_cli; "
            f"rc = run_cli(['run', {str(path)!r}, '-C', {str(project)!r}, '-q']); "
            "print(rc, 'ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split()[-2:] == ["0", "False"], out.stderr


def test_a_ray_address_nothing_answers_on_is_refused_before_a_run_is_created(
        project: Path, write_workflow: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    """An unreachable cluster is one line naming the address at once (Ray would retry it for minutes)."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'stepline[ray]')")
    import socket

    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens on it
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    path = write_workflow([{"id": "a"}])
    assert run_cli(["run", str(path), "-C", str(project), "-q", "--backend", "ray",
                    "--ray-address", f"127.0.0.1:{port}"]) == 2
    assert f"cannot reach the Ray cluster at 127.0.0.1:{port}" in _one_line_error(capsys)
    assert not (project / ".stepline" / "runs").exists() or not any((project / ".stepline" / "runs").iterdir())


def test_an_executor_that_talks_to_this_terminal_is_refused_on_ray_before_a_run_is_created(
        project: Path, write_workflow: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    """The human executor cannot work from a Ray worker: one line, exit 2, no run left behind."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'stepline[ray]')")
    path = write_workflow([{"id": "a"}])
    assert run_cli(["run", str(path), "-C", str(project), "-q", "--backend", "ray", "-e", "human"]) == 2
    assert "executor 'human' speaks with the person at this terminal" in _one_line_error(capsys)
    assert not (project / ".stepline" / "runs").exists() or not any((project / ".stepline" / "runs").iterdir())


@pytest.mark.corpus
@pytest.mark.parametrize(("args", "says"), [
    (["--backend", "spark"], "unknown backend 'spark'"),
    (["--ray-address", "127.0.0.1:6379"], "--ray-address goes with --backend ray"),
])
def test_a_wrong_backend_option_of_the_sprint_loop_is_a_usage_error_before_anything_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], says: str) -> None:
    """`stepline sprint run` checks --backend/--ray-address as `stepline run` does: exit 2, no loop saved, no run."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sprint"))
    from sprint_kit import BMAD, make_project

    if not BMAD.is_dir():
        pytest.skip(f"no BMAD release at {BMAD}")
    root = make_project(tmp_path / "calc")
    assert run_cli(["sprint", "run", "-C", str(root), "-q", *args]) == 2
    assert says in _one_line_error(capsys)
    assert not (root / ".stepline").exists()
