"""Every environment setting plygrad.distributed reads, declared once (plygrad.ir.settings; docs/distributed.md).

`PLYGRAD_COLLECTIVES`, which chooses the provider, is plygrad.runtime.collectives'.
"""

from __future__ import annotations

from typing import Final

from plygrad.ir.settings import FloatSetting

PLYGRAD_DIST_TIMEOUT: Final = FloatSetting("PLYGRAD_DIST_TIMEOUT", 300.0, "seconds one collective may wait for the "
                                           "other ranks before it raises DistributedError naming the op, its "
                                           "sequence number and this rank (a rank died or hangs)", 0.001)

SETTINGS: Final = (PLYGRAD_DIST_TIMEOUT,)

__all__ = ["PLYGRAD_DIST_TIMEOUT", "SETTINGS"]
