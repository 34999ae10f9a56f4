"""Every environment setting plygrad.frontend reads, declared once with its meaning, default and type.

Settings are read from `os.environ` each time they are asked for, so `monkeypatch.setenv` or `os.environ[...]`
takes effect on the next realize. The runtime's settings (PLYGRAD_DEVICE, DEBUG, ...) live in plygrad.runtime.config;
docs/frontend.md lists both.
"""

from __future__ import annotations

from typing import Final

from plygrad.ir.settings import StrSetting

PLYGRAD_SCHEDULER: Final = StrSetting(
    "PLYGRAD_SCHEDULER", "default",
    "name of the plygrad.schedulers entry point that turns tensor graphs into schedules ('default' fuses, "
    "'unfused' runs one kernel per op); `with Tensor.scheduler(name):` overrides it inside a block")
