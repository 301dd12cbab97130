"""The JSON lines kmon prints (``--json``): orjson's, with C1 controls and DEL escaped.

JSON lets DEL and the C1 controls (U+0080-U+009F) stand raw in a string, and orjson
writes them so; a process name or client id that carries them (``\\u009b`` is a CSI,
as ESC [ is) would act on a terminal that shows the output. kmon writes them as
``\\u007f`` and ``\\u0080``-``\\u009f``: the same JSON values, and plain ASCII bytes.
In UTF-8 those characters are exactly the byte 0x7F and the pairs C2 80-C2 9F (0xC2 is
never a continuation byte), and they can only stand inside strings, so the escape is
made on the bytes orjson wrote.
"""

from __future__ import annotations

import orjson

_C1_ESCAPES = {code: b"\\u00%02x" % code for code in range(0x80, 0xA0)}


def escape_c1(data: bytes) -> bytes:
    """UTF-8 JSON ``data`` with DEL and every C1 control written as a ``\\u`` escape.

    Byte searches and splits only (a regular expression over a megabyte line costs
    more than writing it): most lines hold neither byte and come back as they are."""
    if b"\x7f" in data:
        data = data.replace(b"\x7f", b"\\u007f")
    if b"\xc2" not in data:
        return data
    first, *rest = data.split(b"\xc2")  # every piece after the first: what followed a C2
    return first + b"".join(_C1_ESCAPES[piece[0]] + piece[1:] if piece[:1] and piece[0] < 0xA0
                            else b"\xc2" + piece for piece in rest)


def json_line(record: object) -> bytes:
    """``record`` as one JSON line, newline included, safe to show on a terminal."""
    return escape_c1(orjson.dumps(record)) + b"\n"
