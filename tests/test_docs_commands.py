"""Every ``kmon …`` command line in the README and every page under docs/ parses with the
real command line parser (parsed, never run), so the docs cannot name a command, option or
value form kmon does not take."""

from __future__ import annotations

import re
import shlex

import pytest
from helpers import REPO

from kmon.cli import COMMANDS, build_parser, with_command

DOCS = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").rglob("*.md"))]
SHELLS = ("bash", "sh", "console", "")
INLINE = re.compile(r"(?<!`)`((?:sudo [^`]*)?kmon [^`]+)`(?!`)")
KMON = {"kmon"}
# the placeholders the docs write, and a value of each that the parser takes
PLACEHOLDERS = {"PID": "4242", "FILE": "recording.jsonl", "DIR": "out", "PATH": "sessions",
                "CLUSTER": "prod", "NAME": "prod", "N": "3", "M": "3", "B": "3", "T": "1h",
                "URL": "local[2]", "HOST:PORT,…": "b1:9092", "HOST:PORT,...": "b1:9092"}
SUMMARY = re.compile(r"[\[\]|…(]")  # a syntax summary (optional parts, choices), not a line


def command_lines() -> list[tuple[str, str]]:
    """(where, the kmon command line) for every shell line and inline span that runs kmon
    (``kmon`` and a command or an option: a sentence about kmon in a diagram is no line)."""
    found = []
    for doc in DOCS:
        text = doc.read_text()
        for line in _shell_lines(text):
            found.append((f"{doc.name} block", line))
        for span in INLINE.finditer(text):
            if not SUMMARY.search(span.group(1)):
                found.append((f"{doc.name} inline", span.group(1)))
    return [(where, line) for where, line in found
            if (argv := _argv(line)) is not None
            and (not argv or argv[0] in COMMANDS or argv[0].startswith("-"))]


def _shell_lines(text: str) -> list[str]:
    """The lines of the fenced blocks in a shell language (or none), continuations joined."""
    lines, shell, fenced = [], False, False
    for line in text.replace("\\\n", " ").splitlines():
        if line.startswith("```"):
            fenced, shell = not fenced, not fenced and line[3:].strip() in SHELLS
        elif shell:
            lines.append(line)
    return lines


def _argv(line: str) -> list[str] | None:
    line = line.removeprefix("$ ").replace('"$(command -v kmon)"', "kmon")
    try:
        words = shlex.split(re.sub(r"\$\([^)]*\)", "value", line), comments=True)
    except ValueError:
        return None
    start = next((i for i, word in enumerate(words) if word in KMON), None)
    if start is None:
        return None
    argv = []
    for word in words[start + 1:]:
        if word in ("|", ">", "&&", ";") or word.startswith((">", "|")):
            break
        argv.append(PLACEHOLDERS.get(word, word))
    return argv


LINES = command_lines()


def test_the_docs_show_commands_at_all():
    assert len(LINES) > 40, LINES  # a parser bug above must not make the next test vacuous


@pytest.mark.parametrize(("where", "line"), LINES, ids=[f"{w}:{ln[:60]}" for w, ln in LINES])
def test_every_documented_command_line_parses(where, line, capsys):
    """A shell line parses whole; an inline span may leave out required arguments (prose
    shows `kmon record --duration` as a fragment), but no option or value is wrong."""
    argv = _argv(line)
    parser = build_parser()
    try:
        parser.parse_args(with_command(parser, argv))
    except SystemExit as exit_:
        error = capsys.readouterr().err
        fragment = where.endswith("inline") and ("arguments are required" in error
                                                 or "expected one argument" in error)
        assert exit_.code == 0 or fragment, f"{where}: {line}: {error}"


# long options the docs name that belong to other programs (spark-submit, pip, sudo)
OTHER_PROGRAMS = {"--name", "--pw", "--user", "--proxy-user", "--auth"}


def kmon_options() -> set[str]:
    import argparse

    found: set[str] = set()

    def walk(parser: argparse.ArgumentParser) -> None:
        for action in parser._actions:
            found.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    walk(sub)

    walk(build_parser())
    return found


def test_every_long_option_the_docs_name_is_kmon_s():
    known = kmon_options() | OTHER_PROGRAMS
    named = {(doc.name, match.group(1)) for doc in DOCS
             for match in re.finditer(r"`(--[a-z][\w.-]*)[ =`]", doc.read_text())}
    assert {(doc, option) for doc, option in named if option not in known} == set()


def test_the_readme_names_every_table_kmon_record_writes():
    """The README once said three tables where kmon record writes four."""
    from kmon.record.schema import SCHEMAS

    text = " ".join((REPO / "README.md").read_text().split())
    (count,) = re.findall(r"`kmon record` writes (\w+) Parquet tables", text)
    assert count == {3: "three", 4: "four", 5: "five"}[len(SCHEMAS)], count
    listed = text.split("`kmon record` writes", 1)[1].split(" under ", 1)[0]
    assert all(f"`{name}`" in listed for name in SCHEMAS), listed
