"""kmon uses Textual's public API only: no import from a private Textual module or of a private
Textual name, and no widget of kmon's that reads, sets, calls or overrides a private name of
the Textual classes it is built on (any 8.x release may change those: ``textual>=8.2,<9``)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

from textual.app import App
from textual.dom import DOMNode
from textual.message import Message
from textual.screen import Screen

import kmon.widgets

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted([*(ROOT / "kmon").rglob("*.py"), *(ROOT / "widgets").rglob("*.py")])
# ``from textual.widgets._footer import …``, ``import textual._x``, ``from textual.x import _y``
PRIVATE_IMPORT = re.compile(
    r"^\s*(?:from\s+textual(?:\.\w+)*\._\w*|import\s+textual(?:\.\w+)*\._\w*"
    r"|from\s+textual(?:\.\w+)*\s+import\s+\(?[^)\n]*\b_\w+)", re.MULTILINE)
PRIVATE_ATTRIBUTE = re.compile(r"\.(_[A-Za-z]\w*)\b|\bdef\s+(_[A-Za-z]\w*)\b")


def textual_bases(cls: type) -> list[type]:
    return [base for base in cls.__mro__ if base.__module__.split(".")[0] == "textual"]


def private_names(classes: set[type]) -> set[str]:
    """The private (single underscore) names ``classes`` define: class attributes and methods,
    and the attributes their methods set on ``self``."""
    names: set[str] = set()
    for cls in classes:
        names |= {name for name in vars(cls) if name.startswith("_") and not name.startswith("__")}
        try:
            source = inspect.getsource(cls)
        except (OSError, TypeError):
            continue
        names |= set(re.findall(r"\bself\.(_[A-Za-z]\w*)", source))
    return {name for name in names if not name.startswith("__")}


def widget_modules() -> list:
    return [importlib.import_module(f"kmon.widgets.{module_info.name}")
            for module_info in pkgutil.iter_modules(kmon.widgets.__path__)]


def widget_classes() -> list[type]:
    """Every class of kmon.widgets built on a Textual class."""
    return [cls for module in widget_modules()
            for _, cls in inspect.getmembers(module, inspect.isclass)
            if cls.__module__ == module.__name__ and textual_bases(cls)]


def textual_classes_used() -> set[type]:
    """The Textual widgets and messages kmon.widgets builds on or imports (DataTable, Input,
    …), with their Textual bases, and App's and Screen's, which every widget reaches."""
    used = {App, Screen}
    for module in widget_modules():
        used |= {value for value in vars(module).values()
                 if inspect.isclass(value) and issubclass(value, (DOMNode, Message))}
    return {base for cls in used for base in textual_bases(cls)}


def test_no_source_imports_a_private_textual_module_or_name():
    found = [f"{path.relative_to(ROOT)}: {match.group(0).strip()}" for path in SOURCES
             for match in PRIVATE_IMPORT.finditer(path.read_text())]
    assert found == []


def test_no_widget_touches_a_private_name_of_textual_s_classes():
    """The private names of the Textual classes kmon's widgets use (``textual_classes_used``)
    never appear in a kmon widget's source: neither used (``self._row_render_cache``,
    ``self.app._compositor``) nor defined over (an override, or an attribute of kmon's own
    that would shadow Textual's)."""
    classes = widget_classes()
    assert len(classes) > 20  # the widgets were all found
    textual_private = private_names(textual_classes_used())
    assert {"_bindings_ready", "_row_render_cache", "_compositor"} <= textual_private
    found = {}
    for cls in classes:
        used = {name for pair in PRIVATE_ATTRIBUTE.findall(inspect.getsource(cls))
                for name in pair if name}
        if used & textual_private:
            found[f"{cls.__module__}.{cls.__name__}"] = sorted(used & textual_private)
    assert found == {}
