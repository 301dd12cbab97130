"""The type checker finds nothing: mypy with pyproject.toml's configuration (strict on
kmon.model, kmon.evidence and kmon.engine, mypy's defaults and ``check_untyped_defs`` on the
rest of kmon), run as a developer runs it, from the repository's root."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # mypy runs in a process of its own

REPO = Path(__file__).parent.parent


def test_mypy_finds_no_error():
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True,
                            text=True, timeout=240)
    assert result.returncode == 0, f"mypy found type errors:\n{result.stdout}{result.stderr}"
