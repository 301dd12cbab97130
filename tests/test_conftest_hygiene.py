"""The suite's own rules: fixtures leave the process as they found it (a run of
tests/conftest.py's ``spool_dir`` in a pytest session of its own restores the environment);
every test is ``unit`` or ``integration`` one way (integration written in its module, unit
marked by the conftest, a process-starting fixture refused without the mark); a unit test that
starts a process fails; fixtures mark what they need (kafka, spark, java, root); shared helpers
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
# in-process, so that the environment it leaves is this one (the snapshot plugin, whose
# temporary directory is one per process, is left to the outer run)
INNER_RUN = ("-p", "no:cacheprovider", "-p", "no:textual-snapshot", "-p", "no:randomly")


def run_with_the_conftest(pytester, *options: str, **modules: str):
    pytester.makeconftest((TESTS / "conftest.py").read_text())
    pytester.makepyfile(**modules)
    return pytester.runpytest_inprocess(*INNER_RUN, *options)


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


def test_a_unit_test_that_starts_a_process_fails_naming_the_rule(pytester):
    result = run_with_the_conftest(pytester, test_starts="""
        import asyncio
        import os
        import subprocess

        def test_runs_a_command():
            subprocess.run(["true"])

        def test_forks():
            if os.fork() == 0:
                os._exit(0)

        def test_starts_one_with_asyncio():
            asyncio.run(asyncio.create_subprocess_exec("true"))

        def test_swallows_the_refusal():
            try:
                os.posix_spawn("/bin/true", ["true"], {})
            except Exception:
                pass
    """)
    result.assert_outcomes(failed=3, passed=1, errors=1)  # the swallowed one at its teardown
    result.stdout.fnmatch_lines(["a unit test started a process (os.posix_spawn): mark it "
                                 "integration"])
    result.stdout.fnmatch_lines(["*ProcessRefused: a unit test starts no process, user, "
                                 "compiler or cluster*called os.fork: mark it integration*"])


@pytest.mark.integration
def test_an_integration_test_may_start_one(pytester):
    result = run_with_the_conftest(pytester, test_starts="""
        import subprocess
        import pytest

        pytestmark = pytest.mark.integration

        def test_runs_a_command():
            subprocess.run(["true"], check=True)
    """)
    result.assert_outcomes(passed=1)


def test_fixtures_mark_what_they_need(pytester):
    pytester.makeconftest((TESTS / "conftest.py").read_text())
    pytester.makepyfile(test_needs="""
        import pytest

        pytestmark = pytest.mark.integration

        def test_cluster(kafka): pass
        def test_own_cluster(start_kafka): pass
        def test_spark(spark_session): pass
        def test_java(start_java): pass
        def test_user(throwaway_user): pass
    """)
    selected = {}
    for marker in ("kafka", "spark", "java", "root"):
        result = pytester.runpytest_inprocess(*INNER_RUN, "--collect-only", "-q", "-m", marker)
        selected[marker] = {line.split("::")[1] for line in result.outlines if "::" in line}
    assert selected == {"kafka": {"test_cluster", "test_own_cluster", "test_java"},
                        "spark": {"test_spark"}, "java": {"test_java"}, "root": {"test_user"}}


def test_a_root_test_is_skipped_with_its_reason_unless_run_as_root(pytester, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    result = run_with_the_conftest(pytester, "-rs", test_root="""
        import pytest

        @pytest.mark.root(reason="the attack is on kmon running as root")
        def test_as_root():
            pass

        def test_as_anyone():
            pass
    """)
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED*the attack is on kmon running as root"])
