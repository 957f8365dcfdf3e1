"""Built-in tools: getCurrentTime, confined file IO, read-only repo inspection, shell."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tool_test_support import process_gone

from stepline.errors import OutsideRootError, SteplineError, ToolError
from stepline.model import ToolCall
from stepline.time import DEFAULT_TIMEZONE, frozen
from stepline.tools import ToolContext, ToolPipeline, ToolPolicy, builtin_tools, default_registry
from stepline.tools._builtin_files import list_files, read_file, write_file
from stepline.tools._builtin_repo import inspect_repo
from stepline.tools._builtin_time import get_current_time


def ctx(root: Path, **kw: Any) -> ToolContext:
    """A context as the pipeline would build it, for calling handlers directly (no worker)."""
    return ToolContext(project_root=str(root), step_id="s1", now=datetime(2026, 1, 1, tzinfo=UTC), **kw)


def call(root: Path, name: str, args: dict[str, Any], policy: ToolPolicy | None = None) -> Any:
    """Run a built-in through the real pipeline, approving any gate."""
    return ToolPipeline(default_registry(), policy).run(
        ToolCall(name=name, args=args), step_id="s1", project_root=root, approvals=lambda g: "approved")


def test_builtins_are_all_registered() -> None:
    """The default registry holds every built-in, each with the risk the spec gives it."""
    risks = {spec.name: spec.risk for spec in builtin_tools()}
    assert risks == {"getCurrentTime": "low", "readFile": "low", "writeFile": "medium", "listFiles": "low",
                     "repo": "low", "shell": "high", "runScript": "medium", "validatePython": "low",
                     "validateJson": "low", "validateYaml": "low", "recordEvidence": "low"}
    assert default_registry().names() == sorted(risks)


class TestGetCurrentTime:
    """getCurrentTime reads the time provider, in an IANA timezone."""

    def test_named_timezone(self, tmp_path: Path) -> None:
        """The frozen instant is returned in the requested timezone."""
        with frozen("2026-07-01T12:00:00+00:00"):
            result = get_current_time({"timezone": "Asia/Tokyo"}, ctx(tmp_path))
        assert result["iso"] == "2026-07-01T21:00:00.000000+09:00" and result["weekday"] == "Wednesday"

    def test_default_timezone_is_configurable(self, tmp_path: Path) -> None:
        """Without a timezone the context's default is used; the policy sets it, else DEFAULT_TIMEZONE."""
        with frozen("2026-07-01T12:00:00+00:00"):
            assert get_current_time({}, ctx(tmp_path))["timezone"] == DEFAULT_TIMEZONE
            configured = call(tmp_path, "getCurrentTime", {}, ToolPolicy(default_timezone="Europe/Paris"))
        assert configured.result["iso"] == "2026-07-01T14:00:00.000000+02:00"

    def test_unknown_timezone_fails_the_call(self, tmp_path: Path) -> None:
        """An unknown zone name is an error that names it."""
        with pytest.raises(SteplineError, match="Mars/Olympus"):
            get_current_time({"timezone": "Mars/Olympus"}, ctx(tmp_path))
        assert "Mars/Olympus" in (call(tmp_path, "getCurrentTime", {"timezone": "Mars/Olympus"}).error or "")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project root with a file inside, a secret outside, and symlinks that lead out."""
    root = tmp_path / "project"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.md").write_text("# A\n", encoding="utf-8")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("top secret", encoding="utf-8")
    (root / "leak.txt").symlink_to(outside / "secret.txt")
    (root / "elsewhere").symlink_to(outside, target_is_directory=True)
    (root / "inside-link.md").symlink_to(root / "docs" / "a.md")
    return root


class TestFileConfinement:
    """File tools refuse every way out of the project root."""

    @pytest.mark.parametrize("path", ["../outside/secret.txt", "docs/../../outside/secret.txt"])
    def test_dotdot_out_is_refused(self, project: Path, path: str) -> None:
        """A ``..`` that leads out of the root is refused (one that lands back inside reads that file)."""
        with pytest.raises(OutsideRootError, match="outside the project root"):
            read_file({"path": path}, ctx(project))
        assert read_file({"path": "docs/../docs/a.md"}, ctx(project))["content"] == "# A\n"

    def test_absolute_path_outside_is_refused(self, project: Path) -> None:
        """An absolute path outside the root is refused."""
        with pytest.raises(OutsideRootError, match="outside the project root"):
            read_file({"path": str(project.parent / "outside" / "secret.txt")}, ctx(project))

    def test_absolute_path_inside_is_allowed(self, project: Path) -> None:
        """An absolute path that is inside the root is fine."""
        assert read_file({"path": str(project / "docs" / "a.md")}, ctx(project))["content"] == "# A\n"

    def test_symlinked_file_that_escapes_is_refused(self, project: Path) -> None:
        """A symlink inside the root pointing to a file outside is refused for reading."""
        with pytest.raises(OutsideRootError, match="through a symlink"):
            read_file({"path": "leak.txt"}, ctx(project))

    def test_write_through_a_symlinked_folder_that_escapes_is_refused(self, project: Path) -> None:
        """Writing under a symlinked folder that leads outside is refused and nothing is written there."""
        with pytest.raises(OutsideRootError, match="through a symlink"):
            write_file({"path": "elsewhere/new.txt", "content": "x"}, ctx(project))
        assert not (project.parent / "outside" / "new.txt").exists()

    def test_write_through_an_escaping_file_symlink_is_refused(self, project: Path) -> None:
        """Overwriting a symlink that points outside is refused and the target keeps its content."""
        with pytest.raises(OutsideRootError):
            write_file({"path": "leak.txt", "content": "pwned"}, ctx(project))
        assert (project.parent / "outside" / "secret.txt").read_text() == "top secret"

    def test_symlink_that_stays_inside_is_allowed(self, project: Path) -> None:
        """A symlink resolving inside the root is followed."""
        assert read_file({"path": "inside-link.md"}, ctx(project))["content"] == "# A\n"

    def test_list_skips_escaping_symlinks(self, project: Path) -> None:
        """listFiles never lists outside entries and reports the escaping links it skipped."""
        result = list_files({"recursive": True}, ctx(project))
        assert result["entries"] == ["docs/", "docs/a.md", "inside-link.md"]
        assert result["skipped_symlinks"] == ["elsewhere", "leak.txt"]
        with pytest.raises(OutsideRootError):
            list_files({"path": "elsewhere"}, ctx(project))

    def test_escape_through_the_pipeline_is_an_error_result(self, project: Path) -> None:
        """Through the pipeline an escape attempt becomes an ``error`` ToolResult, and nothing is written."""
        result = call(project, "writeFile", {"path": "../outside/evil.txt", "content": "x"})
        assert result.status == "error" and "is outside the project root" in (result.error or "")
        assert not (project.parent / "outside" / "evil.txt").exists()


class TestFileIO:
    """Reading, writing and listing inside the root."""

    def test_write_then_read_and_record_the_artifact(self, project: Path) -> None:
        """writeFile creates parent folders, reports size and hash, and names the file as an artifact."""
        result = call(project, "writeFile", {"path": "out/new.md", "content": "héllo"})
        assert result.status == "ok" and result.artifacts == ["out/new.md"]
        assert result.result["bytes"] == len("héllo".encode())
        assert read_file({"path": "out/new.md"}, ctx(project))["content"] == "héllo"

    def test_append(self, project: Path) -> None:
        """``append`` adds to the end instead of replacing."""
        write_file({"path": "log.txt", "content": "a"}, ctx(project))
        write_file({"path": "log.txt", "content": "b", "append": True}, ctx(project))
        assert (project / "log.txt").read_text() == "ab"

    def test_read_limit_and_missing_file(self, project: Path) -> None:
        """Reads stop at ``max_bytes`` and say so; a missing file is an error naming it."""
        (project / "big.txt").write_text("x" * 100)
        result = read_file({"path": "big.txt", "max_bytes": 10}, ctx(project))
        assert result["content"] == "x" * 10 and result["truncated"] is True
        with pytest.raises(ToolError, match=r"no such file: 'nope\.txt'"):
            read_file({"path": "nope.txt"}, ctx(project))

    def test_binary_file_is_refused(self, project: Path) -> None:
        """A file that is not UTF-8 text is an error rather than mojibake."""
        (project / "blob.bin").write_bytes(b"\xff\xfe\x00")
        with pytest.raises(ToolError, match="not a UTF-8 text file"):
            read_file({"path": "blob.bin"}, ctx(project))

    def test_list_with_pattern(self, project: Path) -> None:
        """``pattern`` filters names; without ``recursive`` only the folder itself is listed."""
        assert list_files({"path": "docs", "pattern": "*.md"}, ctx(project))["entries"] == ["docs/a.md"]
        assert list_files({"pattern": "*.txt"}, ctx(project))["entries"] == []


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
class TestRepo:
    """The repo tool reports git status, diff and log without changing the repository."""

    @pytest.fixture
    def repo(self, tmp_path: Path) -> Path:
        """A repository with one commit and one modified file."""
        env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
               "GIT_COMMITTER_EMAIL": "t@e"}
        subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
        (tmp_path / "a.txt").write_text("one\n")
        subprocess.run(["git", "add", "a.txt"], cwd=tmp_path, check=True, env=env)
        subprocess.run(["git", "commit", "-q", "-m", "first commit"], cwd=tmp_path, check=True, env=env)
        (tmp_path / "a.txt").write_text("two\n")
        return tmp_path

    def test_status_diff_log(self, repo: Path) -> None:
        """status lists the change, diff shows it, log shows the commit."""
        assert " M a.txt" in inspect_repo({"action": "status"}, ctx(repo)).result["output"]
        assert "+two" in inspect_repo({"action": "diff"}, ctx(repo)).result["output"]
        assert "first commit" in inspect_repo({"action": "log", "max_count": 5}, ctx(repo)).result["output"]

    def test_inspection_is_read_only(self, repo: Path) -> None:
        """Running every action leaves the index untouched (no optional lock or refresh writes)."""
        index = (repo / ".git" / "index").read_bytes()
        for action in ("status", "diff", "log"):
            inspect_repo({"action": action}, ctx(repo))
        assert (repo / ".git" / "index").read_bytes() == index

    def test_not_a_repository(self, tmp_path: Path) -> None:
        """Outside a repository the call fails with git's reason."""
        result = call(tmp_path, "repo", {"action": "status"})
        assert result.status == "error" and "not a git repository" in (result.error or "")


class TestShell:
    """shell runs ``/bin/sh -c`` directly (no worker) in the project root and dies with its process group."""

    def test_output_exit_code_and_cwd(self, tmp_path: Path) -> None:
        """stdout, stderr and the exit code are captured; the command runs in the project root."""
        ok = call(tmp_path, "shell", {"command": "pwd -P; echo oops >&2"})
        assert ok.status == "ok" and ok.result == {"exit_code": 0} and ok.error is None
        assert ok.stdout.strip() == str(tmp_path.resolve()) and ok.stderr.strip() == "oops"

    def test_non_zero_exit_is_a_failed_call_with_its_output(self, tmp_path: Path) -> None:
        """A non-zero exit code fails the call, naming the code, and keeps what the command printed."""
        failed = call(tmp_path, "shell", {"command": "echo partial; echo why >&2; exit 3"})
        assert failed.status == "error" and failed.error == "command exited with code 3"
        assert failed.result == {"exit_code": 3}
        assert failed.stdout == "partial\n" and failed.stderr == "why\n"

    def test_output_is_size_limited(self, tmp_path: Path) -> None:
        """Only the first ``max_output_bytes`` of each stream are kept, and the marker counts the rest."""
        command = "yes | head -c 5000; yes e | head -c 300 >&2"
        out = call(tmp_path, "shell", {"command": command}, ToolPolicy(max_output_bytes=100))
        assert out.status == "ok"
        assert out.stdout == "y\n" * 50 + "\n…[truncated 4900 bytes]"
        assert out.stderr == "e\n" * 50 + "\n…[truncated 200 bytes]"

    def test_stdin_is_dev_null(self, tmp_path: Path) -> None:
        """The command reads /dev/null, not the engine's stdin (here a pipe that would block ``cat``)."""
        read_end, write_end = os.pipe()
        saved = os.dup(0)
        os.dup2(read_end, 0)
        try:
            result = call(tmp_path, "shell", {"command": "cat; readlink /proc/self/fd/0"},
                          ToolPolicy(timeout_seconds=5.0))
        finally:
            os.dup2(saved, 0)
            for fd in (saved, read_end, write_end):
                os.close(fd)
        assert result.status == "ok" and result.stdout == "/dev/null\n"

    def test_the_shell_is_a_direct_child_in_its_own_session(self, tmp_path: Path) -> None:
        """No interpreter worker in between: the shell's parent is this process, and it leads a new session."""
        result = call(tmp_path, "shell", {"command": "echo $PPID; ps -o sid= -p $$; echo $$"})
        parent, session, shell = result.stdout.split()
        assert int(parent) == os.getpid()
        assert int(session) == int(shell) != os.getsid(0)

    def test_shell_needs_approval(self, tmp_path: Path) -> None:
        """shell is high risk: without approval it is blocked and does not run."""
        result = ToolPipeline(default_registry()).run(
            ToolCall(name="shell", args={"command": "touch ran"}), step_id="s1", project_root=tmp_path)
        assert result.status == "blocked" and not (tmp_path / "ran").exists()

    def test_timeout_kills_the_whole_process_group(self, tmp_path: Path) -> None:
        """On timeout the shell and the background process it started are both gone; the output so far is kept."""
        command = "sleep 30 & echo $! > bg.pid; echo $$ > sh.pid; echo started; sleep 30"
        result = call(tmp_path, "shell", {"command": command}, ToolPolicy(timeout_seconds=1.0))
        assert result.status == "timeout" and "timed out after 1s" in (result.error or "")
        assert result.stdout == "started\n" and result.result is None
        assert process_gone(int((tmp_path / "bg.pid").read_text()))
        assert process_gone(int((tmp_path / "sh.pid").read_text()))

    def test_cancelling_the_call_kills_the_whole_process_group(self, tmp_path: Path) -> None:
        """Cancelling the awaiting task (the engine's step timeout) kills shell and child, then re-raises."""
        pipeline = ToolPipeline(default_registry())
        command = "sleep 30 & echo $! > bg.pid; echo $$ > sh.pid; sleep 30"

        async def main() -> None:
            task = asyncio.ensure_future(pipeline.arun(
                ToolCall(name="shell", args={"command": command}), step_id="s1", project_root=tmp_path,
                approvals=lambda g: "approved"))
            pids = (tmp_path / "bg.pid", tmp_path / "sh.pid")
            for _ in range(1000):
                if all(p.exists() and p.read_text().strip() for p in pids):
                    break
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(main())
        assert process_gone(int((tmp_path / "bg.pid").read_text()), within=1.0)
        assert process_gone(int((tmp_path / "sh.pid").read_text()), within=1.0)

    def test_processes_left_behind_are_killed_after_the_call(self, tmp_path: Path) -> None:
        """A command that returns but leaves a background process does not leave it running."""
        result = call(tmp_path, "shell", {"command": "sleep 60 >/dev/null 2>&1 & echo $! > bg.pid"})
        assert result.status == "ok"
        assert process_gone(int((tmp_path / "bg.pid").read_text()))

    def test_a_background_process_holding_the_output_does_not_hold_the_call(self, tmp_path: Path) -> None:
        """The call ends when the shell does, even if a child it left still has stdout open."""
        result = call(tmp_path, "shell", {"command": "sleep 30 & echo $! > bg.pid; echo done"},
                      ToolPolicy(timeout_seconds=10.0))
        assert result.status == "ok" and result.stdout == "done\n"
        assert process_gone(int((tmp_path / "bg.pid").read_text()))
