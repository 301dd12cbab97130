"""kmon never lists its own processes, and no other user can make it hide theirs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import psutil
import pytest
from helpers import kmon, python_as, start_serve, wait_for

pytestmark = pytest.mark.integration  # a mock cluster, real clients, a throwaway user

# a throwaway user's producer that records itself as kmon would (in its own user's kmon
# directory) and tries root's directory too, then runs as a plain workload client
FORGER = """\
import os, runpy, sys
from pathlib import Path
from kmon.sources.processes import own_processes
own_processes.register(os.getpid())
try:
    Path("/var/cache/kmon/processes", str(os.getpid())).write_text("forged")
    print("root's directory written", flush=True)
except OSError:
    print("root's directory refused", flush=True)
sys.argv = ["workload", "producer", sys.argv[1]]
runpy.run_module("kmon.devtools.workload", run_name="__main__")
"""


def _listed() -> set[int]:
    result = kmon("ps", "-o", "json", "--settle", "0")
    assert result.returncode == 0, result.stderr
    return {row["pid"] for row in json.loads(result.stdout)["processes"]}


def _listed_with(pid: int) -> set[int] | None:
    listed = _listed()
    return listed if pid in listed else None


def test_ps_lists_the_clients_but_never_kmon_itself(cluster, start_client):
    """A `kmon serve -b` (which maps librdkafka and holds connections to the brokers) and
    the `kmon devcluster` behind the cluster are kmon's, not clients; the workload is one."""
    client = start_client("producer", instrument=False)
    serve, _ = start_serve("-b", cluster)
    try:
        wait_for(lambda: psutil.Process(serve.pid).net_connections("tcp"),
                 "kmon serve's connections to the brokers")
        listed = wait_for(lambda: _listed_with(client.pid), "the workload client listed")
        devcluster = {p.pid for p in psutil.process_iter(["cmdline"])
                      if "devcluster" in (p.info["cmdline"] or [])}
        assert serve.pid not in listed
        assert not devcluster & listed
    finally:
        serve.stop()


def test_a_user_cannot_hide_a_client_from_roots_kmon(cluster, throwaway_user):
    """What another user records of their own process, where they can write, never hides
    it from root's kmon; root's own directory refuses them."""
    prefix, env = python_as(throwaway_user.pw_name)
    env["HOME"] = throwaway_user.pw_dir
    env.pop("XDG_CACHE_HOME", None)
    forger = subprocess.Popen([*prefix, "-c", FORGER, cluster], env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert forger.stdout.readline().strip() == "root's directory refused"
        while forger.stdout.readline().strip() != "READY":
            pass
        pid = psutil.Process(forger.pid).children()[0].pid  # runuser's child
        assert (Path(throwaway_user.pw_dir) / ".cache/kmon/processes" / str(pid)).exists()
        wait_for(lambda: pid in _listed(), "the other user's client listed by root's kmon")
    finally:
        forger.kill()
        forger.wait()
