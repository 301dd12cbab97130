"""The layering the import contracts cannot see: the screens import no I/O from the stdlib."""

from __future__ import annotations

import ast
from pathlib import Path

WIDGETS = Path(__file__).parent.parent / "widgets"
NO_IO = {"socket", "subprocess", "psutil", "pyarrow", "confluent_kafka", "kmon.sources",
         "kmon.record", "kmon.evidence"}


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_widgets_do_no_io_of_their_own():
    offenders = {}
    for path in sorted(WIDGETS.glob("*.py")):
        bad = {m for m in imported_modules(path)
               if any(m == banned or m.startswith(banned + ".") for banned in NO_IO)}
        if bad:
            offenders[path.name] = sorted(bad)
    assert offenders == {}


def test_the_check_sees_an_offender(tmp_path):
    offender = tmp_path / "screen.py"
    offender.write_text("import socket\nfrom kmon.sources.sockets import open_socket_reader\n")
    assert imported_modules(offender) == {"socket", "kmon.sources.sockets"}
