"""The benchmark runner (``python -m benchmarks``): every benchmark module is registered and
listed, none patches ``sys.path``, and a result file has the shape CONTRIBUTING's table is
made from.

In-process only: the runner is called as a function, and the result file is made from
``json_cost`` run in this process on a tiny snapshot (no helper process, no cluster). The
commit is handed to ``results.document`` as the runner hands it ``results.commit()``'s
answer, so that this test starts no ``git``."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from benchmarks import __main__ as runner
from benchmarks import json_cost, registry, results
from benchmarks.api import Result

BENCHMARKS = Path(runner.__file__).parent


def test_every_module_in_benchmarks_is_registered_or_support() -> None:
    modules = {path.stem for path in BENCHMARKS.glob("*.py")}
    packages = {path.parent.name for path in BENCHMARKS.glob("*/__init__.py")}
    assert modules - set(registry.SUPPORT) == set(registry.NAMES)
    assert packages == {registry.TRUTH}
    assert set(registry.SUPPORT) <= modules


@pytest.mark.parametrize("name", registry.NAMES)
def test_every_benchmark_gives_the_runner_its_entry(name: str) -> None:
    module = registry.load(name)
    parser = argparse.ArgumentParser()
    module.options(parser)
    assert callable(module.run)
    assert module.__doc__ and registry.summary(name)
    if hasattr(module, "ROLES"):
        assert callable(module.helper)


def test_no_benchmark_patches_sys_path() -> None:
    patching = re.compile(r"sys\.path\.(insert|append|extend)|sys\.path\s*[+]?=")
    offenders = [str(path.relative_to(BENCHMARKS)) for path in BENCHMARKS.rglob("*.py")
                 if patching.search(path.read_text())]
    assert offenders == []


def test_list_names_every_benchmark_and_the_truth_harness(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert runner.main(["--list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == [*registry.NAMES, registry.TRUTH]


def test_an_unknown_benchmark_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert runner.main(["no_such_benchmark"]) == 2
    assert "--list" in capsys.readouterr().err


def test_options_that_do_not_go_together_are_a_usage_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Checked before any helper starts: nothing runs."""
    assert runner.main(["poll_cost", "--sockets", "1"]) == 2
    assert capsys.readouterr().err.startswith("poll_cost: --sockets must be at least 2")


def test_a_ratio_is_only_between_figures_of_the_same_result() -> None:
    result = Result()
    result.figure("measured", 3.0, "ms")
    with pytest.raises(KeyError):
        result.ratio("measured / baseline", "measured", "baseline")
    result.figure("baseline", 2.0, "ms")
    assert result.ratio("measured / baseline", "measured", "baseline") == 1.5


def test_a_result_without_a_ratio_is_not_written(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    result = Result()
    result.figure("alone", 1.0)
    out = tmp_path / "x.json"
    assert runner.report("x", argparse.Namespace(out=out), result) == 1
    assert not out.exists()
    assert "no ratio" in capsys.readouterr().err


def test_result_file_shape_and_the_table_made_from_it(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    json_cost.options(parser)
    args = parser.parse_args(["--connections", "20", "--rounds", "3"])
    result = json_cost.run(args)
    commit = {"sha": "0" * 40, "dirty": False}
    path = results.write(results.document("json_cost", vars(args), result, commit),
                         tmp_path / "json_cost.json")

    doc = json.loads(path.read_text())
    assert set(doc) == {"benchmark", "date", "commit", "machine", "versions", "options",
                        "figures", "ratios"}
    assert doc["benchmark"] == "json_cost" and doc["commit"] == commit
    assert doc["options"] == {"connections": 20, "rounds": 3}
    assert {"cores", "cpu", "memory_bytes", "kernel", "arch"} == set(doc["machine"])
    assert doc["machine"]["cores"] >= 1 and doc["machine"]["memory_bytes"] > 0
    assert {"python", "kmon", "textual", "orjson"} <= set(doc["versions"])
    assert all(set(f) == {"value", "unit"} for f in doc["figures"].values())
    assert doc["ratios"], "every benchmark draws a ratio against its baseline"
    for ratio in doc["ratios"].values():
        assert set(ratio) == {"measured", "baseline", "value"}
        measured, baseline = doc["figures"][ratio["measured"]], doc["figures"][ratio["baseline"]]
        assert ratio["value"] == pytest.approx(measured["value"] / baseline["value"])

    table = results.table(tmp_path)
    rows = [line for line in table.splitlines() if line.startswith("| `json_cost` |")]
    assert table.startswith("| benchmark | ratio |") and len(rows) == len(doc["ratios"])
    assert all("`0000000`" in row for row in rows)
    assert f"Measured on {doc['machine']['cores']} cores" in table
