"""The Quick start demo: run the release-notes workflow end to end in a scratch project.

It shows the three things stepline is for: the runtime (not the model) owns the order of steps, a
required human gate stops the run until a person approves it from the command line, and the run's
journal, artifacts and approvals are left behind as an audit trail.
"""

from __future__ import annotations

import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from stepline.interfaces.cli._app import run_cli

HERE = Path(__file__).resolve().parent


def stepline(*args: str) -> int:
    print(f"\n$ {shlex.join(['stepline', *args])}", flush=True)  # quoted: each command can be pasted as printed
    return run_cli(list(args))


def main() -> int:
    project = Path(tempfile.mkdtemp(prefix="stepline-demo-"))
    (project / "CHANGES.md").write_text("## 1.4.0\n- resume is faster\n- errors are clearer\n", encoding="utf-8")
    workflow = shutil.copytree(HERE / "release-notes", project / "release-notes")
    print(f"scratch project: {project}")
    code = stepline("run", str(workflow), "--script", str(workflow / "script.yaml"), "--non-interactive",
                    "-C", str(project))
    if code != 9:  # 9 = blocked: the announce step waits for a person
        print(f"expected the run to block at the human gate, got exit code {code}", file=sys.stderr)
        return 1
    run_id = next((project / ".stepline" / "runs").iterdir()).name
    stepline("gates", run_id, "-C", str(project))
    stepline("approve", run_id, "step:announce", "--by", "demo-user", "--notes", "notes read, ship it",
             "-C", str(project))
    if stepline("resume", run_id, "-C", str(project)) != 0:
        return 1
    stepline("show", run_id, "-C", str(project))
    for output in sorted((project / "docs").iterdir()):
        print(f"\n--- {output.relative_to(project)}\n{output.read_text(encoding='utf-8')}", end="")
    print(f"\nrun directory: {project / '.stepline' / 'runs' / run_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
