"""One real Kafka cluster for a whole test run, shared by pytest-xdist's workers: the first
worker that needs it starts it, the others attach to what it saved, and it stops once the
last is done (``support.run_shared``, ``KafkaCluster.save``/``attach``)."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest
from helpers import TESTS, Child, require_java, wait_for

from kmon.devtools.kafka_cluster import ClusterError, KafkaCluster, KafkaNode

pytest_plugins = ["pytester"]

USER = """
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
from support.run_shared import acquire, release
directory = __import__("pathlib").Path(sys.argv[2])
value, started = acquire(directory, "thing", lambda: {"by": os.getpid()}, lambda v: v,
                         lambda saved: saved)
print(json.dumps({"value": value, "started": started}), flush=True)
sys.stdin.readline()
release(directory, "thing", started)
with open(directory / "released", "a") as log:
    log.write(f"{os.getpid()}\\n")
print("RELEASED", flush=True)
"""


def user(directory: Path) -> tuple[Child, dict]:
    """A worker's stand-in: acquires ``thing``, releases it when told (``done``)."""
    child = Child([sys.executable, "-c", USER, str(TESTS), str(directory)])
    return child, json.loads(child.wait_line("{"))


def done(child: Child) -> None:
    child.proc.stdin.write("\n")
    child.proc.stdin.flush()


def released(directory: Path) -> list[int]:
    path = directory / "released"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


@pytest.mark.integration
def test_the_starter_releases_last_and_a_later_user_starts_anew(tmp_path):
    starter, first = user(tmp_path)
    held, second = user(tmp_path)
    killed, third = user(tmp_path)
    try:
        assert first == {"value": {"by": starter.pid}, "started": True}
        assert second == third == {"value": {"by": starter.pid}, "started": False}
        done(starter)  # it waits for the other two
        os.kill(killed.pid, signal.SIGKILL)  # a crashed worker (a zombie: not reaped here)
        done(held)
        starter.wait_line("RELEASED", timeout=60)
        assert released(tmp_path) == [held.pid, starter.pid]  # after the last living user
        late, fourth = user(tmp_path)  # the starter is done with it: a new one is made
        done(late)
        late.wait_line("RELEASED")
        assert fourth == {"value": {"by": late.pid}, "started": True}
    finally:
        for child in (starter, held, killed):
            child.stop()


@pytest.mark.integration
def test_a_starter_gone_without_releasing_is_replaced(tmp_path):
    starter, _ = user(tmp_path)
    starter.stop()
    after, state = user(tmp_path)
    done(after)
    after.wait_line("RELEASED")
    assert state == {"value": {"by": after.pid}, "started": True}


def test_an_attached_cluster_reaches_the_same_nodes_and_never_stops_them(tmp_path):
    nodes = [KafkaNode(n, {"PLAINTEXT": 9000 + n, "SSL": 9100 + n}, tmp_path / f"node-{n}",
                       started_pid=4000 + n) for n in (1, 2, 3)]
    started = KafkaCluster(3, {"num.partitions": "1"}, nodes, tmp_path, "secret")
    view = KafkaCluster.attach(json.loads(json.dumps(started.save())))
    assert view.bootstrap() == started.bootstrap() == "127.0.0.1:9001,127.0.0.1:9002,127.0.0.1:9003"
    assert view.bootstrap("SSL") == started.bootstrap("SSL")
    assert (view.ca_file, view.client_config("SSL", "java"), view.sasl_password) == (
        started.ca_file, started.client_config("SSL", "java"), "secret")
    assert [node.pid for node in view.nodes] == [4001, 4002, 4003]
    for refused in (lambda: view.kill(view.nodes[0]), lambda: view.start_node(view.nodes[0]),
                    view.start, view.stop):
        with pytest.raises(ClusterError, match="another process started"):
            refused()
    assert tmp_path.exists()


# each worker holds the cluster until all three saw it: a worker done before another began
# would rightly stop it (the last user), and the next start a cluster of its own
RUN_TEST = """
import json, os, time
import pytest

pytestmark = pytest.mark.integration

def test_sees_the_cluster(kafka):
    with open(os.environ["SEEN"], "a") as seen:
        seen.write(json.dumps([kafka.bootstrap(), [n.pid for n in kafka.nodes]]) + "\\n")
    deadline = time.monotonic() + 120
    while (len(open(os.environ["SEEN"]).read().splitlines()) < 3
           and time.monotonic() < deadline):
        time.sleep(0.1)
"""


@pytest.mark.integration
@pytest.mark.kafka
def test_xdist_workers_share_one_cluster_stopped_at_the_end(pytester, monkeypatch, tmp_path):
    """Three workers, one file each, at once: all see one cluster; none of its JVMs outlives
    the run."""
    pytest.importorskip("xdist")
    require_java()
    pytester.makeconftest((TESTS / "conftest.py").read_text())
    pytester.makepyfile(**{f"test_worker_{n}": RUN_TEST for n in range(3)})
    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    monkeypatch.setenv("SEEN", str(tmp_path / "seen"))
    result = pytester.runpytest_subprocess("-n", "3", "--dist", "loadfile", "-p", "xdist",
                                           "-p", "no:randomly", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
    seen = [json.loads(line) for line in (tmp_path / "seen").read_text().splitlines()]
    assert len(seen) == 3 and len({json.dumps(each) for each in seen}) == 1, seen
    pids = seen[0][1]
    assert len(pids) == 3 and None not in pids
    wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in pids),
             "the cluster's JVMs gone with the run", 10)
