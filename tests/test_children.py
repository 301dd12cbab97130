"""Children kmon starts: never importing from the working directory, and a failed one's
own last words shown."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kmon.devtools.children import python_module, spawn, stderr_tail, stop_all
from kmon.devtools.demo_workload import DemoError, _first_line

pytestmark = pytest.mark.integration  # real processes


def test_a_child_that_fails_is_shown_with_its_last_stderr_lines():
    child = spawn([sys.executable, "-c", "import sys; print('noise', file=sys.stderr); "
                   "sys.exit('the embedded cluster needs a free port')"])
    try:
        with pytest.raises(DemoError) as failed:
            _first_line(child, "the embedded cluster")
    finally:
        stop_all([child])
    assert "exit code 1" in str(failed.value)
    assert str(failed.value).endswith("noise\nthe embedded cluster needs a free port")
    assert stderr_tail(child) == ""  # its file is closed with the child


def test_children_import_kmon_as_installed_never_a_clone_in_the_working_directory(tmp_path):
    """The README's clone sits in the folder a user runs kmon from: a ``kmon/`` there must
    not be what a child's ``python -m kmon`` imports."""
    decoy = tmp_path / "kmon"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise SystemExit('the decoy was imported')\n")
    child = subprocess.run(python_module("kmon", "--version"), cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert child.returncode == 0 and "decoy" not in child.stderr, child.stderr
    script = shutil.which("kmon") or str(Path(sys.executable).parent / "kmon")
    if not os.access(script, os.X_OK):
        pytest.skip("the kmon command is not installed beside this Python")
    demo = subprocess.run([script, "demo", "--headless", "--json", "--duration", "2s"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert demo.returncode == 0 and "decoy" not in demo.stderr, demo.stderr[-500:]
