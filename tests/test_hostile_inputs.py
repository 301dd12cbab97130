"""Hostile input on kmon's command line: every case is one line on stderr and a non-zero exit,
never a traceback, never a hang (the subprocess timeout is the hang detector)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # runs the real kmon command line, one process a case

HANG = 30  # seconds: a case still running then has hung


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """Files of every bad kind, made once."""
    root = tmp_path_factory.mktemp("hostile")
    made = {"missing": str(root / "missing"), "directory": str(root),
            "dev-zero": "/dev/zero", "dev-null": "/dev/null"}
    made["binary"] = _write(root / "binary", bytes(range(256)) * 64)
    made["bad-utf8"] = _write(root / "bad-utf8", b"\xff\xfe{\"ts_ms\": \xc3\x28}\n")
    made["nested"] = _write(root / "nested", b"[" * 200_000 + b"\n")
    made["empty"] = _write(root / "empty", b"")
    made["not-json"] = _write(root / "not-json", b"hello\nworld\n")
    sparse = root / "huge"
    with open(sparse, "wb") as f:
        f.truncate(600 * 1024 * 1024)  # sparse: costs no disk, is larger than every cap
    made["huge"] = str(sparse)
    fifo = root / "fifo"
    os.mkfifo(fifo)
    made["fifo"] = str(fifo)
    link = root / "link-to-shadow"
    link.symlink_to("/etc/shadow")
    made["link-to-shadow"] = str(link)
    return made


def _write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


FILE_KINDS = ("missing", "directory", "dev-zero", "binary", "bad-utf8", "nested", "huge", "fifo",
              "not-json", "link-to-shadow")
CONFIG_KINDS = ("missing", "directory", "dev-zero", "binary", "bad-utf8", "nested", "huge",
                "fifo", "dev-null")
VALUE_KINDS = ("missing", "directory", "dev-zero", "binary", "huge", "fifo")
LOG_KINDS = ("directory", "dev-zero", "fifo", "dev-null")
DURATIONS = ("0", "-1", "99999999999999h", "nan", "inf", "1e400", "\u0663s", "10us", "", "5 5s")
PIDS = ("0", "-1", "2", "\u0663", "99999999999", "abc", "4194305", "1.5")


def cases() -> list[tuple[str, list[str]]]:
    """(case id, argv after 'kmon'); {file:KIND} is replaced by a file of that kind."""
    out = [(f"replay-{k}", ["replay", f"{{file:{k}}}"]) for k in FILE_KINDS]
    out += [(f"config-{k}", ["watch", "127.0.0.1:9", "--config", f"{{file:{k}}}"])
            for k in CONFIG_KINDS]
    out += [(f"record-config-{k}", ["record", "--cluster", "127.0.0.1:9", "--out", "{tmp}",
                                    "--config", f"{{file:{k}}}"]) for k in ("fifo", "dev-zero")]
    out += [(f"value-file-{k}", ["watch", "127.0.0.1:9", "-X", f"sasl.password=@{{file:{k}}}"])
            for k in VALUE_KINDS]
    out += [(f"client-log-{k}", ["attach", "{self}", "--any-process", "--once",
                                 "--client-log", f"{{file:{k}}}"]) for k in LOG_KINDS]
    for command in (["attach", "{self}"], ["record", "--pid", "{self}", "--out", "{tmp}"],
                    ["watch", "127.0.0.1:9"], ["demo", "--headless"]):
        out += [(f"{command[0]}-interval-{d!r}", [*command, f"--interval={d}"])
                for d in DURATIONS[:7]]
    out += [(f"record-duration-{d!r}", ["record", "--pid", "{self}", "--out", "{tmp}",
                                        f"--duration={d}"]) for d in DURATIONS]
    out += [(f"attach-pid-{p!r}", ["attach", p]) for p in PIDS]
    out += [(f"record-pid-{p!r}", ["record", "--pid", p, "--out", "{tmp}"]) for p in PIDS[:4]]
    out += [("broker-idle-huge", ["attach", "{self}", "--broker-idle-ms", "9" * 30]),
            ("broker-idle-unicode", ["attach", "{self}", "--broker-idle-ms", "\u0663"]),
            ("record-out-is-dev-null", ["record", "--pid", "{self}", "--out", "/dev/null"]),
            ("analyze-fifo", ["analyze", "{file:fifo}"]),
            ("analyze-dev-zero", ["analyze", "/dev/zero"]),
            ("theme-binary", ["attach", "{self}", "--theme", "\x01\x02"]),
            ("replay-pid-missing", ["replay", "{file:not-json}", "--pid", "1"])]
    return out


CASES = cases()


def test_there_are_at_least_72_cases():
    assert len(CASES) >= 72, len(CASES)


@pytest.mark.parametrize(("argv"), [argv for _, argv in CASES], ids=[i for i, _ in CASES])
def test_one_line_and_a_non_zero_exit(argv, files, tmp_path):
    def fill(arg: str) -> str:
        for kind, path in files.items():
            arg = arg.replace(f"{{file:{kind}}}", path)
        return arg.replace("{self}", str(os.getpid())).replace("{tmp}", str(tmp_path / "out"))

    result = subprocess.run([sys.executable, "-m", "kmon", *map(fill, argv)],
                            capture_output=True, text=True, timeout=HANG,
                            stdin=subprocess.DEVNULL)
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0, (result.returncode, result.stdout[-500:], result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1, result.stderr
