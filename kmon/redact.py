"""Keep secrets out of everything kmon writes or shows.

Client configurations are summarised by a whitelist (see ``kmon.agent``);
command lines, which often carry ``-X sasl.password=...``, are masked here:
secret-looking ``name=value`` and ``--name value`` pairs, secrets embedded in
longer arguments (JSON, JAAS, connection strings), every credential in a URL
or a ``user:password@host`` address, and bearer tokens.
"""

from __future__ import annotations

import re

MASK = "***"
SECRET_NAME = re.compile(
    r"(pass(word|wd|phrase)?|(^|[._-])pwd?([._-]|$)|secret|token|credential|creds?([._-]|$)|"
    r"jaas|private|(^|[._-])key([._-]|$)|key\.pem|apikey|api[._-]key|accesskey|"
    r"user[._-]?info|signature|auth[._-]?header)", re.IGNORECASE)
# Short options that carry a password in common tools (mysql -p; kcat's -p is a partition:
# masking it costs a partition number on screen, never a secret).
SECRET_FLAGS = frozenset({"-p", "--pw"})


def is_secret_name(name: str) -> bool:
    """True for a configuration or option name whose value must never be shown."""
    return bool(SECRET_NAME.search(name.lstrip("-")))


# A secret inside a longer argument: "password": "x", token=x, SharedAccessKey=x ...
_EMBEDDED = re.compile(
    r"""(?P<key>["']?[\w.\-]*(?:password|passwd|pwd|secret|token|credential|accesskey|"""
    r"""user\.info|signature)[\w.\-]*["']?\s*[:=]\s*)"""
    r"""(?P<value>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|[^\s,;}&]+)""", re.IGNORECASE)
# Credentials in a URL: scheme://user:password@host or scheme://token@host (the password
# may itself hold '@': everything up to the last '@' before the host is masked)
_URL_CREDENTIALS = re.compile(
    r"(?P<scheme>[a-z][a-z0-9+.\-]*://)(?P<user>[^/\s:@]*)(?P<colon>:?)(?P<rest>[^/\s]*)@",
    re.IGNORECASE)
# user:password@host[:port] without a scheme (bootstrap strings, JDBC-like values)
_ADDRESS_CREDENTIALS = re.compile(
    r"(?P<head>(?:^|(?<=[\s=,]))[^\s:@/=,]+:)[^\s/]*@(?=[\w.\-\[\]]+(?::\d+)?(?:[\s/,]|$))")
_QUERY_SECRET = re.compile(
    r"(?P<head>[?&;](?:sig|signature|token|access_token|key|password|secret)=)[^&\s;]+",
    re.IGNORECASE)
_BEARER = re.compile(r"(?P<head>\b(?:bearer|basic)\s+)[\w\-._~+/=]+", re.IGNORECASE)


def _url(match: re.Match) -> str:
    if match["colon"]:  # user:password@: keep the user, mask the password
        return f"{match['scheme']}{match['user']}:{MASK}@"
    return f"{match['scheme']}{MASK}@"  # a lone userinfo is a token


def redact_text(text: str) -> str:
    """``text`` with embedded secrets, URL credentials and bearer tokens masked."""
    text = _URL_CREDENTIALS.sub(_url, text)
    text = _ADDRESS_CREDENTIALS.sub(lambda m: f"{m['head']}{MASK}@", text)
    text = _BEARER.sub(lambda m: f"{m['head']}{MASK}", text)
    text = _QUERY_SECRET.sub(lambda m: f"{m['head']}{MASK}", text)
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
        elif arg in SECRET_FLAGS:
            out.append(arg)
            mask_next = True
        elif len(arg) > 2 and arg.startswith("-p") and not arg.startswith("--"):
            out.append(f"{arg[:2]}{MASK}")  # -ppassword, as mysql takes it
        else:
            out.append(redact_text(arg))
            mask_next = arg.startswith("-") and not sep and is_secret_name(arg)
    return out
