"""A three-kernel program run under VIZ=1 by tests/test_viz.py, the way a user runs one: it records every socket
a Python-level call binds, listens on or connects with (an audit hook installed before plygrad is imported) and,
after the recorder has written its files at exit, writes them and the launch count to the file argv[1] names."""

import atexit
import json
import sys

SOCKET_EVENTS: list[str] = []


def _audit(event: str, args: tuple[object, ...]) -> None:
    if event in ("socket.bind", "socket.listen", "socket.connect", "socket.__new__"):
        SOCKET_EVENTS.append(f"{event} {args!r}")


def _report() -> None:  # registered before the runtime's exit writer, so it runs after it
    from plygrad.runtime import GlobalCounters

    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump({"sockets": SOCKET_EVENTS, "kernel_count": GlobalCounters.kernel_count}, f)


sys.addaudithook(_audit)
atexit.register(_report)

import numpy as np  # noqa: E402

import plygrad.viz  # noqa: E402
from plygrad.frontend import Tensor  # noqa: E402

a = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
b = (a * 2 + 1).realize()
plygrad.viz.mark("after the first kernel")
c = b.exp().sum(axis=1).realize()
d = (a @ a.T).realize()
print(c.numpy().tolist(), d.numpy().tolist())
