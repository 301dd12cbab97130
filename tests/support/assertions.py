"""Assertions several modules make about kmon's output."""

from __future__ import annotations

import subprocess

__all__ = ["assert_one_clear_line"]


def assert_one_clear_line(result: subprocess.CompletedProcess, code: int, *words: str) -> None:
    assert result.returncode == code, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], lines[0]
