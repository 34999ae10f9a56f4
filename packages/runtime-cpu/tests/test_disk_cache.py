"""The disk program cache across processes: a second process loads the binary the first one compiled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import json, sys
import numpy as np
from plygrad.runtime import PROGRAMS, Device
sys.path.insert(0, sys.argv[1])
from cpu_programs import ADD
cpu = Device["CPU"]
binary = PROGRAMS.compile(cpu.compiler, cpu.target.to_bytes(), ADD)
program = cpu.load("add", binary)
a = np.arange(5, dtype=np.float32)
ha, out = cpu.allocator.alloc(20), cpu.allocator.alloc(20)
cpu.allocator.copyin(ha, memoryview(a).cast("B"))
program([out, ha, ha], (1, 1, 1), None, [5])
res = np.empty(5, np.float32)
cpu.allocator.copyout(memoryview(res).cast("B"), out)
s = PROGRAMS.stats
print(json.dumps({"compiles": s.compiles, "disk_hits": s.disk_hits, "result": res.tolist()}))
"""


def _run(cache: Path) -> dict[str, object]:
    env = {**os.environ, "PLYGRAD_CACHE_DIR": str(cache)}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(Path(__file__).resolve().parent)], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_second_process_hits_the_disk_cache(tmp_path: Path) -> None:
    first, second = _run(tmp_path / "cache"), _run(tmp_path / "cache")
    assert (first["compiles"], first["disk_hits"]) == (1, 0)
    assert (second["compiles"], second["disk_hits"]) == (0, 1)
    assert first["result"] == second["result"] == [0.0, 2.0, 4.0, 6.0, 8.0]


def test_corrupt_entry_recompiles_in_a_new_process(tmp_path: Path) -> None:
    _run(tmp_path / "cache")
    (entry,) = (tmp_path / "cache" / "programs").rglob("*.bin")  # not the toolchain record beside it
    entry.write_bytes(entry.read_bytes()[:100])
    again = _run(tmp_path / "cache")
    assert (again["compiles"], again["disk_hits"]) == (1, 0)
    assert again["result"] == [0.0, 2.0, 4.0, 6.0, 8.0]
