"""Keep secrets out of everything kmon writes or shows.

Client configurations are summarised by a whitelist (see ``kmon.agent``);
command lines, which often carry ``-X sasl.password=...``, are masked here:
secret-looking ``name=value`` and ``--name value`` pairs, secrets embedded in
longer arguments (JSON, JAAS, connection strings), every credential in a URL
or a ``user:password@host`` address, ``-u user:password`` (curl and the like),
``Authorization:`` headers with or without a scheme, and the same option forms
inside one shell-string argument (``sh -c "app --password S"``).
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
# Options whose value is user:password (curl -u/-U, --proxy-user, httpie --auth): the part
# after the first ':' is masked; a value without ':' (psql -U name) is only a user name.
USER_PASSWORD_FLAGS = frozenset({"-u", "--user", "-U", "--proxy-user", "--auth",
                                 "--basic-auth"})


def is_secret_name(name: str) -> bool:
    """True for a configuration or option name whose value must never be shown."""
    return bool(SECRET_NAME.search(name.lstrip("-")))


# Every pattern here runs in time linear in the argument (a command line is its user's to
# write, up to 128 KiB an argument): a match is tried only where a word starts, a name
# is read once (a lookahead for the secret word, then the word taken whole, never given
# back), a scheme is read to 32 characters at most (any of them may start it), and the '@'
# of a credential is looked for once.
# A secret inside a longer argument: "password": "x", token=x, SharedAccessKey=x ...
_EMBEDDED = re.compile(
    r"""(?P<key>(?<![\w.\-])["']?(?=[\w.\-]*?(?:password|passwd|pwd|secret|token|"""
    r"""credential|accesskey|user\.info|signature|api[_.\-]?key))"""
    r"""(?=(?P<name>[\w.\-]*))(?P=name)["']?\s*[:=]\s*)"""
    r"""(?P<value>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|[^\s,;}&]+)""", re.IGNORECASE)
# Credentials in a URL: scheme://user:password@host or scheme://token@host (the password
# may itself hold '@': everything up to the last '@' before the host is masked)
_URL_CREDENTIALS = re.compile(
    r"(?P<scheme>[a-z0-9+.\-]{1,32}://)(?=[^/\s]*@)(?P<user>[^/\s:@]*)(?P<colon>:?)"
    r"(?P<rest>[^/\s]*)@", re.IGNORECASE)
# user:password@host[:port] without a scheme (bootstrap strings, JDBC-like values), within
# one run of characters but whitespace and '/': ``_address_credentials``
_RUN = re.compile(r"[^\s/]+")
_HOST_AFTER = re.compile(r"[\w.\-\[\]]+(?::\d+)?(?:,|$)")  # a host, then its run ends or ','
_HEAD_END = re.compile(r"[:@=,]")  # where a user name ends
_NAME_AFTER = re.compile(r"[=,]")  # ... and where another may start
_QUERY_SECRET = re.compile(
    r"(?P<head>[?&;](?:sig|signature|token|access_token|key|password|secret)=)[^&\s;]+",
    re.IGNORECASE)
_BEARER = re.compile(r"(?P<head>\b(?:bearer|basic)\s+)[\w\-._~+/=]+", re.IGNORECASE)
# an Authorization header's credentials, with a scheme or without one
_AUTHORIZATION = re.compile(
    r"(?P<head>\b(?:proxy-)?authori[sz]ation\s*[:=]\s*(?:[a-z][\w\-]*\s+(?=[^\s\"']))?)"
    r"[^\s\"',;]+", re.IGNORECASE)
# an option and its value inside a longer argument: sh -c "app --password S -v"
_INLINE_OPTION = re.compile(
    r"""(?P<flag>(?:^|(?<=[\s;&|(]))--?[a-z][\w.\-]*)(?P<gap>\s+)"""
    r"""(?P<value>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|[^\s"'-][^\s"';&|)]*)""",
    re.IGNORECASE)
# curl's -uuser:password, attached, inside a longer argument
_INLINE_ATTACHED_USER = re.compile(r"""(?P<head>(?:^|(?<=\s))-u[^\s:"']+:)[^\s"']+""")


def _user_password(value: str) -> str:
    """``user:password`` with the password masked (a value without ':' stays)."""
    user, colon, _ = value.partition(":")
    return f"{user}:{MASK}" if colon else value


def _option_value(flag: str, value: str) -> str | None:
    """An option's value masked (``***``, or ``user:***`` after a user:password option);
    None when the option carries no secret."""
    if is_secret_name(flag):
        return MASK
    if flag in USER_PASSWORD_FLAGS and ":" in value:
        quote = value[0] if value[0] in "\"'" else ""
        return f"{quote}{_user_password(value.strip(quote))}{quote}" if quote else \
            _user_password(value)
    return None


def _inline_option(match: re.Match) -> str:
    """An option inside a shell string with its value masked if it is a secret (``-p``
    is left alone there: in a shell string it is as often a port, docker -p 8080:80)."""
    shown = _option_value(match["flag"], match["value"])
    return match[0] if shown is None else f"{match['flag']}{match['gap']}{shown}"


def _url(match: re.Match) -> str:
    if match["colon"]:  # user:password@: keep the user, mask the password
        return f"{match['scheme']}{match['user']}:{MASK}@"
    return f"{match['scheme']}{MASK}@"  # a lone userinfo is a token


def _address_credentials(text: str) -> str:
    """``text`` with the password of each ``user:password@host[:port]`` masked, where the
    user name starts the text, or follows whitespace, '=' or ','; the password ends at the
    run's last '@' before a host (it may itself hold '@', '=' or ',')."""
    if "@" not in text:
        return text
    return _RUN.sub(lambda run: _run_credentials(run[0], run.start() == 0 or text[
        run.start() - 1] != "/"), text)


def _run_credentials(run: str, may_start: bool) -> str:
    """One run of ``_address_credentials`` (``may_start``: a user name may open it)."""
    at = run.rfind("@")
    while at >= 0 and not _HOST_AFTER.match(run, at + 1):
        at = run.rfind("@", 0, at)
    if at < 0:
        return run
    start = 0 if may_start else _next_start(run, 0)
    while start is not None and start < at:
        end = _HEAD_END.search(run, start)
        if end is None:
            break
        if run[end.start()] == ":" and end.start() > start:
            if end.start() < at:
                return f"{run[:end.start() + 1]}{MASK}{run[at:]}"
            break
        start = _next_start(run, start)
    return run


def _next_start(run: str, start: int) -> int | None:
    """Where the next user name may start in ``run`` after ``start``: after a '=' or ','."""
    found = _NAME_AFTER.search(run, start)
    return None if found is None else found.end()


def redact_text(text: str) -> str:
    """``text`` with embedded secrets, URL credentials and bearer tokens masked."""
    text = _URL_CREDENTIALS.sub(_url, text)
    text = _address_credentials(text)
    text = _BEARER.sub(lambda m: f"{m['head']}{MASK}", text)
    text = _AUTHORIZATION.sub(lambda m: f"{m['head']}{MASK}", text)
    if " " in text or "\t" in text:  # a shell string: its options, as on a command line
        text = _INLINE_OPTION.sub(_inline_option, text)
        text = _INLINE_ATTACHED_USER.sub(lambda m: f"{m['head']}{MASK}", text)
    text = _QUERY_SECRET.sub(lambda m: f"{m['head']}{MASK}", text)
    return _EMBEDDED.sub(lambda m: f"{m['key']}{MASK}", text)


def redact_args(args: list[str]) -> list[str]:
    """``args`` with secret-looking ``name=value``, ``--name value`` and embedded secrets masked."""
    out: list[str] = []
    flag = None  # the option whose value comes next
    for arg in args:
        if flag is not None:
            out.append(MASK if flag in SECRET_FLAGS else
                       _option_value(flag, arg) or redact_text(arg))
            flag = None
            continue
        name, sep, value = arg.partition("=")
        shell = " " in name  # a shell string ("app --password S"): masked part by part
        if sep and not shell and is_secret_name(name):
            out.append(f"{name}={MASK}")
        elif sep and not shell and name in USER_PASSWORD_FLAGS:
            out.append(f"{name}={_user_password(value)}")
        elif arg in SECRET_FLAGS or arg in USER_PASSWORD_FLAGS:
            out.append(arg)
            flag = arg
        elif len(arg) > 2 and arg[:2] in ("-p", "-u") and not arg.startswith("--"):
            # -ppassword, as mysql takes it; -uuser:password, as curl does
            out.append(f"{arg[:2]}{MASK}" if arg[1] == "p" else f"-u{_user_password(arg[2:])}")
        else:
            out.append(redact_text(arg))
            flag = arg if (arg.startswith("-") and not sep and not shell
                           and is_secret_name(arg)) else None
    return out
