"""``-F/--command-config FILE``: a Java client's ``.properties`` file read as librdkafka
client properties.

The file is read as the config file is (a regular file, owned by root or the
user kmon runs as, written by no one else, bounded), and never through a link (a
user's link could name a root-owned file: the checks are on what is opened); a
property that loads code or runs a command is refused here and taken only from
``-X``. The Java client's ``sasl.jaas.config`` for PLAIN and SCRAM becomes
``sasl.username`` and ``sasl.password``, a PEM truststore becomes
``ssl.ca.location``, and the keys librdkafka has no use for are dropped; what
remains is put to librdkafka at once. The file's content is never shown in an
error: a line is named by its number, and by its key only where that key is a
property librdkafka or kmon knows.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from kmon.cli.config import DANGEROUS_PROPERTIES, ConfigError, is_dangerous_property
from kmon.files import UnsafeFile, read_bounded

MAX_PROPERTIES_BYTES = 256 * 1024
JAVA_ONLY = frozenset({"ssl.truststore.type", "ssl.keystore.type", "client.dns.lookup",
                       "ssl.protocol", "ssl.enabled.protocols", "ssl.key.password"})
_JAAS = re.compile(r"^\s*org\.apache\.kafka\.common\.security\.(plain\.PlainLoginModule|"
                   r"scram\.ScramLoginModule)\s+required\b(?P<options>.*?);?\s*$", re.S)
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
# librdkafka's properties made from a Java one: its line is that one's
_MADE_FROM = {"sasl.username": "sasl.jaas.config", "sasl.password": "sasl.jaas.config",
              "ssl.ca.location": "ssl.truststore.location"}


def read_command_config(path: Path) -> dict[str, str]:
    """The librdkafka properties of the Java ``.properties`` file at ``path``; ConfigError
    for a file kmon may not trust or cannot use."""
    from kmon.engine.facade import refused_property  # librdkafka's own word

    try:
        text = read_bounded(path, MAX_PROPERTIES_BYTES, "--command-config", follow_links=False,
                            trusted_only=True).decode("utf-8")
    except UnsafeFile as err:
        raise ConfigError(str(err)) from err
    except UnicodeDecodeError as err:
        raise ConfigError(f"--command-config {path}: not UTF-8 text") from err
    lines = {key: number for number, key, _ in _entries(text)}
    properties = as_librdkafka(parse_properties(text), path, lines)
    refused = refused_property(properties)
    if refused is None:
        return properties
    key, known = refused
    if key is None:
        raise ConfigError(f"--command-config {path}: librdkafka refuses these properties "
                          "together (give them with -X to see why)")
    line = lines.get(key) or lines[_MADE_FROM[key]]
    if not known:
        raise ConfigError(f"--command-config {path}: line {line} is not a client property "
                          "librdkafka knows")
    raise ConfigError(f"--command-config {path}: line {line}: librdkafka refuses the value "
                      f"of {key}")


def parse_properties(text: str) -> dict[str, str]:
    """Key-value pairs of Java ``.properties`` text: ``#``/``!`` comments, ``=``, ``:`` or
    blanks between key and value, a trailing backslash continuing the line, escapes."""
    return {key: value for _, key, value in _entries(text)}


def _entries(text: str) -> Iterator[tuple[int, str, str]]:
    """(line number where it starts, key, value) of each entry of ``.properties`` text."""
    logical, start = "", 0
    for number, line in enumerate(text.splitlines(), 1):
        line = line.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        start = start or number
        if _continues(line):
            logical += line[:-1]
            continue
        key, value = _split(logical + line)
        yield start, _unescape(key), _unescape(value)
        logical, start = "", 0
    if logical:
        key, value = _split(logical)
        yield start, _unescape(key), _unescape(value)


def as_librdkafka(java: dict[str, str], path: Path, lines: Mapping[str, int]) -> dict[str, str]:
    """The Java client's properties in librdkafka's names (see the module's docstring);
    ``lines`` gives each key's line, by which an error names it."""
    out: dict[str, str] = {}
    for key, value in java.items():
        if is_dangerous_property(key):
            what = key if key in DANGEROUS_PROPERTIES else "a callback"
            raise ConfigError(f"--command-config {path}: line {lines[key]}: {what} loads a "
                              "library or runs a command: kmon takes it only on its command "
                              "line (-X)")
        if key == "sasl.jaas.config":
            out.update(_jaas_credentials(value, path))
        elif key == "ssl.truststore.location":
            if java.get("ssl.truststore.type", "JKS").upper() != "PEM":
                raise ConfigError(f"--command-config {path}: ssl.truststore.location is a "
                                  "JKS or PKCS12 store, which librdkafka cannot read: give "
                                  "the CA as PEM with -X ssl.ca.location=FILE")
            out["ssl.ca.location"] = value
        elif key == "ssl.endpoint.identification.algorithm":
            out[key] = value or "none"
        elif key not in JAVA_ONLY:
            out[key] = value
    return out


def _jaas_credentials(value: str, path: Path) -> dict[str, str]:
    match = _JAAS.match(value)
    if match is None:
        raise ConfigError(f"--command-config {path}: sasl.jaas.config names a login module "
                          "kmon cannot translate (it reads PLAIN and SCRAM); give librdkafka's "
                          "sasl.* properties with -X")
    options = {k: v.replace('\\"', '"') for k, v in _JAAS_OPTION.findall(match["options"])}
    return {name: options[key] for key, name in (("username", "sasl.username"),
                                                  ("password", "sasl.password"))
            if key in options}


def _continues(line: str) -> bool:
    """True when ``line`` ends in an odd number of backslashes."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split(line: str) -> tuple[str, str]:
    escaped = False
    for i, char in enumerate(line):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char in "=: \t\f":
            rest = line[i:].lstrip(" \t\f")
            if rest[:1] in ("=", ":") and char in " \t\f" or char in "=:":
                rest = rest[1:]
            return line[:i], rest.lstrip(" \t\f")
    return line, ""


def _unescape(text: str) -> str:
    def one(match: re.Match) -> str:
        code = match.group(1)
        if code.startswith("u") and len(code) == 5:
            return chr(int(code[1:], 16))
        return _ESCAPES.get(code, code)

    return re.sub(r"\\(u[0-9A-Fa-f]{4}|.)", one, text)
