"""Packages derived from the tree: kmon/ and its subpackages, and widgets/ as kmon.widgets.

pyproject.toml holds everything else; setuptools' own finder cannot install a top-level
folder under another package's name, so this file only maps and lists.
"""

from setuptools import find_packages, setup

WIDGETS = {"kmon.widgets": "widgets"} | {
    f"kmon.widgets.{name}": f"widgets/{name.replace('.', '/')}" for name in find_packages("widgets")
}

setup(
    package_dir={"kmon": "kmon", **WIDGETS},
    packages=find_packages(include=["kmon", "kmon.*"]) + sorted(WIDGETS),
)
