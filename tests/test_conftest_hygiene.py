"""The suite's own rules: fixtures leave the process as they found it (a run of
tests/conftest.py's ``spool_dir`` in a pytest session of its own restores the environment);
every test is ``unit`` or ``integration`` one way (integration written in its module, unit
marked by the conftest, a process-starting fixture refused without the mark); shared helpers
come from tests/helpers.py, never from another test module or the conftest."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

TESTS = Path(__file__).parent
# what starts a process in a test: a module that does must mark its tests integration
STARTS_A_PROCESS = re.compile(r"\b(Child|KafkaClient|attach_once|record_child|attach_stream|"
                              r"from_start|kmon|subprocess\.(run|Popen|check_output|call)|"
                              r"pty\.fork)\(")


def run_with_the_conftest(pytester, **modules: str):
    pytester.makeconftest((TESTS / "conftest.py").read_text())
    pytester.makepyfile(**modules)
    # in-process, so that the environment it leaves is this one (the snapshot plugin, whose
    # temporary directory is one per process, is left to the outer run)
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:textual-snapshot",
                                        "-p", "no:randomly")


def test_spool_dir_restores_the_environment(pytester):
    before = os.environ.get("KMON_SPOOL_DIR")
    result = run_with_the_conftest(pytester, test_spool="""
        import os
        import pytest

        pytestmark = pytest.mark.integration

        def test_uses_the_spool(spool_dir):
            assert os.environ["KMON_SPOOL_DIR"] == str(spool_dir)
    """)
    result.assert_outcomes(passed=1)
    assert os.environ.get("KMON_SPOOL_DIR") == before


def test_every_test_is_unit_or_integration_and_a_process_fixture_needs_the_mark(pytester):
    marked = run_with_the_conftest(pytester, test_kinds="""
        import pytest

        @pytest.mark.integration
        def test_real(spool_dir, request):
            assert request.node.get_closest_marker("unit") is None

        def test_plain(request):
            assert request.node.get_closest_marker("unit") is not None
    """)
    marked.assert_outcomes(passed=2)
    refused = run_with_the_conftest(pytester, test_kinds="""
        def test_real_but_unmarked(spool_dir):
            pass
    """)
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*must be marked integration*test_real_but_unmarked*"])


def test_modules_that_start_processes_mark_them_integration():
    unmarked = [path.name for path in sorted(TESTS.glob("test_*.py"))
                if STARTS_A_PROCESS.search(path.read_text())
                and "pytest.mark.integration" not in path.read_text()]
    assert unmarked == []


def test_helpers_come_from_helpers_py_only():
    modules = {path.stem for path in TESTS.glob("*.py")} - {"helpers"}
    offenders = {}
    for path in sorted(TESTS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.module
                     else [])
            bad = [n for n in names if n.split(".")[0] in modules | {"tests"}]
            if bad:
                offenders.setdefault(path.name, []).extend(bad)
    assert offenders == {}
