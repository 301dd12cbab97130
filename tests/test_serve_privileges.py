"""kmon serve as an unprivileged user with exactly the systemd unit's capabilities."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from helpers import REPO, Child, get, python_as, wait_for
from prometheus_client.parser import text_string_to_metric_families

UNIT = REPO / "contrib" / "systemd" / "kmon-serve.service"
TRACEFS = Path("/sys/kernel/tracing")


@pytest.fixture
def tracefs_mounted():
    """tracefs on /sys/kernel/tracing, as systemd mounts it on every host (the unit wants
    it): mounted here for the test where the machine has not, and unmounted after."""
    mounted = any(line.split()[1:3] == [str(TRACEFS), "tracefs"]
                  for line in Path("/proc/mounts").read_text().splitlines())
    if not mounted:
        subprocess.run(["mount", "-t", "tracefs", "tracefs", str(TRACEFS)], check=True)
    yield
    if not mounted:
        subprocess.run(["umount", str(TRACEFS)], check=True)


def unit_capabilities() -> list[str]:
    """The unit's AmbientCapabilities, as setpriv names them (sys_ptrace, ...)."""
    (line,) = re.findall(r"^AmbientCapabilities=(.+)$", UNIT.read_text(), re.MULTILINE)
    return [cap.removeprefix("CAP_").lower() for cap in line.split()]


def serve_as(user, caps: list[str]) -> tuple[Child, str]:
    """``kmon serve`` as ``user`` holding ``caps`` (ambient, so they survive the exec)."""
    prefix, env = python_as(user.pw_name)
    env.update(HOME=user.pw_dir, USER=user.pw_name)
    listed = ",".join(f"+{cap}" for cap in caps) or "-all"
    child = Child(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                   "--init-groups", f"--inh-caps={listed}", f"--ambient-caps={listed}", "--",
                   prefix[-1], "-m", "kmon", "serve", "--listen", "127.0.0.1:0",
                   "--interval", "500ms"], env=env)
    wait_for(lambda: any("/metrics" in line for line in child.stderr) or child.proc.poll(),
             "kmon serve started")
    line = next((line for line in child.stderr if "/metrics" in line), None)
    assert line, child.stderr
    return child, line.split("http://", 1)[1].split("/metrics", 1)[0]


def kernel_events_enabled(address: str) -> float:
    """The kmon_kernel_events_enabled gauge /metrics shows."""
    (value,) = [sample.value
                for family in text_string_to_metric_families(get(f"http://{address}/metrics")[2])
                for sample in family.samples if sample.name == "kmon_kernel_events_enabled"]
    return value


def client_instances(address: str, client_id: str) -> float:
    """The client instances /metrics counts for the process of ``client_id`` (from its
    statistics spool)."""
    process = {s.labels["process"] for s in _samples(address, "kmon_connections")
               if s.labels["client_id"] == client_id}
    return sum(sample.value
               for family in text_string_to_metric_families(get(f"http://{address}/metrics")[2])
               for sample in family.samples
               if sample.name == "kmon_client_instances" and sample.labels["process"] in process)


def _samples(address: str, name: str) -> list:
    return [sample for family in text_string_to_metric_families(get(f"http://{address}/metrics")[2])
            for sample in family.samples if sample.name == name]


def connections_of(address: str, client_id: str) -> dict[str, float]:
    """role -> open connections of the client ``client_id``, as /metrics says."""
    roles: dict[str, float] = {}
    for sample in _samples(address, "kmon_connections"):
        if sample.labels["client_id"] == client_id:
            roles[sample.labels["role"]] = roles.get(sample.labels["role"], 0) + sample.value
    return roles


AGENTLESS, INSTRUMENTED = "privileges-agentless", "privileges-instrumented"


@pytest.mark.integration
def test_the_unit_s_capabilities_let_an_unprivileged_user_see_another_user_s_client(
        start_client, throwaway_user, tracefs_mounted):
    caps = unit_capabilities()
    assert caps and "sys_admin" not in caps and "perfmon" in caps
    # root's processes, another user's to kmon; the first named by the client.id it sends
    start_client("consumer", instrument=False, extra_args=("--client-id", AGENTLESS))
    start_client("consumer", extra_args=("--client-id", INSTRUMENTED))  # stats in root's spool
    child, address = serve_as(throwaway_user, caps)
    try:
        roles = wait_for(lambda: (found := connections_of(address, AGENTLESS))
                         and {"coordinator", "broker"} <= found.keys() and found,
                         "root's consumer with its coordinator and broker roles")
        assert roles["coordinator"] >= 1 and roles["broker"] >= 1, roles
        assert kernel_events_enabled(address) == 1, child.stderr
        wait_for(lambda: client_instances(address, INSTRUMENTED) >= 1,
                 "root's instrumented consumer's client instance, from root's spool")
        owner = subprocess.run(["ps", "-o", "user=", "-p", str(child.pid)],
                               capture_output=True, text=True).stdout.strip()
        assert owner == throwaway_user.pw_name
    finally:
        child.stop()
    child, address = serve_as(throwaway_user, [])  # without them: another user's is hidden
    try:
        wait_for(lambda: get(f"http://{address}/healthz")[0] == 200, "a first poll")
        wait_for(lambda: "kmon_last_poll_timestamp_seconds" in get(f"http://{address}/metrics")[2],
                 "a first poll")
        assert not connections_of(address, AGENTLESS)
        assert not connections_of(address, INSTRUMENTED)
        assert client_instances(address, INSTRUMENTED) == 0
        assert kernel_events_enabled(address) == 0
        assert any("kernel TCP events unavailable" in line for line in child.stderr)
    finally:
        child.stop()
