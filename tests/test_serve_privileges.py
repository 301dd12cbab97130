"""kmon serve as an unprivileged user with exactly the systemd unit's capabilities."""

from __future__ import annotations

import re
import subprocess

import pytest
from helpers import REPO, Child, get, python_as, wait_for
from prometheus_client.parser import text_string_to_metric_families

UNIT = REPO / "contrib" / "systemd" / "kmon-serve.service"


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


def connections_of(address: str, pid: int) -> dict[str, float]:
    """role -> open connections of ``pid``, as /metrics says."""
    roles: dict[str, float] = {}
    for family in text_string_to_metric_families(get(f"http://{address}/metrics")[2]):
        for sample in family.samples:
            if sample.name == "kmon_connections" and sample.labels["pid"] == str(pid):
                roles[sample.labels["role"]] = roles.get(sample.labels["role"], 0) + sample.value
    return roles


@pytest.mark.integration
def test_the_unit_s_capabilities_let_an_unprivileged_user_see_another_user_s_client(
        start_client, throwaway_user):
    caps = unit_capabilities()
    assert caps and "sys_admin" not in caps
    consumer = start_client("consumer", instrument=False)  # root's process: another user's
    child, address = serve_as(throwaway_user, caps)
    try:
        roles = wait_for(lambda: (found := connections_of(address, consumer.pid))
                         and {"coordinator", "broker"} <= found.keys() and found,
                         "root's consumer with its coordinator and broker roles")
        assert roles["coordinator"] >= 1 and roles["broker"] >= 1, roles
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
        assert not connections_of(address, consumer.pid)
    finally:
        child.stop()
