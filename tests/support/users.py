"""Running code as another user (a throwaway user made by conftest's fixture)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

__all__ = ["python_as"]


def python_as(user: str) -> tuple[list[str], dict[str, str]]:
    """(argv prefix, environment) running this test's Python code as ``user``.

    The test's own interpreter may live where other users cannot read it (pyenv
    under /root): the system's interpreter of the same minor version is used,
    with this environment's site-packages added as a site directory (so that the
    installed kmon, ``kmon.widgets`` included, imports as here). Skips the test
    where there is none.
    """
    import sysconfig
    import tempfile

    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    system = Path("/usr/bin") / version
    if not system.exists():
        pytest.skip(f"no {system} that another user can run")
    packages = sysconfig.get_paths()["purelib"]
    boot = Path(tempfile.mkdtemp(prefix="kmon-site-"))
    boot.chmod(0o755)
    (boot / "sitecustomize.py").write_text(f"import site\nsite.addsitedir({packages!r})\n")
    (boot / "sitecustomize.py").chmod(0o644)
    env = {k: v for k, v in os.environ.items() if k not in ("KMON_SPOOL_DIR", "PYTHONHOME")}
    env["PYTHONPATH"] = str(boot)
    return ["runuser", "-u", user, "--", str(system)], env
