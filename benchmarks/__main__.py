"""The benchmark runner: ``python -m benchmarks NAME [options]``, from the repository root.

    python -m benchmarks --list           the benchmarks and what each measures
    python -m benchmarks NAME --help      a benchmark's own options
    python -m benchmarks NAME [--out F]   run it: its account, then its figures and its
                                          ratios against the baseline measured in the
                                          same run, written as JSON to F (default
                                          benchmarks/results/NAME.json)
    python -m benchmarks table            CONTRIBUTING's table, from the result files
    python -m benchmarks truth [...]      the ground-truth harness (benchmarks/truth)
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from benchmarks import registry, results
from benchmarks.api import BenchmarkError, Result, UsageError


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__, file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name == "--list":
        for each in registry.NAMES:
            print(f"{each:22} {registry.summary(each)}")
        print(f"{registry.TRUTH:22} {registry.summary(registry.TRUTH)}")
        return 0
    if name == "table":
        print(results.table())
        return 0
    if name == registry.TRUTH:
        from benchmarks.truth.__main__ import main as truth
        return truth(rest)
    if name not in registry.NAMES:
        print(f"benchmarks: no benchmark {name!r}; `python -m benchmarks --list` names them",
              file=sys.stderr)
        return 2
    return run(name, rest)


def run(name: str, argv: list[str]) -> int:
    module = registry.load(name)
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks {name}",
                                     description=module.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None, metavar="FILE",
                        help=f"the JSON result (default {results.RESULTS.name}/{name}.json)")
    module.options(parser)
    roles = getattr(module, "ROLES", ())
    if roles:
        parser.add_argument("--role", choices=roles, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if getattr(args, "role", None):
        return module.helper(args)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        result = module.run(args)
    except KeyboardInterrupt:
        print(f"{name}: interrupted; helpers stopped", file=sys.stderr)
        return 130
    except BenchmarkError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, UsageError) else 1
    return report(name, args, result)


def report(name: str, args: argparse.Namespace, result: Result) -> int:
    """Print the figures and the ratios, and write the result file; 1 without a ratio."""
    print(f"\n{name}: figures")
    for key, figure in result.figures.items():
        print(f"  {key:48} {figure.value:14.6g} {figure.unit}")
    print(f"{name}: ratios against the baseline measured in this run")
    for key, ratio in result.ratios.items():
        print(f"  {key:48} {ratio.value:10.3f}x  ({ratio.measured} / {ratio.baseline})")
    if not result.ratios:
        print(f"{name}: no ratio against a baseline: no result written", file=sys.stderr)
        return 1
    options = {k: v for k, v in vars(args).items() if k not in ("out", "role")}
    doc = results.document(name, json.loads(json.dumps(options, default=str)), result,
                           results.commit())
    out = results.write(doc, args.out or results.RESULTS / f"{name}.json")
    print(f"{name}: result written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
