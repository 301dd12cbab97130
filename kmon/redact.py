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


# A secret inside a longer argument: "password": "x", token=x, sasl.password: x ...
_EMBEDDED = re.compile(
    r"""(?P<key>["']?[\w.\-]*(?:password|passwd|secret|token|credential)[\w.\-]*["']?\s*[:=]\s*)"""
    r"""(?P<value>"[^"]*"|'[^']*'|[^\s,;}&]+)""", re.IGNORECASE)
# Credentials in a URL: scheme://user:password@host
_URL_CREDENTIALS = re.compile(r"(?P<head>[a-z][a-z0-9+.\-]*://[^/\s:@]*:)[^/\s@]+@",
                              re.IGNORECASE)


def redact_text(text: str) -> str:
    """``text`` with embedded ``secret=value`` pairs and URL passwords masked."""
    text = _URL_CREDENTIALS.sub(lambda m: f"{m['head']}{MASK}@", text)
    return _EMBEDDED.sub(lambda m: f"{m['key']}{MASK}", text)


def redact_args(args: list[str]) -> list[str]:
    """``args`` with secret-looking ``name=value``, ``--name value`` and embedded secrets masked."""
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
            out.append(redact_text(arg))
            mask_next = arg.startswith("-") and not sep and is_secret_name(arg)
    return out
