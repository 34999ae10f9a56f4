"""Write the golden files of the current format version (run by hand, once per released format version):

    python packages/ir/tests/make_golden.py

The graphs come from test_golden.py's builders. Files of a released version are never rewritten: this script
refuses to overwrite them, because readers of every later version must keep reading exactly those bytes.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from test_golden import GRAPHS, golden_target  # noqa: E402 - needs the folder on sys.path first

from plygrad.ir.serialize import serialize, serialize_target  # noqa: E402
from plygrad.ir.text import to_text  # noqa: E402
from plygrad.ir.verify import verify  # noqa: E402
from plygrad.ir.version import FORMAT_VERSION  # noqa: E402


def main() -> int:
    out_dir = HERE / "golden" / f"format-{FORMAT_VERSION[0]}.{FORMAT_VERSION[1]}"
    if out_dir.exists():
        print(f"{out_dir} exists: golden files of a released version are never rewritten", file=sys.stderr)
        return 1
    out_dir.mkdir(parents=True)
    for name, (build, stage) in GRAPHS.items():
        graph = build()
        verify(graph, stage)
        (out_dir / f"{name}.plyir").write_bytes(serialize(graph, stage))
        (out_dir / f"{name}.txt").write_text(to_text(graph, stage), encoding="utf-8")
    (out_dir / "target.plyir").write_bytes(serialize_target(golden_target()))
    print(f"wrote {len(GRAPHS) * 2 + 1} files to {out_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
