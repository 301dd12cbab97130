"""Reading the private per-user spool where the kmon agent leaves client statistics.

One JSON file per client instance, named ``<pid>-<instance>.json``, and one
``<pid>-clients.json`` counting the client instances the process created, written
atomically (temp file + rename) with mode 0600 in a directory of mode 0700
that belongs to the user. Links are never followed; a file must belong to the
user (or root), have one link and at most ``MAX_RECORD_BYTES``. One read takes
at most ``MAX_FILES_PER_READ`` of a process's files, newest first, and at most
``MAX_BYTES_PER_READ`` in all; what it skips is said in a notice.

Where to look: ``$KMON_SPOOL_DIR``, else ``/run/user/UID/kmon``, else
``/tmp/kmon-UID``; and, where another user squatted that name in ``/tmp``,
the agent's fallback ``~/.cache/kmon/spool`` under the user's home (from the
password database, never from an environment another user controls).
A directory that is not the user's own is skipped with a notice
(``SpoolUntrusted``): anyone can create ``/tmp/kmon-UID``, and that must
not blind kmon to the user's processes.
"""

from __future__ import annotations

import itertools
import os
import pwd
import re
import stat
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kmon.sources import bounded
from kmon.sources.text import json_value, valid

FORMAT = 1
MAX_RECORD_BYTES = 1024 * 1024  # a client's statistics without partitions: a few KiB
MAX_FILES_PER_READ = 32  # a process's client instances read in one poll, newest first
MAX_BYTES_PER_READ = 2 * MAX_RECORD_BYTES  # and their bytes in all
MAX_NAMES_PER_PID = 256  # a process's files looked at (a stat each) to find its newest
MAX_LISTED = 1 << 16  # entries of a spool directory listed, at most
_DIGITS = re.compile(r"(\d+)")
ENV_DIR = "KMON_SPOOL_DIR"
# the instance name of a process's client-count record (<pid>-clients.json); no librdkafka
# instance is named so (theirs end in "#producer-1", "#consumer-2", ...)
CLIENTS_INSTANCE = "clients"
# _names_by_pid's, kept: (the directory's stamp, if settled; when listed, epoch ns; names;
# whether the listing stopped at MAX_LISTED)
_LISTINGS: dict[Path, tuple[tuple | None, int, dict[str, list[str]], bool]] = {}
_MAX_LISTINGS = 64
_SETTLED_NS = 50_000_000  # a directory unchanged this long before it was listed: kept
REPLACED_TRIES = 3  # opens of a file the agent keeps replacing, before it is skipped this poll


class SpoolError(Exception):
    """A spool directory or file that kmon must not or cannot use; its message is valid
    text, whatever bytes the paths it names hold."""

    def __init__(self, message: str) -> None:
        super().__init__(valid(message))


class _Replaced(Exception):
    """The file kmon opened had no link left when it was checked: the agent renamed its next
    record over it (no link is no hard link to another file), so the path holds a newer
    one to open."""


class SpoolUntrusted(SpoolError):
    """A spool directory that is not the user's own (a notice, not a failure)."""


def default_dir(uid: int | None = None, env: Mapping[str, str] = os.environ) -> Path:
    """Where the agent of user ``uid`` writes (``KMON_SPOOL_DIR`` in ``env`` wins)."""
    if env.get(ENV_DIR):
        return Path(env[ENV_DIR])
    uid = os.getuid() if uid is None else uid
    runtime = Path(f"/run/user/{uid}")
    if runtime.is_dir():
        return runtime / "kmon"
    return Path(tempfile.gettempdir()) / f"kmon-{uid}"


def fallback_dir(uid: int) -> Path | None:
    """The agent's spool when its default is taken by someone else: under the user's home."""
    try:
        home = pwd.getpwuid(uid).pw_dir
    except KeyError:
        return None
    return Path(home) / ".cache" / "kmon" / "spool" if home and home != "/" else None


@dataclass
class SpoolRecords:
    """The records one read took, and what it left for want of room."""

    records: list[tuple[Path, dict]] = field(default_factory=list)
    skipped: str | None = None  # a notice naming what was not read, if anything


def read_records(directory: Path, pid: int, owner_uid: int,
                 since_ns: int | None = None) -> SpoolRecords:
    """The spool records of process ``pid`` in ``directory``: its newest files, at most
    ``MAX_FILES_PER_READ`` of them and ``MAX_BYTES_PER_READ`` in all; the directory's
    listing as made at ``since_ns`` (epoch ns: a poll's start) or later, where given
    (``_names_by_pid``).

    The directory must belong to ``owner_uid`` (or root) and be writable by
    nobody else, or anyone could feed kmon records. Raises SpoolError naming
    the file for one that is a link, unreadable, too large, not JSON, or not a
    kmon record. A file removed while being listed is skipped.
    """
    try:
        info = os.lstat(directory)
        if (not stat.S_ISDIR(info.st_mode) or info.st_uid not in (owner_uid, 0)
                or info.st_mode & 0o022):
            raise SpoolUntrusted(f"spool {directory} is not a private directory of uid "
                                 f"{owner_uid}; its statistics are not read")
        found, unlooked, cut = _newest_first(directory, info, pid, since_ns)
    except FileNotFoundError:
        return SpoolRecords()
    except OSError as err:
        raise SpoolError(f"cannot read spool {directory}: {err.strerror}") from err
    taken = SpoolRecords()
    if unlooked or cut:
        taken.skipped = valid(
            f"spool {directory}: {unlooked} statistics files of PID {pid} not looked at; "
            f"kmon looks at {MAX_NAMES_PER_PID} files of a process at most"
            + (f", among the first {MAX_LISTED:,} entries of a spool" if cut else ""))
    budget = MAX_BYTES_PER_READ
    for at, (size, path) in enumerate(found):
        if at == MAX_FILES_PER_READ or size > budget:
            left = found[at:]
            taken.skipped = valid(
                (f"{taken.skipped}; " if taken.skipped else "")
                + f"spool {directory}: {len(left)} older statistics files of PID {pid} "
                f"({sum(s for s, _ in left):,} bytes) not read; kmon reads at most "
                f"{MAX_FILES_PER_READ} files and {MAX_BYTES_PER_READ:,} bytes of a process "
                "per poll")
            break
        budget -= size
        record = _read_one(path, owner_uid)
        if record is not None:
            taken.records.append((path, record))
    return taken


def _newest_first(directory: Path, info: os.stat_result, pid: int, since_ns: int | None
                  ) -> tuple[list[tuple[int, Path]], int, bool]:
    """(size, path) of process ``pid``'s ``*.json`` files in ``directory`` (``info``: its
    lstat), newest first (as they are listed: links and other odd entries are refused when
    read), of MAX_NAMES_PER_PID of its names at most (its client count and its latest client
    instances, ``_latest_last``); how many names were not looked at, and whether the
    directory's listing stopped at MAX_LISTED. Only the process's
    own files are looked at: a spool shared by hundreds of clients costs each of them a look
    up of its names, not a stat of every file; and one user's 200,000 files cost a poll 256
    stats, not 2 s of them."""
    by_pid, cut = _names_by_pid(directory, info, since_ns)
    names = sorted(by_pid.get(str(pid), ()), key=_latest_last)
    unlooked = max(0, len(names) - MAX_NAMES_PER_PID)
    found = []
    for name in names[unlooked:]:
        try:
            stats = os.lstat(directory / name)
        except FileNotFoundError:
            continue  # its client exited since the directory was listed
        found.append((-stats.st_mtime_ns, name, stats.st_size))
    found.sort()
    return [(size, directory / name) for _, name, size in found], unlooked, cut


def _latest_last(name: str) -> tuple[bool, list[int | str]]:
    """A spool file name's place: by its numbers as numbers (``producer-1200`` after
    ``producer-999``: a process numbers its client instances in order), its client count
    (``PID-clients.json``) last of all."""
    return (name.endswith(f"-{CLIENTS_INSTANCE}.json"),
            [int(part) if part.isdigit() else part for part in _DIGITS.split(name)])


def _names_by_pid(directory: Path, info: os.stat_result,
                  since_ns: int | None = None) -> tuple[dict[str, list[str]], bool]:
    """The ``PID-*.json`` names in ``directory`` by the PID's text: listed again only when
    the directory changed (every write of the agent renames a file into it), not for each
    of the many processes a poll reads; with ``since_ns``, a listing made since answers
    however the directory changed (a spool hundreds of clients write to changes all the
    time: each process's names as of its poll, the directory listed once a poll). A
    process's names change only when it makes a new client or exits. And whether the
    listing stopped at MAX_LISTED entries."""
    stamp = (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_ctime_ns)
    kept = _LISTINGS.get(directory)
    if kept is not None and (kept[0] == stamp or (since_ns is not None
                                                  and kept[1] >= since_ns)):
        return kept[2], kept[3]
    listed_ns = time.time_ns()
    names: dict[str, list[str]] = {}
    listed = 0
    with os.scandir(directory) as entries:
        for entry in itertools.islice(entries, MAX_LISTED):
            listed += 1
            pid, dash, _ = entry.name.partition("-")
            if dash and entry.name.endswith(".json"):
                names.setdefault(pid, []).append(entry.name)
    cut = listed == MAX_LISTED
    # a change in the clock tick of the directory's last one may leave its time unchanged
    settled = listed_ns - info.st_mtime_ns > _SETTLED_NS
    bounded.put(_LISTINGS, directory, (stamp if settled else None, listed_ns, names, cut),
                _MAX_LISTINGS)
    return names, cut


def _read_one(path: Path, owner_uid: int) -> dict | None:
    """The record of one spool file; None when it is gone (its client exited, or the agent
    kept replacing it while kmon opened it)."""
    for _ in range(REPLACED_TRIES):
        try:
            raw = _read_linked(path, owner_uid)
            break
        except _Replaced:
            continue
    else:
        return None
    if raw is None:
        return None
    if len(raw) > MAX_RECORD_BYTES:
        raise SpoolError(f"spool file {path} is too large (over {MAX_RECORD_BYTES:,} bytes)")
    try:
        record = json_value(raw)
    except (ValueError, RecursionError) as err:
        raise SpoolError(f"spool file {path} is corrupt (not JSON: {err})") from err
    if not (isinstance(record, dict) and (isinstance(record.get("stats"), dict)
                                          or "clients_created" in record)):
        raise SpoolError(f"spool file {path} is corrupt (not a kmon statistics record)")
    if record.get("format") != FORMAT:
        raise SpoolError(f"spool file {path} has format {record.get('format')!r}, "
                         f"this kmon reads format {FORMAT}")
    return record


def _read_linked(path: Path, owner_uid: int) -> bytes | None:
    """The bytes of one spool file (None: gone); raises _Replaced for one replaced while it
    was opened."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        return None  # its client exited between listing and reading
    except OSError as err:
        why = "is a symbolic link" if os.path.islink(path) else err.strerror
        raise SpoolError(f"spool file {path} {why}; refusing to read it") from err
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise SpoolError(f"spool file {path} is not a regular file")
        if info.st_nlink == 0 and info.st_uid in (owner_uid, 0):
            raise _Replaced
        if info.st_uid not in (owner_uid, 0) or info.st_nlink != 1:
            raise SpoolError(f"spool file {path} belongs to uid {info.st_uid} with "
                             f"{info.st_nlink} links; refusing to read it")
        if info.st_size > MAX_RECORD_BYTES:
            raise SpoolError(f"spool file {path} is too large ({info.st_size:,} bytes)")
        return f.read(MAX_RECORD_BYTES + 1)
