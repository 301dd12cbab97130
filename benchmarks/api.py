"""What a benchmark gives the runner: its figures, and ratios between figures of one run.

A benchmark module has a docstring (its first line is its summary), ``options(parser)``
adding its own options, and ``run(args) -> Result``. A module that starts copies of
itself in helper roles also has ``ROLES`` and ``helper(args) -> int`` (see helpers.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field


class BenchmarkError(Exception):
    """The benchmark cannot run here (a missing tool, privilege or helper): its message."""


class UsageError(BenchmarkError):
    """The benchmark's options do not go together: its message, exit code 2."""


@dataclass(frozen=True)
class Figure:
    value: float
    unit: str = ""


@dataclass(frozen=True)
class Ratio:
    """``measured`` over ``baseline``: two figures of the same result, so of the same run."""

    measured: str
    baseline: str
    value: float


@dataclass
class Result:
    """One run's figures by name, and the ratios the benchmark draws between them."""

    figures: dict[str, Figure] = field(default_factory=dict)
    ratios: dict[str, Ratio] = field(default_factory=dict)

    def figure(self, name: str, value: float, unit: str = "") -> float:
        self.figures[name] = Figure(float(value), unit)
        return float(value)

    def ratio(self, name: str, measured: str, baseline: str) -> float:
        """The ratio of two figures already in this result (a KeyError otherwise)."""
        value = self.figures[measured].value / self.figures[baseline].value
        self.ratios[name] = Ratio(measured, baseline, value)
        return value
