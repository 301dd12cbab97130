"""Where tracefs is not mounted, kmon mounts it on a private directory for each read of it and
unmounts it after. A kmon killed inside that read leaves the mount behind; the next kmon
started as root removes it, and never a live kmon's mount or a directory of another user."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kmon.sources.kernel.kernel_events import MNT_DETACH

as_root = pytest.mark.root(reason="mounting tracefs needs root")

# python -c KILLED_INSIDE: kmon's private tracefs mount made, its path printed, then SIGKILL
KILLED_INSIDE = """
import os
from kmon.sources.kernel import kernel_events
kernel_events.TRACEFS_PLACES = ()  # as on a host where tracefs is not mounted
with kernel_events.tracefs() as root:
    print(root, flush=True)
    os.kill(os.getpid(), 9)
"""


def mounted(path: Path) -> bool:
    """Whether the kernel lists a tracefs mount on ``path``."""
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        return any(fields.split(" ")[4] == str(path) and rest.startswith("tracefs ")
                   for fields, _, rest in (line.partition(" - ") for line in handle))


@pytest.mark.integration
@as_root
def test_a_killed_kmon_s_tracefs_mount_goes_when_kmon_starts_again(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # kmon's temporary directory: this test's
    killed = subprocess.Popen([sys.executable, "-c", KILLED_INSIDE], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env)
    out, err = killed.communicate(timeout=60)
    assert killed.returncode == -9, err
    left = Path(out.strip())
    live = tmp_path / f"kmon-tracefs-{os.getpid()}-live0000"  # a running kmon's
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        assert left.parent == tmp_path and left.name.startswith("kmon-tracefs-")
        assert mounted(left)  # left behind: nothing ran at its end
        live.mkdir()
        assert libc.mount(b"nodev", str(live).encode(), b"tracefs", 0, None) == 0
        foreign = tmp_path / "kmon-tracefs-theirs00"  # another user's directory of that name
        foreign.mkdir()
        os.chown(foreign, 65534, 65534)
        listed = subprocess.run([sys.executable, "-m", "kmon", "ps"], capture_output=True,
                                text=True, env=env, timeout=120)
        assert listed.returncode == 0, listed.stderr
        assert not mounted(left) and not left.exists()
        assert mounted(live) and foreign.is_dir()
    finally:
        for leftover in (left, live):
            if mounted(leftover):
                libc.umount2(str(leftover).encode(), MNT_DETACH)
