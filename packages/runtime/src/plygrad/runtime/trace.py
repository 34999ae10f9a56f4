"""The run recorder behind `VIZ`: which schedules and kernels ran, when, and what memory they held (docs/viz.md).

Stdlib only. `RECORDER` is None unless `VIZ` was set when the runtime was imported or `start()` was called, so the
hooks in plan.py, capture.py and buffer.py cost one global read when recording is off. A trace is versioned JSON
(IR as base64 of plygrad.ir.serialize bytes, no pickle); plygrad-viz renders it, found through the
`plygrad.reporters` entry point group so the runtime never imports it.
"""

from __future__ import annotations

import atexit
import base64
import gzip
import hashlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, Protocol, cast

from plygrad.ir.serialize import serialize, serialize_target
from plygrad.ir.stage import Stage
from plygrad.ir.uop import UOp
from plygrad.runtime import config, discovery

FORMAT: Final = "plygrad-trace"
VERSION: Final = (1, 0)  # major changes break readers; a minor adds fields a reader may ignore
TRACE_FILE: Final = "trace.json.gz"
REPORTERS: Final = "plygrad.reporters"  # entry point group: name -> write(trace_path, folder) -> list of paths
# bytes of buffer contents one launch may keep for `--check` (inputs before plus outputs after), and all launches
CHECK_LAUNCH_BYTES: Final = 4 << 20
CHECK_TOTAL_BYTES: Final = 256 << 20


class Launchable(Protocol):
    """What the recorder reads of a runtime.lowering.LoadedProgram (not imported: lowering imports plan)."""

    @property
    def info(self) -> Any: ...

    @property
    def source(self) -> str: ...

    @property
    def program(self) -> Any: ...

    @property
    def var_names(self) -> tuple[str, ...]: ...


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def user_site(skip: int = 2) -> str:
    """`file:line` of the innermost frame outside plygrad: the user's line that made the runtime do this."""
    frame = sys._getframe(skip)
    while frame is not None and str(frame.f_globals.get("__name__", "")).startswith("plygrad."):
        frame = frame.f_back  # type: ignore[assignment]
    return "?" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


class Recorder:
    """Everything one recording saw, in memory until `write`. Times are nanoseconds since the recorder started."""

    def __init__(self, check: bool = False) -> None:
        self.check = check  # also keep each launch's buffer contents (size-capped) for `--check`
        self.t0 = time.perf_counter_ns()
        self.started_unix = time.time()
        self.end_ns: int | None = None
        self.schedules: list[dict[str, Any]] = []
        self.runs: list[list[Any]] = []  # [schedule (-1: a jit replay), start, end, user site]
        self.kernels: list[dict[str, Any]] = []
        self.launches: list[list[Any]] = []  # [kernel, run, start, end, device ns or None]
        self.copies: list[list[Any]] = []  # [run, dst device, src device, bytes, start, end]
        self.memory: list[list[Any]] = []  # [time, buffer id, device, +bytes alloc / -bytes free, site, run]
        self.markers: list[list[Any]] = []  # [time, text]
        self.contents: list[dict[str, Any]] = []  # per checked launch: params before, written params after
        self._schedule_of: dict[int, int] = {}  # id(LINEAR) -> schedule index (the LINEAR is held in _held)
        self._kernel_of: dict[int, int] = {}  # id(LoadedProgram) -> kernel index
        self._ast_of: dict[int, UOp] = {}  # id(LoadedProgram) -> the kernel SINK a schedule lowered to it
        self._held: list[object] = []  # keeps every id above from being reused by another object
        self._live: dict[int, tuple[str, int]] = {}  # buffer id -> (device, bytes) while allocated
        self._check_bytes = 0
        self.builds: list[list[Any]] = []  # [start, end, producer, kernels]: a plan read, checked and compiled
        self.beams: list[dict[str, Any]] = []  # one BEAM search each: its candidates timed and the list chosen
        self._lock = threading.RLock()  # a schedule's record makes its kernels' records under it
        self._thread = threading.local()  # the run each thread is in (plans may run in several threads at once)

    @property
    def current_run(self) -> int:
        """The run the calling thread is in, -1 outside any."""
        run: int = getattr(self._thread, "run", -1)
        return run

    def now(self) -> int:
        return time.perf_counter_ns() - self.t0

    # ---- schedules and runs -----------------------------------------------------------------------------------
    def begin_run(self, linear: UOp | None, steps: Sequence[object], producer: str | None) -> int:
        """A plan starts running `steps` (one per CALL of `linear`); a replay has no LINEAR. Returns the run."""
        schedule = -1
        if linear is not None:
            with self._lock:
                found = self._schedule_of.get(id(linear))
                if found is None:
                    found = self._schedule_of[id(linear)] = len(self.schedules)
                    self._held.append(linear)
                    self.schedules.append(self._schedule_record(linear, steps, producer))
            schedule = found
        with self._lock:
            self.runs.append([schedule, self.now(), None, user_site(3)])
            run = len(self.runs) - 1
        self._thread.run = run
        return run

    def _schedule_record(self, linear: UOp, steps: Sequence[object], producer: str | None) -> dict[str, Any]:
        calls: list[int] = []  # per CALL: the kernel index it launches, -1 for a COPY
        for call, step in zip(linear.src, steps, strict=False):
            loaded = getattr(step, "loaded", None)
            if loaded is None:
                calls.append(-1)
                continue
            self._ast_of.setdefault(id(loaded), call.src[0])
            calls.append(self._kernel(loaded, str(getattr(step, "device", "?"))))
        return {"producer": producer, "linear": _b64(serialize(linear, Stage.SCHEDULE)), "calls": calls}

    def end_run(self, run: int) -> None:
        self.runs[run][2] = self.now()
        self._thread.run = -1

    def build(self, start: int, producer: str | None, kernels: int) -> None:
        """A plan built from `start` until now (decoding, bounds proofs, lowering and compiling its kernels)."""
        self.builds.append([start, self.now(), producer, kernels])

    # ---- kernels and launches ---------------------------------------------------------------------------------
    def _kernel(self, loaded: Launchable, device: str) -> int:
        """The index of `loaded`'s kernel record, made on first sight."""
        found = self._kernel_of.get(id(loaded))
        if found is not None:
            return found
        with self._lock:  # two threads launching a new program at once make one record
            found = self._kernel_of.get(id(loaded))
            return found if found is not None else self._new_kernel(loaded, device)

    def _new_kernel(self, loaded: Launchable, device: str) -> int:
        from plygrad.runtime.device import Device  # the registry imports plugins: only once something runs

        info = loaded.info
        target = Device[device].target
        ast = self._ast_of.get(id(loaded))
        ast_bytes = None if ast is None else serialize(ast, Stage.KERNEL)
        self.kernels.append({
            "name": info.name, "device": device, "source": loaded.source,
            "ast": None if ast_bytes is None else _b64(ast_bytes),
            "ast_sha": None if ast_bytes is None else _sha(ast_bytes),
            "target": _b64(serialize_target(target)), "renderer": target.renderer, "arch": target.arch,
            "opts": [[o.op.name, o.axis, o.amount] for o in info.opts],
            "global_size": list(info.global_size), "local_size": None if info.local_size is None
            else list(info.local_size), "ops": info.ops, "mem": info.mem,
            "params": [[p.index, p.dtype.name, p.size, p.writable] for p in info.params],
            "vars": list(loaded.var_names),
        })
        self._held.append(loaded)
        index = self._kernel_of[id(loaded)] = len(self.kernels) - 1
        return index

    def launch(self, device: str, loaded: Launchable, handles: list[object], vals: Sequence[int]) -> float | None:
        """Run one launch, waiting for it (so start and end bracket the work), and record it. Returns the device
        seconds the program measured, or None."""
        kernel = self._kernel(loaded, device)
        info = loaded.info
        before = self._contents(device, info.params, handles, False) if self.check else None
        start = self.now()
        seconds: float | None = loaded.program(handles, info.global_size, info.local_size, vals, wait=True)
        end = self.now()
        self.launches.append([kernel, self.current_run, start, end, None if seconds is None else round(seconds * 1e9)])
        if before is not None:
            after = self._contents(device, info.params, handles, True)
            self.contents.append({"launch": len(self.launches) - 1, "vals": list(vals), "before": before,
                                  "after": after})
        return seconds

    def _contents(self, device: str, params: Sequence[Any], handles: list[object], written: bool) -> list[str | None]:
        """Base64 of each parameter buffer (only the written ones when `written`), None past the size caps."""
        from plygrad.runtime.device import Device

        backend = Device[device]
        backend.synchronize()
        out: list[str | None] = []
        launch_bytes = 0
        for param, handle in zip(params, handles, strict=True):
            nbytes = param.size * param.dtype.itemsize
            if (written and not param.writable) or launch_bytes + nbytes > CHECK_LAUNCH_BYTES \
                    or self._check_bytes + nbytes > CHECK_TOTAL_BYTES:
                out.append(None)
                continue
            launch_bytes += nbytes
            self._check_bytes += nbytes
            data = bytearray(nbytes)
            backend.allocator.copyout(memoryview(data), handle)
            out.append(_b64(bytes(data)))
        return out

    def copy(self, dst: Any, src: Any, do_copy: Callable[[Any, Any], None]) -> None:
        """Run `do_copy(dst, src)` between two Buffers and record it."""
        start = self.now()
        do_copy(dst, src)
        self.copies.append([self.current_run, dst.device, src.device, src.nbytes, start, self.now()])

    def beam(self, body: UOp, kernel: str, device: str, *, tried: Mapping[tuple[Any, ...], float | None],
             chosen: Sequence[Any], width: int) -> None:
        """A BEAM search of the kernel SINK `body` (named `kernel`) on `device`: every optimization list it tried
        with its seconds (None: it did not lower, compile or run) and the one it chose. `ast_sha` links it to the
        kernel record of the same AST."""
        def listed(opts: Sequence[Any]) -> list[list[Any]]:
            return [[o.op.name, o.axis, o.amount] for o in opts]

        self.beams.append({"kernel": kernel, "device": device, "width": width, "chosen": listed(chosen),
                           "ast_sha": _sha(serialize(body, Stage.KERNEL)),
                           "tried": [[listed(opts), seconds] for opts, seconds in tried.items()]})

    # ---- memory and markers -----------------------------------------------------------------------------------
    def alloc(self, buffer_id: int, device: str, nbytes: int) -> None:
        self._live[buffer_id] = (device, nbytes)
        self.memory.append([self.now(), buffer_id, device, nbytes, user_site(3), self.current_run])

    def free(self, buffer_id: int) -> None:
        found = self._live.pop(buffer_id, None)
        if found is not None:  # a buffer allocated before the recording started is not followed
            self.memory.append([self.now(), buffer_id, found[0], -found[1], None, self.current_run])

    def mark(self, text: str) -> None:
        self.markers.append([self.now(), str(text)])

    # ---- output -----------------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The whole trace as JSON-ready data (docs/viz.md describes each field)."""
        end = self.end_ns if self.end_ns is not None else self.now()
        return {"format": FORMAT, "version": list(VERSION), "started_unix": self.started_unix, "wall_ns": end,
                "argv": list(sys.argv), "pid": os.getpid(), "schedules": self.schedules, "runs": self.runs,
                "kernels": self.kernels, "launches": self.launches, "copies": self.copies, "memory": self.memory,
                "markers": self.markers, "contents": self.contents, "builds": self.builds,
                "beams": self.beams}

    def write(self, folder: str | os.PathLike[str]) -> Path:
        """Write `trace.json.gz` into `folder` (made if missing); return its path."""
        path = Path(folder)
        path.mkdir(parents=True, exist_ok=True)
        out = path / TRACE_FILE
        with gzip.open(out, "wt", encoding="utf-8") as f:
            json.dump(self.to_json(), f, separators=(",", ":"))
        return out


RECORDER: Recorder | None = None


def start(check: bool = False) -> Recorder:
    """Start recording (RuntimeError if a recording is already on: one at a time per process)."""
    global RECORDER  # noqa: PLW0603 (the process's one recording, read by every hook)
    if RECORDER is not None:
        raise RuntimeError("a plygrad recording is already running (VIZ is set, or record()/start() was called "
                           "and not stopped): stop it first")
    RECORDER = Recorder(check)
    return RECORDER


def stop() -> Recorder:
    """Stop recording and return what was recorded."""
    global RECORDER  # noqa: PLW0603 (the process's one recording, read by every hook)
    rec = RECORDER
    if rec is None:
        raise RuntimeError("no plygrad recording is running: call start() or use record() first")
    rec.end_ns = rec.now()
    RECORDER = None
    return rec


def mark(text: str) -> None:
    """Put a marker (`"epoch 3"`) on the timeline of the running recording; nothing when none runs."""
    rec = RECORDER
    if rec is not None:
        rec.mark(text)


def write_reports(rec: Recorder, folder: str | os.PathLike[str]) -> list[Path]:
    """Write the trace into `folder`, then every report an installed `plygrad.reporters` plugin makes of it."""
    trace = rec.write(folder)
    paths = [trace]
    for plugin in discovery.plugins(REPORTERS).values():
        try:
            report = cast("Callable[[Path, Path], Iterable[str | os.PathLike[str]]]", plugin.load())
            paths.extend(Path(p) for p in report(trace, Path(folder)))
        except Exception as exc:  # the trace is written: a failed report must not lose it, nor end the program
            print(f"plygrad viz: reporter {plugin.name!r} ({plugin.origin}) failed on {trace}: "
                  f"{type(exc).__name__}: {exc}", file=sys.stderr)
    return paths


@contextmanager
def record(folder: str | os.PathLike[str], check: bool = False, quiet: bool = False) -> Iterator[Recorder]:
    """Record what runs inside the block and write the trace and reports into `folder` at its end."""
    rec = start(check)
    try:
        yield rec
    finally:
        stop()
        _announce(write_reports(rec, folder), quiet)


def _announce(paths: list[Path], quiet: bool) -> None:
    if quiet:
        return
    for path in paths:
        print(f"plygrad viz: wrote {path}", file=sys.stderr)
    if len(paths) == 1:
        print(f"plygrad viz: pip install plygrad-viz, then `python -m plygrad.viz {paths[0]}` renders it as "
              "report.html and chrome_trace.json", file=sys.stderr)


def _write_at_exit() -> None:
    if RECORDER is not None:
        rec = stop()
        _announce(write_reports(rec, config.VIZ_DIR.get() or "plygrad-viz"), False)


# read once, when the runtime is imported (as a process's DEBUG level is set before it starts)
if config.VIZ.get() >= 1:
    start(check=config.VIZ.get() >= 2)
    atexit.register(_write_at_exit)
