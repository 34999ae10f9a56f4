"""`python -m plygrad.runtime`: list every backend found, whether it opens, and why not."""

from __future__ import annotations

import sys

from plygrad.ir.version import OPSET_VERSION
from plygrad.runtime import config, discovery
from plygrad.runtime.device import Device


def main() -> int:
    records = Device.open_all()
    print(f"plygrad.runtime: IR opset {OPSET_VERSION[0]}.{OPSET_VERSION[1]}, {len(records)} backend(s) found")
    for record in records:
        priority = record.descriptor.priority if record.descriptor else "-"
        line = f"  {record.name:<8} priority {priority!s:<4} {record.status.value}"
        if record.cause:
            line += f": {record.cause}"
        print(line)
        print(f"           from {record.entry_point}")
    try:
        print(f"default device: {Device.DEFAULT}")
    except Exception as exc:
        print(f"default device: none ({exc})")
    codegens = ", ".join(sorted(discovery.plugins(discovery.CODEGEN))) or "none installed"
    print(f"codegen: {config.PLYGRAD_CODEGEN.get()!r} selected; found: {codegens}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
