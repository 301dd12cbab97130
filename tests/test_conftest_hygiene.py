"""The suite's own fixtures leave the process as they found it: a run of tests/conftest.py's
``spool_dir`` in a pytest session of its own restores the environment when it ends."""

from __future__ import annotations

import os
from pathlib import Path

pytest_plugins = ["pytester"]


def test_spool_dir_restores_the_environment(pytester):
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text())
    pytester.makepyfile(test_spool="""
        import os

        def test_uses_the_spool(spool_dir):
            assert os.environ["KMON_SPOOL_DIR"] == str(spool_dir)
    """)
    before = os.environ.get("KMON_SPOOL_DIR")
    # in-process, so that the environment it leaves is this one (the snapshot plugin, whose
    # temporary directory is one per process, is left to the outer run)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:textual-snapshot")
    result.assert_outcomes(passed=1)
    assert os.environ.get("KMON_SPOOL_DIR") == before
