"""A benchmark's result as JSON (with the machine, the versions and the commit it was
measured on), and CONTRIBUTING's table made from those files."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

from benchmarks.api import Result
from benchmarks.helpers import REPO

RESULTS = Path(__file__).resolve().parent / "results"
#: the distributions whose version a figure depends on (those not installed are left out)
DISTRIBUTIONS = ("kmon", "textual", "rich", "confluent-kafka", "psutil", "pyarrow", "orjson",
                 "pyspark", "prometheus-client")


def machine() -> dict[str, object]:
    meminfo = Path("/proc/meminfo")
    memory = next((int(line.split()[1]) * 1024 for line in meminfo.read_text().splitlines()
                   if line.startswith("MemTotal:")), None) if meminfo.exists() else None
    cpuinfo = Path("/proc/cpuinfo")
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                  if line.startswith("model name")), None) if cpuinfo.exists() else None
    return {"cores": os.cpu_count(), "cpu": model or platform.processor(),
            "memory_bytes": memory, "kernel": platform.release(), "arch": platform.machine()}


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in DISTRIBUTIONS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


#: the files a figure depends on: ``dirty`` when one of them differs from the commit
CODE = ("kmon", "widgets", "benchmarks", "pyproject.toml")


def commit() -> dict[str, object] | None:
    """The checkout's commit and whether its code differs from it; None outside a git
    checkout."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                              check=True, timeout=30).stdout.strip()
    try:
        return {"sha": git("rev-parse", "HEAD"),
                "dirty": bool(git("status", "--porcelain", "--untracked-files=no", "--", *CODE))}
    except (OSError, subprocess.SubprocessError):
        return None


def document(name: str, options: dict[str, object], result: Result,
             measured_on: dict[str, object] | None) -> dict[str, object]:
    """The result file's contents; ``measured_on`` is ``commit()``'s answer."""
    return {
        "benchmark": name,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": measured_on, "machine": machine(), "versions": versions(), "options": options,
        "figures": {k: dataclasses.asdict(v) for k, v in result.figures.items()},
        "ratios": {k: dataclasses.asdict(v) for k, v in result.ratios.items()},
    }


def write(doc: dict[str, object], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    return path


def table(directory: Path = RESULTS) -> str:
    """The Markdown table of every result file in ``directory``: a row a ratio (and a row
    for each figure no ratio uses), then the machines and versions they were measured on."""
    rows = ["| benchmark | ratio | × | measured | baseline | commit, date |",
            "|---|---|--:|--:|--:|---|"]
    machines: dict[str, list[str]] = {}
    for path in sorted(directory.glob("*.json")):
        doc = json.loads(path.read_text())
        measured_on = doc["commit"] or {}
        edited = " (edited)" if measured_on.get("dirty") else ""
        when = f"`{measured_on.get('sha', '?')[:7]}`{edited}, {doc['date'][:10]}"
        figures, used = doc["figures"], set()
        for name, ratio in doc["ratios"].items():
            used |= {ratio["measured"], ratio["baseline"]}
            rows.append(f"| `{doc['benchmark']}` | {name} | {ratio['value']:.3g} | "
                        f"{_figure(figures[ratio['measured']])} | "
                        f"{_figure(figures[ratio['baseline']])} | {when} |")
        rows += [f"| `{doc['benchmark']}` | {name} | | {_figure(figure)} | | {when} |"
                 for name, figure in figures.items() if name not in used]
        machines.setdefault(_machine(doc), []).append(f"`{doc['benchmark']}`")
    notes = [f"\nMeasured on {box}: {', '.join(names)}." for box, names in machines.items()]
    return "\n".join(rows) + "\n" + "".join(notes)


def _machine(doc: dict) -> str:
    box, versions = doc["machine"], doc["versions"]
    memory = (box["memory_bytes"] or 0) / 2**30
    return (f"{box['cores']} cores ({box['cpu']}), {memory:.0f} GiB, Linux {box['kernel']}; "
            + ", ".join(f"{name} {version}" for name, version in versions.items()))


def _figure(figure: dict) -> str:
    value = figure["value"]
    shown = f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    return f"{shown} {figure['unit']}".strip()
