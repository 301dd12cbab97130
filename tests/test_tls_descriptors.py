"""How many perf events one TLS source may open: the events are per thread and per CPU, so a
root shell's soft limit of 1,024 descriptors would hold a many-CPU host's source to a few
threads. kmon raises its own soft limit to its hard one and takes a quarter of it."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration  # a child process with its own limits

# python -c ASKED: the budget, then kmon's soft limit after it
ASKED = """
import resource
from kmon.sources.tls.tls_tap import _descriptors
print(_descriptors(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


def budget_under(soft: int, hard: int) -> tuple[int, int]:
    """(the budget, the soft limit after) in a child started with these limits."""
    done = subprocess.run([sys.executable, "-c", ASKED], capture_output=True, text=True,
                          check=True, timeout=60, preexec_fn=lambda: resource.setrlimit(
                              resource.RLIMIT_NOFILE, (soft, hard)))
    budget, after = done.stdout.split()
    return int(budget), int(after)


def test_a_low_soft_limit_is_raised_to_the_hard_one_and_a_quarter_taken():
    assert budget_under(1024, 8192) == (2048, 8192)


def test_a_low_hard_limit_is_kept_and_a_quarter_taken():
    assert budget_under(1024, 1024) == (256, 1024)

