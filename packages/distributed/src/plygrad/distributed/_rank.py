"""One rank of a job the launcher started: `python -m plygrad.distributed._rank script.py args...`.

It joins the job first (so MPI is initialized on every rank and any rank can abort the others), runs the script as
`__main__`, and on an uncaught exception prints the traceback with every line prefixed `[rank k] ` and aborts the
whole job: under plain `mpiexec python script.py` an exception on one rank leaves the others waiting for it forever
(docs/distributed.md, "Failure"). A script that exits with a non-zero status aborts the job with that status too.
"""

from __future__ import annotations

import runpy
import sys
import traceback
from pathlib import Path

from plygrad.distributed.errors import rank_prefixed
from plygrad.distributed.world import init


def _report(rank: int, text: str) -> None:
    sys.stdout.flush()
    sys.stderr.write(rank_prefixed(rank, text))
    sys.stderr.flush()


def _script_traceback(exc: BaseException, script: str) -> str:
    """The traceback from the script's own frames on (this wrapper's and runpy's are noise to the reader)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != script:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write("usage: python -m plygrad.distributed._rank script.py [args...]\n")
        return 2
    world = init()
    sys.argv = list(argv)
    sys.path[0] = str(Path(argv[0]).resolve().parent)  # as `python script.py` has it (-m put the cwd there)
    try:
        runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if code is None or code == 0:
            return 0
        if not isinstance(code, int):
            _report(world.rank, str(code))
            code = 1
        if world.world_size > 1:
            _report(world.rank, f"exited with status {code}; aborting the job")
            world.provider.abort(code)
        return code
    except BaseException as exc:
        _report(world.rank, _script_traceback(exc, argv[0]))
        if world.world_size > 1:
            _report(world.rank, "uncaught exception; aborting the job")
            world.provider.abort(1)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
