"""`python -m plygrad.viz TRACE [--html] [--chrome] [--top N] [--json] [--check] [--passes KERNEL]`: the top kernels
of a recorded trace in the terminal, its reports written again (offline: nothing is served or fetched), with --check
the first launch a reference executor computes differently (exit status 1 when one does), with --passes codegen's
passes on one kernel as diffs."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict

from plygrad.viz.check import check
from plygrad.viz.model import Trace, TraceError, kernel_stats, load, summary
from plygrad.viz.passes import diff_text, find_kernel, kernel_passes
from plygrad.viz.reports import top_table, write_reports


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m plygrad.viz", description=__doc__)
    parser.add_argument("trace", help="a trace.json.gz written by VIZ=1 or plygrad.viz.record")
    parser.add_argument("--html", action="store_true", help="write report.html")
    parser.add_argument("--chrome", action="store_true", help="write chrome_trace.json (Perfetto, chrome://tracing)")
    parser.add_argument("--out", help="folder for the reports (default: the trace's folder)")
    parser.add_argument("--top", type=int, default=10, help="kernels in the table (default 10)")
    parser.add_argument("--json", action="store_true", help="print the summary and kernel table as JSON")
    parser.add_argument("--check", action="store_true", help="run each launch recorded with VIZ=2 again on its "
                        "recorded inputs by the reference executor and name the first whose outputs differ")
    parser.add_argument("--passes", metavar="KERNEL", help="replay codegen's passes on the recorded kernel named "
                        "KERNEL (or #n) and print each pass's change as a diff")
    parser.add_argument("--rtol", type=float, default=1e-4, help="--check's relative tolerance (default 1e-4)")
    parser.add_argument("--atol", type=float, default=1e-5, help="--check's absolute tolerance (default 1e-5)")
    args = parser.parse_args(argv)
    if args.top < 1:
        parser.error(f"--top must be at least 1, got {args.top}")
    try:
        trace = load(args.trace)
        if args.html or args.chrome:
            for path in write_reports(args.trace, args.out, html=args.html, chrome=args.chrome):
                print(f"wrote {path}", file=sys.stderr)
    except (OSError, TraceError) as exc:
        print(f"python -m plygrad.viz: {exc}", file=sys.stderr)
        return 2
    if args.check:
        return _check(trace, args.rtol, args.atol)
    if args.passes:
        try:
            print(diff_text(kernel_passes(trace, find_kernel(trace, args.passes))))
        except (ImportError, ValueError) as exc:
            print(f"python -m plygrad.viz --passes: {exc}", file=sys.stderr)
            return 2
        return 0
    if args.json:
        print(json.dumps({"summary": summary(trace), "kernels": [asdict(s) for s in kernel_stats(trace)[:args.top]]},
                         indent=1))
    else:
        print(top_table(trace, args.top))
    return 0


def _check(trace: Trace, rtol: float, atol: float) -> int:
    try:
        result = check(trace, rtol, atol)
    except ImportError as exc:
        print(f"python -m plygrad.viz --check: {exc}", file=sys.stderr)
        return 2
    for reason in result.skipped:
        print(f"not checked: {reason}")
    if not result.checked and result.mismatch is None:
        print("no launch was recorded with its buffer contents: record with VIZ=2 or record(..., check=True)")
        return 2
    if result.mismatch is not None:
        print(f"MISMATCH: {result.mismatch.describe()}")
        return 1
    print(f"all {result.checked} checked launches agree with the reference (rtol {rtol}, atol {atol})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
