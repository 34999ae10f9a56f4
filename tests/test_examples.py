"""The main job runs: examples/train_digits.py trains its CNN for one epoch and beats chance by far.

The README's first command runs the full training (8 epochs, >= 97% held-out accuracy); one epoch here keeps CI's
time down while still running every part of it: data, the jitted training step, evaluation and the report.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "train_digits.py"


def test_train_digits_one_epoch_learns() -> None:
    result = subprocess.run([sys.executable, str(EXAMPLE), "--epochs", "1", "--target", "0.85"],
                            capture_output=True, text=True, timeout=900, env={**os.environ}, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    final = re.search(r"final held-out accuracy: ([\d.]+)%", result.stdout)
    assert final is not None, result.stdout[-2000:]
    assert float(final.group(1)) >= 85.0
    assert re.search(r"epoch  1: loss [\d.]+ +train accuracy", result.stdout)
