"""Running code as another user (a throwaway user made by conftest's fixture)."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import stat
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
from support.common import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

__all__ = ["python_as", "readable_by_all", "package_dirs", "user_site"]


def python_as(user: str) -> tuple[list[str], dict[str, str]]:
    """(argv prefix, environment) running this test's Python code as ``user``.

    The test's own interpreter may live where other users cannot read it (pyenv
    under /root): the system's interpreter of the same minor version is used, with
    ``user_site()`` on its path (so that kmon, ``kmon.widgets`` included, and what it
    needs import as here). Skips the test where there is no such interpreter.
    """
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    system = Path("/usr/bin") / version
    if not system.exists():
        pytest.skip(f"no {system} that another user can run")
    env = {k: v for k, v in os.environ.items() if k not in ("KMON_SPOOL_DIR", "PYTHONHOME")}
    env["PYTHONPATH"] = str(user_site())
    return ["runuser", "-u", user, "--", str(system)], env


def readable_by_all(path: Path) -> bool:
    """Whether any user can read ``path``: it is readable by others, and every directory
    above it searchable by them (a clone in a mode-0700 home is not)."""
    path = path.resolve()
    if not path.stat().st_mode & stat.S_IROTH:
        return False
    return all(parent.stat().st_mode & stat.S_IXOTH for parent in path.parents)


def package_dirs() -> dict[str, Path]:
    """Each of kmon's packages and its directory in this checkout, as pyproject.toml maps
    them (``kmon.widgets`` lives in ``widgets/``)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    return {name: REPO / path
            for name, path in config["tool"]["setuptools"]["package-dir"].items()}


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)  # the same file, at once, where the file system allows
    except OSError:
        shutil.copy2(source, target)


def _readable_copy(source: Path, target: Path) -> None:
    shutil.copytree(source, target, copy_function=_link_or_copy, symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)


@functools.cache
def user_site() -> Path:
    """A directory any user can read that puts this checkout's kmon (``package_dirs``) and
    this environment's packages on another user's path: its ``sitecustomize`` adds the
    site-packages as a site directory. Where other users cannot read the clone or the
    environment (a clone in a mode-0700 home), they are copied in (hard links where the file
    system allows), once per test process and removed when it ends."""
    site = Path(tempfile.mkdtemp(prefix="kmon-user-site-"))
    atexit.register(shutil.rmtree, site, ignore_errors=True)
    site.chmod(0o755)
    packages = Path(sysconfig.get_paths()["purelib"])
    if not readable_by_all(packages):
        _readable_copy(packages, site / "site-packages")
        packages = site / "site-packages"
    sources = package_dirs()
    if not all(readable_by_all(path) for path in sources.values()):
        for name, path in sorted(sources.items()):  # an editable install points into the clone
            _readable_copy(path, site.joinpath(*name.split(".")))
    (site / "sitecustomize.py").write_text(f"import site\nsite.addsitedir({str(packages)!r})\n")
    (site / "sitecustomize.py").chmod(0o644)
    return site
