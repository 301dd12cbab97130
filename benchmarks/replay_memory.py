"""What ``kmon replay`` holds in memory for a recording, against the file's size.

    python -m benchmarks replay_memory [--frames 40] [--connections 2000]

Writes a recording of --frames snapshots of --connections rows each (as ``kmon attach
--json`` writes them; json_cost.py's snapshot), then, each in a fresh process, measures
the peak resident memory above what the process held before reading:

1. kmon's reader: the recording opened (every line checked) and every frame played,
   as ``kmon replay`` does (``Recording`` and ``Replay``);
2. the baseline, every frame held in memory at once (the whole file read, then every
   line built into its snapshot: what kmon replay did before it streamed).

Prints each peak as a multiple of the file's size, and the ratio between them.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import tempfile
from pathlib import Path

from benchmarks.api import Result
from benchmarks.helpers import REPO, command
from benchmarks.json_cost import snapshot
from kmon.cli.json_lines import json_line
from kmon.engine.playback import Recording, Replay, frame_from_line

#: the helper's roles: how it reads the recording
ROLES = ("streamed", "held")


def peak_above_start_mb(how: str, path: Path) -> float:
    """Run this benchmark as a helper that reads ``path`` ``how``; its peak RSS growth in MB."""
    out = subprocess.run(command("replay_memory", "--role", how, "--path", str(path)), cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    return float(out.split()[-1])


def helper(args: argparse.Namespace) -> int:
    """The helper: read the recording, print the peak RSS growth in MB."""
    how, path = args.role, Path(args.path)
    start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if how == "streamed":
        replay = Replay(Recording(path))
        while not replay.finished:
            replay.poll()
    else:
        frames = [frame_from_line(line) for line in path.read_bytes().split(b"\n") if line.strip()]
        assert frames
    print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - start) / 1024)
    return 0


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--frames", type=int, default=40)
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--path", help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> Result:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "recording.jsonl"
        with open(path, "wb") as f:
            for n in range(args.frames):
                snap = snapshot(args.connections, f"svc{n}")
                snap.ts_ms += n * 1000
                f.write(json_line(snap.to_dict()))
        size_mb = path.stat().st_size / 2 ** 20
        streamed = peak_above_start_mb("streamed", path)
        held = peak_above_start_mb("held", path)
    print(f"recording: {args.frames} frames of {args.connections} rows, {size_mb:.1f} MB")
    print(f"kmon replay (streamed): peak {streamed:.1f} MB above start "
          f"({streamed / size_mb:.2f}x the file)")
    print(f"baseline (every frame held): peak {held:.1f} MB above start "
          f"({held / size_mb:.2f}x the file)")
    print(f"ratio streamed / held: {streamed / held:.3f}")
    result = Result()
    result.figure("recording", size_mb, "MB")
    result.figure("streamed peak", streamed, "MB")
    result.figure("held peak", held, "MB")
    result.ratio("streamed / held", "streamed peak", "held peak")
    result.ratio("streamed / file", "streamed peak", "recording")
    return result
