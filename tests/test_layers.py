"""The layering the import contracts cannot see, read from the source with an AST walk: no
import cycle anywhere in kmon (widgets/ read as kmon.widgets); no socket, subprocess, ctypes,
psutil or pyarrow import, no ``os.open``/``os.scandir``/``os.listdir``/``open()`` call and no
/proc, /sys, /dev path outside kmon/sources/ (but the parts named in ``OUTSIDE_SOURCES``);
no module imports another's private names; the screens import no I/O at all; the commands
reach the engine, the evidence and the sources through the engine's facade only."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).parent.parent
WIDGETS = REPO / "widgets"
NO_IO = {"socket", "subprocess", "psutil", "pyarrow", "confluent_kafka", "kmon.sources",
         "kmon.record", "kmon.evidence"}
# What reads or changes the world: its own module (the sources), or one of these
IO_MODULES = {"socket", "subprocess", "ctypes", "psutil", "pyarrow"}
IO_CALLS = {("os", "open"), ("os", "scandir"), ("os", "listdir"), ("os", "walk")}
SYSTEM_PATH = re.compile(r"/(proc|sys|dev)(/|$)")
# The parts that do I/O of their own outside kmon/sources/ (README and the architecture name
# them): the agent runs inside the user's process, the devtools start clusters and demo
# processes, the analysis starts Spark, the export serves kmon serve's metrics over HTTP, the
# recorder writes the user's recording, and files.py is the one door for files (bounded
# reads of regular files, private directories) that the commands and the recorder go through
OUTSIDE_SOURCES = ("kmon/agent/", "kmon/devtools/", "kmon/analysis/", "kmon/export/",
                   "kmon/record/", "kmon/files.py")
# What the commands (kmon.cli) must not import but through the facade, and what they may: the
# facade; own_processes, which kmon.cli imports to register kmon's own PID before any command
# runs, and the TLS source's uprobes, whose stale probes go (and whose exit signals are hooked)
# before any command runs too (the facade would load the whole engine for ``kmon --help`` and
# ``kmon run``)
BEHIND_THE_FACADE = ("kmon.engine", "kmon.evidence", "kmon.sources")
CLI_MAY_IMPORT = {"kmon.engine.facade", "kmon.sources.processes.own_processes",
                  "kmon.sources.tls.uprobes"}


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def module_files(root: Path) -> dict[str, Path]:
    """Every module of kmon by its installed name (widgets/x.py is kmon.widgets.x)."""
    found = {}
    for folder, package in ((root / "kmon", ["kmon"]), (root / "widgets", ["kmon", "widgets"])):
        for path in folder.rglob("*.py"):
            parts = package + list(path.relative_to(folder).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    """Each module's imports of other kmon modules (every import, at any depth of the code)."""
    files = module_files(root)
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = []
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets += [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base
                            for a in node.names]
        deps = set()
        for target in targets:
            while target and target not in files:
                target = target.rpartition(".")[0]
            if target and target != name:
                deps.add(target)
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for dep in graph[module]:
            if dep not in index:
                visit(dep)
                low[module] = min(low[module], low[dep])
            elif dep in stack:
                low[module] = min(low[module], index[dep])
        if low[module] == index[module]:
            group = stack[stack.index(module):]
            del stack[stack.index(module):]
            if len(group) > 1:
                found.append(sorted(group))

    for module in graph:
        if module not in index:
            visit(module)
    return found


def io_calls(tree: ast.AST) -> set[str]:
    """The file-system calls of ``IO_CALLS`` and the builtin ``open()`` a module makes."""
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "open":
            found.add("open()")
        elif (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
              and (func.value.id, func.attr) in IO_CALLS):
            found.add(f"{func.value.id}.{func.attr}()")
    return found


def io_outside_sources(root: Path) -> dict[str, list[str]]:
    """Per file outside kmon/sources/ (and ``OUTSIDE_SOURCES``), the I/O modules it imports,
    the file-system calls it makes and the system paths it names."""
    offenders = {}
    for path in sorted([*(root / "kmon").rglob("*.py"), *(root / "widgets").rglob("*.py")]):
        relative = path.relative_to(root).as_posix()
        if relative.startswith(("kmon/sources/", *OUTSIDE_SOURCES)):
            continue
        tree = ast.parse(path.read_text())
        bad = {m for m in imported_modules(path) if m.split(".")[0] in IO_MODULES}
        bad |= io_calls(tree)
        bad |= {node.value for node in ast.walk(tree)
                if isinstance(node, ast.Constant) and isinstance(node.value, str)
                and SYSTEM_PATH.match(node.value)}
        if bad:
            offenders[relative] = sorted(bad)
    return offenders


def test_no_import_cycle():
    assert cycles(import_graph(REPO)) == []


def test_io_only_in_sources():
    assert io_outside_sources(REPO) == {}


def private_imports(root: Path) -> dict[str, list[str]]:
    """Per file of kmon, the private names (``_name``) it imports from another module."""
    found = {}
    for path in sorted([*(root / "kmon").rglob("*.py"), *(root / "widgets").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                names = [a.name for a in node.names
                         if a.name.startswith("_") and not a.name.startswith("__")]
                if names:
                    found.setdefault(path.relative_to(root).as_posix(), []).extend(names)
    return found


def test_no_module_imports_another_s_private_names():
    assert private_imports(REPO) == {}


def test_widgets_do_no_io_of_their_own():
    offenders = {}
    for path in sorted(WIDGETS.glob("*.py")):
        bad = {m for m in imported_modules(path)
               if any(m == banned or m.startswith(banned + ".") for banned in NO_IO)}
        if bad:
            offenders[path.name] = sorted(bad)
    assert offenders == {}


def past_the_facade(root: Path) -> dict[str, list[str]]:
    """Per module of kmon.cli, what it imports of the engine, the evidence or the sources
    other than through the facade (at any depth of the code, type-checking imports too)."""
    found = {}
    for name, deps in import_graph(root).items():
        if name != "kmon.cli" and not name.startswith("kmon.cli."):
            continue
        bad = sorted(dep for dep in deps - CLI_MAY_IMPORT
                     if any(dep == layer or dep.startswith(layer + ".")
                            for layer in BEHIND_THE_FACADE))
        if bad:
            found[name] = bad
    return found


def test_the_commands_use_the_engine_through_its_facade_only():
    assert past_the_facade(REPO) == {}


@pytest.fixture
def offending_tree(tmp_path: Path) -> Path:
    """A small kmon with a cycle through widgets/ and I/O in the engine."""
    for folder in ("kmon/sources", "kmon/engine", "widgets"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "kmon/__init__.py").write_text("")
    (tmp_path / "kmon/sources/sockets.py").write_text("import socket\n")
    (tmp_path / "kmon/engine/host.py").write_text(
        "import os\nimport psutil\nfrom subprocess import run\nfrom kmon.widgets import screen\n"
        "def pids():\n    return os.listdir('/proc')\n"
        "def first(path):\n    return open(path).read(1)\n")
    (tmp_path / "widgets/screen.py").write_text("from ..engine import host\n")
    (tmp_path / "kmon/sources/closing.py").write_text("from kmon.sources.sockets import _pack\n")
    (tmp_path / "kmon/cli").mkdir()
    (tmp_path / "kmon/sources/processes").mkdir()
    (tmp_path / "kmon/cli/__init__.py").write_text(
        "from kmon.sources.processes import own_processes\n")
    (tmp_path / "kmon/sources/processes/own_processes.py").write_text("")
    (tmp_path / "kmon/engine/facade.py").write_text("")
    (tmp_path / "kmon/cli/watch.py").write_text(
        "from kmon.engine.facade import open_session\n"
        "def run():\n    from kmon.engine.host import pids\n    from kmon.sources import sockets\n")
    return tmp_path


def test_the_checks_see_an_offender(offending_tree: Path, tmp_path: Path):
    assert cycles(import_graph(offending_tree)) == [["kmon.engine.host", "kmon.widgets.screen"]]
    assert io_outside_sources(offending_tree) == {
        "kmon/engine/host.py": ["/proc", "open()", "os.listdir()", "psutil", "subprocess"]}
    assert private_imports(offending_tree) == {"kmon/sources/closing.py": ["_pack"]}
    assert past_the_facade(offending_tree) == {
        "kmon.cli.watch": ["kmon.engine.host", "kmon.sources.sockets"]}
    offender = tmp_path / "screen.py"
    offender.write_text("import socket\nfrom kmon.sources.sockets import TcpSocket\n")
    assert imported_modules(offender) == {"socket", "kmon.sources.sockets"}
