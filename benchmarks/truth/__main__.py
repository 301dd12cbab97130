"""``python -m benchmarks.truth [--scenarios a,b] [--out docs/truth-matrix.md]``: run the
scenarios one after another (one cluster at a time), print the summary table, write the
matrices as markdown. The findings' scenarios (benchmarks/truth/findings.py) are named
beside the others."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from benchmarks.truth import findings, report
from benchmarks.truth.scenarios import SCENARIOS, run


def main(argv: list[str] | None = None) -> int:
    """Run the scenarios ``argv`` names (the command line's when None)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.truth")
    known = [*SCENARIOS, *findings.SCENARIOS]
    parser.add_argument("--scenarios", default=",".join(known),
                        help=f"comma-separated, of: {', '.join(known)} (default: all)")
    parser.add_argument("--out", type=Path, default=None, metavar="FILE",
                        help="write the matrices as markdown here")
    parser.add_argument("--keep", type=Path, default=None, metavar="DIR",
                        help="leave each scenario's evidence (clients' logs, tcpdump's text, "
                             "kmon's closes) in a folder under DIR")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(known)}")
    if args.keep is not None:
        try:
            args.keep.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            parser.error(f"--keep {args.keep}: {err.strerror or err}")
    if args.out is not None and not args.out.parent.is_dir():
        parser.error(f"--out {args.out}: no folder {args.out.parent}")  # before, not after the run
    missing = [tool for tool in ("tcpdump", "java") if shutil.which(tool) is None]
    if missing:
        print(f"benchmarks.truth: needs {' and '.join(missing)} (Debian: apt-get install "
              "tcpdump openjdk-17-jdk-headless)", file=sys.stderr)
        return 2
    outcomes = []
    for name in (n for n in names if n in SCENARIOS):
        print(f"running {name}...", file=sys.stderr, flush=True)
        outcomes += run(SCENARIOS[name], args.keep)
    found = findings.run([n for n in names if n in findings.SCENARIOS])
    if outcomes:
        print(report.text_table(outcomes))
    if found:
        print(findings.text_table(found))
    if args.out:
        command = "python -m benchmarks.truth" + (
            f" --scenarios {args.scenarios}" if args.scenarios != ",".join(known) else "")
        args.out.write_text(report.markdown(outcomes, command) + "\n"
                            + (findings.markdown(found) + "\n" if found else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
