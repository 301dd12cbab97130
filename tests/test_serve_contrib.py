"""What kmon ships for Prometheus and Grafana: rules that pass their promtool tests, a dashboard
and docs that name only metrics kmon serve exposes."""

from __future__ import annotations

import json
import re

import pytest
from helpers import REPO, promtool, require_prometheus

from kmon.export.collector import family_names

RULES = REPO / "contrib" / "prometheus" / "kmon-rules.yml"
DASHBOARD = REPO / "contrib" / "grafana" / "kmon.json"
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def named_metrics(text: str) -> set[str]:
    """The kmon metric families an expression names (a histogram's series by their family)."""
    names = set()
    for name in re.findall(r"\bkmon_[a-z_]+", text):
        family = next((name[: -len(s)] for s in HISTOGRAM_SUFFIXES if name.endswith(s)
                       and name[: -len(s)] in family_names()), name)
        names.add(family)
    return names


def dashboard_exprs() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel["targets"]]


@pytest.mark.integration
def test_rules_pass_their_promtool_tests():
    require_prometheus()
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", str(RULES.with_name("kmon-rules.test.yml")))
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr
    alerts = re.findall(r"^ *- alert: (\w+)$", RULES.read_text(), re.MULTILINE)
    assert len(alerts) >= 6
    tests = RULES.with_name("kmon-rules.test.yml").read_text()
    assert all(f"alertname: {alert}" in tests for alert in alerts), alerts


@pytest.mark.integration
def test_the_dashboard_queries_parse_and_name_only_exposed_metrics(tmp_path):
    require_prometheus()
    exprs = dashboard_exprs()
    assert len(exprs) >= 10
    named = set().union(*(named_metrics(expr) for expr in exprs))
    named |= named_metrics(RULES.read_text())
    assert named <= set(family_names()), named - set(family_names())
    # every query is PromQL as Prometheus parses it, Grafana's variables filled in
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"kmon_dashboard:query{i}",
         "expr": expr.replace("$__rate_interval", "5m").replace("$instance", ".*")
                     .replace("$cluster", ".*")} for i, expr in enumerate(exprs)]}]}
    (tmp_path / "queries.yml").write_text(json.dumps(rules))  # JSON is YAML
    checked = promtool("check", "rules", str(tmp_path / "queries.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_docs_list_every_metric_kmon_serve_exposes():
    text = (REPO / "docs" / "metrics.md").read_text()
    documented = set(re.findall(r"^\| `(kmon_[a-z_]+)` \|", text, re.MULTILINE))
    assert documented == set(family_names())


def test_the_unit_runs_what_the_readme_installs_and_listens_where_the_scrape_looks():
    """The unit's program is where the README installs kmon, it listens on the port the
    scrape configs name and on an address a Prometheus server on another host reaches, and
    the docs count its capabilities right."""
    unit = (REPO / "contrib" / "systemd" / "kmon-serve.service").read_text()
    readme = (REPO / "README.md").read_text()
    metrics_doc = (REPO / "docs" / "metrics.md").read_text()
    ((program, args),) = re.findall(r"^ExecStart=(\S+) serve (.*)$", unit, re.MULTILINE)
    venv = program.removesuffix("/bin/kmon")
    assert venv != program and f"python3 -m venv {venv}" in readme, program
    assert f"{venv}/bin/pip install" in readme
    host, port = re.search(r"--listen (\S+)", args).group(1).rsplit(":", 1)
    assert host not in ("127.0.0.1", "localhost", "[::1]"), host
    scraped = set(re.findall(r"'[\w.-]+:(\d+)'", readme + metrics_doc))
    assert scraped == {port}, scraped
    (caps,) = re.findall(r"^AmbientCapabilities=(.+)$", unit, re.MULTILINE)
    count = {3: "three", 4: "four", 5: "five"}[len(caps.split())]
    for doc in (metrics_doc, (REPO / "docs" / "security.md").read_text()):
        words = " ".join(doc.split())
        assert f"{count} capabilities" in words or f"{count} ambient capabilities" in words
