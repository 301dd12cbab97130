"""The package list, derived from the tree: each folder of pyproject.toml's package-dir
and its subpackages (setuptools' own finder cannot install widgets/ as kmon.widgets)."""

import sys
from pathlib import Path

from setuptools import find_packages, setup

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

FOLDERS = tomllib.loads(Path(__file__).with_name("pyproject.toml").read_text())[
    "tool"]["setuptools"]["package-dir"]

setup(packages=sorted({name: None for name in FOLDERS} | {
    f"{name}.{sub}": None for name, folder in FOLDERS.items() for sub in find_packages(folder)}))
