"""The layout rules of ARCHITECTURE.md, checked on the source: imports point one way, other packages' names are
taken from their package.

Every ``import`` of a stepline module is read from the source by bench/import_graph.py (including imports inside
functions; a name taken from a package depends on the module defining it); imports under ``if TYPE_CHECKING:`` are
type-only and do not count as dependencies at run time.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from import_circles import circles
from import_graph import read_tree
from private_imports import private_imports

SRC = Path(__file__).resolve().parents[1] / "src"
FAMILIES = ("stepline.native", "stepline.bmad", "stepline.skills", "stepline.ccw", "stepline.sprint")
#: Modules of a family that run steps; every other module of a family is a reader (or its installer).
DRIVERS = {
    "stepline.native._driver",
    "stepline.bmad._legacy_driver", "stepline.bmad._conditions_driver", "stepline.bmad._discover",
    "stepline.bmad._template_output", "stepline.bmad._microfile_driver",
    "stepline.ccw._driver", "stepline.ccw._state", "stepline.ccw._prompt",
    "stepline.skills._driver", "stepline.skills._host", "stepline.skills._facts", "stepline.skills._intent",
    "stepline.skills._subagents",
    "stepline.sprint._driver", "stepline.sprint._loop", "stepline.sprint._link", "stepline.sprint._stage",
    "stepline.sprint._budgets", "stepline.sprint._restore", "stepline.sprint._baseline", "stepline.sprint._reconcile",
    "stepline.sprint._build", "stepline.sprint._verify", "stepline.sprint._review", "stepline.sprint._commit",
    "stepline.sprint._merge", "stepline.sprint._defer", "stepline.sprint._closeout", "stepline.sprint._status",
}

#: The step-chain mechanism both BMAD families share (issue 25): between the families and the engine. Its
#: reader (``_read``) is the families' readers' too, so it never imports the engine; the rest runs steps.
#: The run service the interfaces share: above the families, below the interfaces.
SERVICE = "stepline.service"
INTERFACES = ("stepline.interfaces.cli", "stepline.interfaces.web", "stepline.interfaces.mcp")
#: The one way an interface reaches another: the CLI (the ``stepline`` program) starts the dashboard (``serve``)
#: and the MCP server (``mcp``) through their packages' public names.
LAUNCHED = {"stepline.interfaces.cli": {"stepline.interfaces.web", "stepline.interfaces.mcp"}}

STEPCHAIN = "stepline.stepchain"
STEPCHAIN_READERS = {"stepline.stepchain._read", "stepline.stepchain._plan", "stepline.stepchain._stops",
                     "stepline.stepchain._lean_text"}


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")


TREE = read_tree(SRC)
_LOADS = TREE.graph()


def _with_packages(module: str) -> set[str]:
    """What ``module`` loads at run time, a package's ``__init__`` standing for what it loads in turn (a name taken
    from a package whose ``__init__`` imports its modules eagerly depends on all of them)."""
    found, todo = set(), list(_LOADS[module])
    while todo:
        dep = todo.pop()
        if dep not in found:
            found.add(dep)
            if dep in TREE.packages:
                todo.extend(_LOADS[dep])
    found.discard(module)
    return found


ALL = set(TREE.paths)
GRAPH = {module: _with_packages(module) for module in TREE.paths}
#: A package's ``__init__`` (judged by what it loads, which GRAPH holds too).
PACKAGES = TREE.packages


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_source_tree_is_found() -> None:
    assert "stepline.engine._runner" in GRAPH and len(GRAPH) > 50


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if _in(m, "stepline.engine")))
def test_the_engine_imports_no_family(module: str) -> None:
    bad = sorted(d for d in GRAPH[module] if any(_in(d, f) for f in FAMILIES) or _in(d, "stepline.families")
                 or _in(d, "stepline.timetravel") or _in(d, SERVICE))
    assert not bad, f"{module} imports {bad}: the engine must know no workflow family (ARCHITECTURE.md)"


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if any(_in(m, f) for f in FAMILIES) and m not in DRIVERS
                                          and not m.endswith("__init__") and m not in FAMILIES))
def test_a_reader_imports_no_engine_and_no_driver(module: str) -> None:
    bad = sorted(d for d in GRAPH[module] if _in(d, "stepline.engine") or d in DRIVERS or _in(d, "stepline.families"))
    assert not bad, f"reader {module} imports {bad}: readers never import the engine or a driver"


@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_imports_no_other_family(family: str) -> None:
    others = [f for f in FAMILIES if f != family]
    for module, deps in GRAPH.items():
        if _in(module, family):
            bad = sorted(d for d in deps if any(_in(d, o) for o in others) or _in(d, "stepline.families"))
            assert not bad, f"{module} imports {bad}: a family stands alone (stepline.families joins them)"


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if _in(m, STEPCHAIN)))
def test_the_step_chain_imports_no_family_and_its_reader_no_engine(module: str) -> None:
    bad = sorted(d for d in GRAPH[module] if any(_in(d, f) for f in FAMILIES) or _in(d, "stepline.families")
                 or (module in STEPCHAIN_READERS and (_in(d, "stepline.engine") or
                                                      (_in(d, STEPCHAIN) and d not in STEPCHAIN_READERS
                                                       and d != STEPCHAIN))))
    assert not bad, f"{module} imports {bad}: the step chain sits below the families, its reader below the engine"


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if any(_in(m, f) for f in FAMILIES) and m not in DRIVERS
                                          and not m.endswith("__init__") and m not in FAMILIES))
def test_a_reader_imports_only_the_step_chains_reader(module: str) -> None:
    bad = sorted(d for d in GRAPH[module] if _in(d, STEPCHAIN) and d not in STEPCHAIN_READERS and d != STEPCHAIN)
    assert not bad, f"reader {module} imports {bad}: a reader may use the step chain's reader only"


@pytest.mark.parametrize("package", ["stepline.model", "stepline.store", "stepline.executors", "stepline.tools",
                                     "stepline.guardrails", "stepline.evidence", "stepline.formats"])
def test_foundations_import_nothing_above_them(package: str) -> None:
    above = ("stepline.engine", "stepline.families", "stepline.interfaces", "stepline._api", "stepline.timetravel",
             STEPCHAIN, SERVICE, *FAMILIES)
    for module, deps in GRAPH.items():
        if _in(module, package):
            bad = sorted(d for d in deps if any(_in(d, a) for a in above))
            assert not bad, f"{module} imports {bad}, which sit above {package}"


#: All that ARCHITECTURE.md's layout lets a package import besides its own modules (and ``stepline`` itself).
ONLY = {
    "stepline.model": (),  # "imports nothing else of stepline"
    "stepline.distributed": ("stepline.executors", "stepline.errors"),  # "imports executors and errors only"
}
#: What a package of the layout must not import, in ARCHITECTURE.md's words.
NEVER = {
    "stepline.store": ("stepline.formats", "stepline.executors"),  # "knows nothing of formats or executors"
    "stepline.context": ("stepline.engine", "stepline.families", *FAMILIES),  # "no family, no engine"
}

@pytest.mark.parametrize("package", sorted(ONLY))
def test_a_package_imports_only_what_the_layout_says(package: str) -> None:
    allowed = (package, *ONLY[package])
    for module, deps in _LOADS.items():  # what it imports itself (an allowed package loads what it needs)
        if _in(module, package):
            bad = sorted(d for d in deps if d != "stepline" and not any(_in(d, a) for a in allowed))
            assert not bad, f"{module} imports {bad}: ARCHITECTURE.md lets {package} import {ONLY[package] or 'none'}"


@pytest.mark.parametrize("package", sorted(NEVER))
def test_a_package_imports_nothing_the_layout_rules_out(package: str) -> None:
    for module, deps in _LOADS.items():
        if _in(module, package):
            bad = sorted(d for d in deps if any(_in(d, n) for n in NEVER[package]))
            assert not bad, f"{module} imports {bad}, which ARCHITECTURE.md says {package} knows nothing of"


def test_importing_the_ray_backend_does_not_import_ray() -> None:
    """Ray is imported at a run's first step on the cluster, never when the CLI or a program imports stepline."""
    code = "import sys, stepline.distributed, stepline.interfaces.cli; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False", "importing stepline.distributed or the CLI imports ray: import it where it is used"


def _check_no_circle(packages: tuple[str, ...]) -> None:
    """Fail on an import circle among the modules of ``packages`` (a package's ``__init__`` left out: it names
    its modules' public names)."""
    inside = {m: {d for d in deps if any(_in(d, p) for p in packages) and d not in packages}
              for m, deps in GRAPH.items() if any(_in(m, p) for p in packages) and m not in packages}
    state: dict[str, int] = {}  # 1 visiting, 2 done

    def walk(module: str, trail: list[str]) -> None:
        state[module] = 1
        for dep in sorted(inside.get(module, ())):
            if state.get(dep) == 1:
                raise AssertionError("import circle: " + " -> ".join([*trail[trail.index(dep):], dep]))
            if dep not in state:
                walk(dep, [*trail, dep])
        state[module] = 2

    for module in sorted(inside):
        if module not in state:
            walk(module, [module])


def test_no_import_circle_inside_the_engine() -> None:
    _check_no_circle(("stepline.engine",))


def test_no_import_circle_among_the_interfaces_and_the_run_service() -> None:
    _check_no_circle((*INTERFACES, SERVICE))


def test_no_import_circle_anywhere() -> None:
    """No module of stepline imports itself through others at run time (bench/import_circles.py counts them)."""
    found = circles(SRC)
    assert not found, "import circle: " + " -> ".join(found[0])


@pytest.mark.parametrize("interface", INTERFACES)
def test_no_interface_imports_another(interface: str) -> None:
    """An interface reads and decides runs through the run service; what two interfaces share lives there (or
    below), not in one of them. Only the CLI starts the others, by their packages' public names."""
    launched = LAUNCHED.get(interface, set())
    for module, found in TREE.imports.items():
        if _in(module, interface):
            bad = sorted(w for i in found if not i.typing_only for w in i.written
                         if any(_in(w, other) for other in INTERFACES if other != interface) and w not in launched)
            assert not bad, f"{module} imports {bad}: an interface never imports another (use stepline.service)"


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if _in(m, SERVICE)))
def test_the_run_service_imports_no_interface(module: str) -> None:
    bad = sorted(d for d in GRAPH[module] if _in(d, "stepline.interfaces"))
    assert not bad, f"{module} imports {bad}: the run service sits below the interfaces"


def test_the_engine_is_built_by_the_run_service_alone_in_the_interfaces() -> None:
    """The interfaces get an Engine from :meth:`RunService.engine`, never by building one."""
    for path in (SRC / "stepline" / "interfaces").rglob("*.py"):
        built = [node.lineno for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                 if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Engine"]
        assert not built, f"{path.relative_to(SRC)}:{built[0]} builds an Engine: use RunService.engine()"


def test_the_architecture_file_names_every_package() -> None:
    text = (SRC.parent / "ARCHITECTURE.md").read_text(encoding="utf-8")
    packages = sorted(p.name for p in (SRC / "stepline").iterdir() if (p / "__init__.py").is_file())
    missing = [p for p in packages if f"  {p}/" not in text]
    assert not missing, f"ARCHITECTURE.md's layout does not name {missing}"
    for gone in ("install/", "engine/_ccw", "formats/_ccw", "formats/_bmad"):
        assert gone not in text, f"ARCHITECTURE.md still names {gone}, which no longer exists"


def _imports_opentelemetry(path: Path) -> bool:
    """Whether ``path`` imports OpenTelemetry at run time (type-only imports left out)."""
    def visit(node: ast.AST) -> bool:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                if any(visit(other) for other in child.orelse):
                    return True
                continue
            names = ([child.module or ""] if isinstance(child, ast.ImportFrom) and not child.level
                     else [a.name for a in child.names] if isinstance(child, ast.Import) else [])
            if any(name.split(".")[0] == "opentelemetry" for name in names) or visit(child):
                return True
        return False

    return visit(ast.parse(path.read_text(encoding="utf-8")))


def test_telemetry_stands_apart() -> None:
    """Only the telemetry package imports OpenTelemetry (the engine observes through register_observer); only
    families (where every driving process registers) imports telemetry; telemetry knows no family or interface."""
    knowing = sorted(_module_name(p) for p in SRC.rglob("*.py")
                     if "opentelemetry" in p.read_text(encoding="utf-8") and _imports_opentelemetry(p))
    assert knowing and all(_in(m, "stepline.telemetry") for m in knowing), knowing
    users = sorted(m for m, deps in GRAPH.items() if not _in(m, "stepline.telemetry")
                   and any(_in(d, "stepline.telemetry") for d in deps))
    assert users == ["stepline.families"], users
    for module, deps in GRAPH.items():
        if _in(module, "stepline.telemetry"):
            bad = sorted(d for d in deps if any(_in(d, f) for f in (*FAMILIES, STEPCHAIN, "stepline.families",
                                                                    "stepline.interfaces", "stepline._api")))
            assert not bad, f"{module} imports {bad}: telemetry reads what the engine journals, nothing more"


#: Imports of another package's private module that stay: (importing module, private module) -> why.
#: Every other package's names are taken from its ``__init__`` (ARCHITECTURE.md, "Public names"); at most 30 stay.
PRIVATE_IMPORTS: dict[tuple[str, str], str] = {}


def test_other_packages_are_used_through_their_public_names() -> None:
    """An import of another package's private module (``stepline.x._y``) is either gone or listed here with its
    reason (bench/private_imports.py counts them)."""
    found = {(where.module, private) for where, private in private_imports(SRC)}
    new = sorted(f"{m} imports {p}" for m, p in found - PRIVATE_IMPORTS.keys())
    assert not new, f"{new}: import the name from its package (add it to the package's __init__ and __all__)"
    gone = sorted(PRIVATE_IMPORTS.keys() - found)
    assert not gone, f"{gone} no longer happen: take them off PRIVATE_IMPORTS"
    assert len(PRIVATE_IMPORTS) <= 30
    assert all(reason.strip() for reason in PRIVATE_IMPORTS.values())


#: ``stepline.interfaces`` only holds the three interfaces; it has no names of its own.
@pytest.mark.parametrize("package", sorted(p for p in PACKAGES if p != "stepline.interfaces"))
def test_every_package_names_its_public_names(package: str) -> None:
    """A package's ``__init__`` lists its public names in ``__all__``, and each of them is there (a lazy one too)."""
    module = importlib.import_module(package)
    names = getattr(module, "__all__", None)
    assert names, f"{package} has no __all__"
    missing = [name for name in names if not hasattr(module, name)]
    assert not missing, f"{package}.__all__ names {missing}, which it does not have"
