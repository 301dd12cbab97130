"""Keep secrets out of everything kmon writes or shows.

Client configurations are summarised by a whitelist (see ``kmon.agent``);
command lines, which often carry ``-X sasl.password=...``, are masked here.
"""

from __future__ import annotations

import re

MASK = "***"
SECRET_NAME = re.compile(
    r"(pass(word|wd|phrase)?|secret|token|credential|jaas|private|(^|[._-])key([._-]|$)|"
    r"key\.pem|apikey|api[._-]key)", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    """True for a configuration or option name whose value must never be shown."""
    return bool(SECRET_NAME.search(name.lstrip("-")))


def redact_args(args: list[str]) -> list[str]:
    """``args`` with the values of secret-looking ``name=value`` and ``--name value`` masked."""
    out: list[str] = []
    mask_next = False
    for arg in args:
        if mask_next:
            out.append(MASK)
            mask_next = False
            continue
        name, sep, _ = arg.partition("=")
        if sep and is_secret_name(name):
            out.append(f"{name}={MASK}")
        else:
            out.append(arg)
            mask_next = arg.startswith("-") and not sep and is_secret_name(arg)
    return out
