"""examples/train_digits_multi.py: the digits CNN trained data-parallel over CPU:0..3 in one process learns, and
its parameter copies end bitwise equal on every device (the script checks and exits non-zero otherwise)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "train_digits_multi.py"


@pytest.mark.slow
def test_train_digits_on_four_devices_learns() -> None:
    result = subprocess.run([sys.executable, str(EXAMPLE), "--devices", "4", "--epochs", "1", "--target", "0.85"],
                            capture_output=True, text=True, timeout=900, env={**os.environ}, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    final = re.search(r"final held-out accuracy: ([\d.]+)% .* identical on all 4 devices", result.stdout)
    assert final is not None, result.stdout[-2000:]
    assert float(final.group(1)) >= 85.0
