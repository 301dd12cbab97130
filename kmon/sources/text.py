"""The one door for text from outside kmon: what a process, a packet or a file spells
becomes valid Unicode here, before any other part of kmon sees it.

Linux names and command lines are bytes; psutil and ``os`` hand undecodable ones back as
lone surrogates (``surrogateescape``), which no encoder of kmon's outputs takes (orjson,
prometheus_client, pyarrow, a terminal's UTF-8). kmon shows such a byte as the four
characters ``\\xff``, as Python's ``backslashreplace`` does, so that no two byte strings
that differ look the same to whoever reads them and every output gets valid text.
"""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(match: re.Match) -> str:
    code = ord(match[0])
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def valid(text: str) -> str:
    """``text`` (from psutil, ``os``, a path) as valid Unicode: an undecodable byte as
    ``\\xNN``, any other lone surrogate as ``\\uNNNN``."""
    if text.isascii():
        return text
    return _SURROGATE.sub(_escape, text)


def decoded(raw: bytes) -> str:
    """``raw`` as UTF-8 text, an undecodable byte as ``\\xNN`` (as ``valid`` shows it)."""
    return raw.decode("utf-8", "backslashreplace")


def json_value(raw: bytes | str):
    """A JSON document a process wrote, strictly: its strings are valid Unicode, or it is
    refused (ValueError: orjson takes no invalid UTF-8 and no ``\\ud800``-style lone
    surrogate escape, as the standard library's ``json`` does). orjson is imported here,
    not above: the agent, inside a watched process, loads this module's neighbours only."""
    import orjson

    return orjson.loads(raw)
