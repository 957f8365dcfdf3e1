"""The Quick start demo: a BMAD skill run offline in a scratch project, end to end.

BMAD v6.11's ``bmad-build`` skill (from ``../shared/corpus/bmad/v6.11.0`` beside the checkout, else the small
skill in ``examples/demo-skill/greeting``) runs on the scripted executor: it writes a spec, stops at its
``[A] Approve | [E] Edit`` menu (nobody at the terminal: the run is blocked, exit 9), takes the answer from
``stepline answer``, and goes on to write the code (bmad-build then offers to push: answered the same way). Then the skill is changed and ``stepline replay`` runs it
again with the recorded answers, and ``stepline diff`` reports what changed.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from stepline.interfaces.cli._app import run_cli

HERE = Path(__file__).resolve().parent
#: Where BMAD v6.11.0 is looked for (STEPLINE_DEMO_BMAD names another folder: the tests use it for the fallback).
BMAD = Path(os.environ.get("STEPLINE_DEMO_BMAD") or HERE.parent.parent / "shared" / "corpus" / "bmad" / "v6.11.0")


def stepline(*args: str, expect: int = 0) -> None:
    """Run one command as a user would type it in the scratch project, and stop the demo if it surprises."""
    print(f"\n$ {shlex.join(['stepline', *args])}", flush=True)  # quoted: each command can be pasted as printed
    code = run_cli(list(args))
    sys.stdout.flush()
    if code != expect:
        raise SystemExit(f"demo: expected exit code {expect}, got {code}")


def latest_run(project: Path) -> str:
    return max((project / ".stepline" / "runs").iterdir(), key=lambda p: p.stat().st_mtime).name


def main() -> int:
    project = Path(tempfile.mkdtemp(prefix="stepline-demo-"))
    os.chdir(project)  # the commands below read as typed in the project
    print(f"scratch project: {project}")
    if BMAD.is_dir():
        stepline("bmad", "install", str(BMAD), "--project", ".", "--set", "user_name=Ada",
                 "--set", "output_folder={project-root}/docs")
        skill, steps, implement = "_bmad/bmm/ship/bmad-build", "bmad-build.yaml", "step-03-implement.md"
    else:
        print(f"BMAD v6.11.0 is not at {BMAD}: running the small skill in examples/demo-skill/greeting instead")
        shutil.copytree(HERE / "demo-skill" / "greeting", project / "greeting")
        skill, steps, implement = "greeting", "greeting.yaml", "step-02-implement.md"
    script = shutil.copy(HERE / "demo-skill" / steps, project / "script.yaml")

    stepline("run", skill, "--script", "script.yaml", "--non-interactive", expect=9)  # blocked at its menu
    run_id = latest_run(project)
    stepline("gates", run_id)
    stepline("answer", run_id, "A", "--by", "ada")
    if skill == "greeting":
        stepline("resume", run_id, "--script", "script.yaml")
    else:  # bmad-build's last step offers to push and create a pull request: a question for Ada too
        stepline("resume", run_id, "--script", "script.yaml", expect=9)
        stepline("answer", run_id, "N", "--by", "ada")
        stepline("resume", run_id, "--script", "script.yaml")
    for document in (project / "docs").rglob("spec-*.md"):
        print(f"\n--- {document.relative_to(project)}\n{document.read_text(encoding='utf-8')}", end="")

    print("\n# A change: the implement step now asks for French, and the model (the script) answers in French.")
    with (project / skill / implement).open("a", encoding="utf-8") as step_file:
        step_file.write("\nGreetings are in French.\n")
    french = Path(script).read_text(encoding="utf-8").replace("Hello, {name}!", "Bonjour, {name} !")
    (project / "script-fr.yaml").write_text(french, encoding="utf-8")
    stepline("replay", run_id, "--against", skill, "--script", "script-fr.yaml", "-q", expect=12)  # 12: differ
    stepline("diff", run_id, latest_run(project), expect=12)
    print(f"\nrun directory: {project / '.stepline' / 'runs' / run_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
