"""CSV cells that are safe to open in a spreadsheet.

``kmon analyze`` writes what recordings hold: client ids, process names and addresses
that watched processes chose. In a CSV such a cell could carry escape sequences for the
terminal that shows the file, or start with ``=``, ``+``, ``-`` or ``@``, which a
spreadsheet runs as a formula (``=HYPERLINK(...)``). Every text cell loses its control
characters (``kmon.present.plain_text.CONTROL_CODES``), and one that would start a formula gets
a leading ``'``, so the spreadsheet shows it as the text it is.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from kmon.present.plain_text import CONTROL_CODES

_CONTROLS = "[" + "".join(f"\\x{{{code:x}}}" for code in CONTROL_CODES) + "]"  # RE2 syntax
_FORMULA = r"^(\s*[=+\-@])"


def spreadsheet_safe(table: pa.Table) -> pa.Table:
    """``table`` with every text cell stripped of control characters and kept from being
    read as a formula; other columns as they are."""
    for index, field in enumerate(table.schema):
        if pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
            column = pc.replace_substring_regex(table.column(index), _CONTROLS, "")
            column = pc.replace_substring_regex(column, _FORMULA, r"'\1")
            table = table.set_column(index, field, column)
    return table
