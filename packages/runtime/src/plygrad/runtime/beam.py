"""BEAM search (`BEAM=n`, as in tinygrad): each kernel's optimizations chosen by timing candidates on its device.

Once per kernel per machine: the engine's own choice and no optimization form the first beam; each member is
extended by every action of `actions()` (codegen rejects those that do not apply); new programs compile side by
side and run on zero-filled scratch buffers proved in bounds first; the n fastest form the next beam until a round
gains less than `MIN_PROGRESS` or a limit (BEAM_TIMEOUT, BEAM_MAX_CANDIDATES, OPS_GROWTH_MAX) is hit; a winner
other than the engine's choice must beat it again in a rematch (`REMATCH_ROUNDS`). The winner is a record of the
program cache (folder "beam"), keyed by kernel, target, engine, beam width and `SEARCH_VERSION`.

BEAM changes which program runs, never what it computes. The steps, limits, record key and engine contract
(`lower(kernel, target, opts)`) are in docs/codegen.md §7; threads wait on a lock per search key (docs/threads.md).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import inspect
import math
import os
import statistics
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

from plygrad.ir.dtype import dtypes
from plygrad.ir.errors import IRError
from plygrad.ir.ops import Ops, OptOps
from plygrad.ir.records import KernelInfo, Opt, ParamInfo, ProgramInfo
from plygrad.ir.serialize import deserialize, serialize
from plygrad.ir.stage import Stage
from plygrad.ir.target import Target
from plygrad.ir.uop import UOp
from plygrad.runtime import config, discovery, trace
from plygrad.runtime.bounds import find_violations
from plygrad.runtime.cache import PROGRAMS
from plygrad.runtime.counters import opts_text
from plygrad.runtime.plugin import Backend, Program

SEARCH_FOLDER: Final = "beam"
SEARCH_VERSION: Final = 3  # part of every key: changing the actions or the timing makes stored choices stale
RUNS: Final = 3  # timed runs per candidate; the minimum is its time (the first run also pays for page faults)
MIN_PROGRESS: Final = 0.01  # a round must beat the best so far by 1% to go on (less is timing noise)
SLOWER_STOP: Final = 3.0  # a candidate whose first run takes 3x the best so far is not run again
REMATCH_ROUNDS: Final = 5  # runs each of the winner and the engine's own program, in turns, before keeping it
OPS_GROWTH_MAX: Final = 2.0  # a candidate estimated to do more than 2x the seeds' operations is never run
SPLIT_AMOUNTS: Final = (2, 3, 4, 8, 16)  # UPCAST and UNROLL; the target's vector widths are added
LOCAL_AMOUNTS: Final = (2, 4, 8, 16, 32, 64, 128, 256)
TILE_AMOUNTS: Final = (8, 16, 32)  # row blocks of a CPU matmul (codegen's tiles.py)
GROUP_AMOUNTS: Final = (4, 8, 16, 32, 64, 128, 256)

# a lowering engine: lower(kernel, target) -> program, and for one BEAM can drive also lower(kernel, target, opts)
Lowering = Callable[..., bytes]


@dataclass
class SearchStats:
    """Counts since the process started (or `reset`): how each kernel's list was found under BEAM."""

    searches: int = 0  # kernels searched
    reused: int = 0  # lookups answered by a stored list (the program cache's records, in memory or on disk)
    candidates: int = 0  # distinct programs timed, over all searches

    def reset(self) -> None:
        self.searches = self.reused = self.candidates = 0


STATS: Final = SearchStats()
_TOLD: Final[set[str]] = set()  # engines BEAM already said it cannot drive
_TOLD_LOCK: Final = threading.Lock()


@dataclass(frozen=True)
class Job:
    """One kernel to lower for one device: its SINK and bytes, the target's bytes, the engine (by name and
    callable) and the kernel's name for messages."""

    backend: Backend
    body: UOp
    kernel: bytes
    target: bytes
    engine: str
    lower: Lowering
    name: str

    def lower_with(self, opts: bytes | None) -> bytes:
        """PROGRAM bytes of the kernel lowered with `opts` (None: the engine's own choice), through the cache."""
        return PROGRAMS.lower(self.engine, self.lower, self.kernel, self.target, opts)


@dataclass(frozen=True)
class Timed:
    """One measured candidate: its run time in seconds and the optimization list that made it."""

    seconds: float
    opts: tuple[Opt, ...]


# ---- the contract with the lowering engine ----------------------------------------------------------------------
def opts_bytes(opts: Sequence[Opt]) -> bytes:
    """`opts` as the third argument of a lowering engine: a KERNEL-stage SINK without stores whose KernelInfo lists
    them (plygrad.codegen.opts_to_bytes writes the same bytes)."""
    return serialize(UOp(Ops.SINK, dtypes.void, (), KernelInfo("", tuple(opts))), Stage.KERNEL)


def opts_from_bytes(data: bytes) -> tuple[Opt, ...] | None:
    """The list `opts_bytes` wrote, or None when `data` is anything else (a damaged or foreign record)."""
    try:
        sink = deserialize(data, Stage.KERNEL)
    except IRError:
        return None
    if sink.op is not Ops.SINK or sink.src or not isinstance(sink.arg, KernelInfo):
        return None
    return sink.arg.opts


def takes_opts(lower: Lowering) -> bool:
    """Whether a lowering engine's callable accepts the optimization list as a third positional argument."""
    try:
        inspect.signature(lower).bind(b"", b"", b"")
    except (TypeError, ValueError):  # ValueError: no signature to read (a builtin); it cannot be told either
        return False
    return True


@functools.cache
def engine_identity(name: str) -> str:
    """What identifies the lowering engine `name` across processes: its entry point and distribution version (an
    in-process engine, installed for a test, is identified by its repr and is never found by another process)."""
    plugin = discovery.plugins(discovery.CODEGEN).get(name)
    if plugin is None:
        return name
    version = ""
    for ep in importlib.metadata.entry_points(group=discovery.CODEGEN, name=name):
        if ep.value == plugin.value and ep.dist is not None:
            version = f"{ep.dist.name}=={ep.dist.version}"
    return f"{name} {plugin.value} {version}"


discovery.on_change(engine_identity.cache_clear)


def search_key(kernel: bytes, target: bytes, engine: str, width: int) -> str:
    """The record key of a kernel's search: everything that decides which list wins."""
    h = hashlib.sha256()
    for part in (f"beam {SEARCH_VERSION} width {width}".encode(), engine_identity(engine).encode(), target, kernel):
        h.update(struct.pack("<Q", len(part)))
        h.update(part)
    return h.hexdigest()


def actions(target: Target, axes: Iterable[int]) -> list[Opt]:
    """The fixed list of actions tried on every beam member: UPCAST and UNROLL by small amounts and the target's
    vector widths, THREAD by the target's thread count, TILE (row blocks) on a CPU, LOCAL and GROUP where the
    target has workgroups. Most do
    not apply to a given kernel; codegen says which."""
    widths = {w for _, ws in target.vector_widths for w in ws}
    splits = sorted(set(SPLIT_AMOUNTS) | widths)
    found: list[Opt] = []
    for axis in axes:
        found += [Opt(OptOps.UPCAST, axis, k) for k in splits]
        found += [Opt(OptOps.UNROLL, axis, k) for k in splits]
        if target.threads > 1:
            found.append(Opt(OptOps.THREAD, axis, target.threads))
        if not target.has_local:
            found += [Opt(OptOps.TILE, axis, k) for k in TILE_AMOUNTS]
        if target.has_local:
            found += [Opt(OptOps.LOCAL, axis, k) for k in LOCAL_AMOUNTS if k <= target.max_threads_per_group]
            if target.has_shared:
                found += [Opt(OptOps.GROUP, axis, k) for k in GROUP_AMOUNTS if k <= target.max_threads_per_group]
    return found


# ---- the entry point the lowering calls -------------------------------------------------------------------------
def chosen_opts(job: Job) -> bytes | None:
    """The serialized list BEAM chose for this kernel on its device (searched the first time), to hand to the
    engine as its third argument; None where the engine's own choice stands: BEAM is off, the engine takes no list,
    or the kernel cannot be searched (its lowering fails, which the caller reports, or its bounds cannot be
    proved)."""
    width = config.BEAM.get()
    if width <= 0:
        return None
    if not takes_opts(job.lower):
        _tell_once(job.engine, f"BEAM={width}: codegen {job.engine!r} takes no optimization list (its entry point is "
                               "lower(kernel, target), not lower(kernel, target, opts)), so its own optimizations "
                               "are used; docs/codegen.md says how an engine supports BEAM")
        return None
    key = search_key(job.kernel, job.target, job.engine, width)
    with PROGRAMS.exclusive((SEARCH_FOLDER, key)):
        stored = PROGRAMS.read_record(SEARCH_FOLDER, key)
        if stored is not None:
            if opts_from_bytes(stored) is not None and _lowers(job, stored):
                STATS.reused += 1
                return stored
            PROGRAMS.discard_record(SEARCH_FOLDER, key)  # damaged, or an engine that changed: search again
        best = Search(job, width).run()
        if best is None:
            return None
        payload = opts_bytes(best)
        PROGRAMS.write_record(SEARCH_FOLDER, key, payload)
        return payload


def _lowers(job: Job, opts: bytes) -> bool:
    try:
        job.lower_with(opts)  # kept in memory: the caller's own lowering with it is then free
    except Exception:  # any failure means the record is unusable; the kernel is searched again
        return False
    return True


def _tell_once(engine: str, message: str) -> None:
    """Print `message` the first time this engine (by identity: another engine installed under the same name is
    told about again) is met."""
    identity = engine_identity(engine)
    with _TOLD_LOCK:
        if identity in _TOLD:
            return
        _TOLD.add(identity)
    print(message, file=sys.stderr)


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.2f} us" if math.isfinite(seconds) else "-"


# ---- the search -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Lowered:
    """A candidate lowered: its optimization list, launch info, source and variable values for the scratch run."""

    opts: tuple[Opt, ...]
    info: ProgramInfo
    source: str


class Search:
    """One kernel's search (module docstring); `run()` returns the fastest list, or None if it cannot search."""

    def __init__(self, job: Job, width: int) -> None:
        self.job, self.width = job, width
        self.backend, self.body, self.name = job.backend, job.body, job.name
        self.start = time.perf_counter()
        self.deadline = self.start + config.BEAM_TIMEOUT.get()
        self.cap = config.BEAM_MAX_CANDIDATES.get()
        self.jobs = config.PLYGRAD_COMPILE_JOBS.get() or os.cpu_count() or 1
        self.debug = config.DEBUG.get()
        self.tried: dict[tuple[Opt, ...], float | None] = {}  # every list asked for: its time, None if unusable
        self.by_source: dict[str, float | None] = {}  # lists that render the same program are timed once
        self.timed = 0
        self.best = math.inf
        self.seed_ops = 0  # the fewer estimated operations of the two seeds (ProgramInfo.ops)
        self.skipped = 0  # candidates not run for doing far more work than the seeds
        self.stopped = ""  # why the search ended before the beam stopped improving
        self.handles: list[Any] = []
        self.vals: tuple[int, ...] = ()
        self.progress = _Progress(f"BEAM {width} {job.name}")

    def run(self) -> tuple[Opt, ...] | None:
        try:
            program = deserialize(self.job.lower_with(None), Stage.PROGRAM)
        except Exception:  # not searched: the caller lowers the kernel again and reports the error with its context
            return None
        info: ProgramInfo = program.arg
        violations = find_violations(self.body, [p.size for p in info.params])
        if violations:
            self.progress.finish(f"not searched: access {violations[0].access.kind} of PARAM "
                                 f"{violations[0].access.param} cannot be proved inside its {violations[0].size} "
                                 "elements, so the kernel is not run on scratch buffers")
            return None
        self.vals = tuple(int(v.arg[2]) for v in program.src[1:])  # a variable's maximum: every access was proved
        already = self.body.arg.opts if isinstance(self.body.arg, KernelInfo) else ()
        # the engine's own list, minus what the kernel arrived with (that is part of the kernel, not of a list)
        own = info.opts[len(already):] if info.opts[:len(already)] == already else ()
        try:
            for param in info.params:
                self._scratch(param)
        except Exception as exc:  # out of device memory, most likely: the engine's own choice stands
            self.free()
            self.progress.finish(f"not searched: no scratch buffers ({type(exc).__name__}: {exc})")
            return None
        STATS.searches += 1
        try:
            with ThreadPoolExecutor(self.jobs, thread_name_prefix="plygrad-beam") as pool:
                return self._search(pool, own)
        finally:
            self.free()

    def _search(self, pool: ThreadPoolExecutor, own: tuple[Opt, ...]) -> tuple[Opt, ...] | None:
        seeds = self._measure(pool, [own, ()], seeds=True)
        if not seeds:
            self.progress.finish("not searched: neither the engine's own program nor the unoptimized one ran")
            return None
        default = self.tried.get(own) or math.inf
        beam = sorted(seeds, key=lambda t: t.seconds)[:self.width]
        best = beam[0]
        first_free = 1 + max((int(n.arg[0]) for n in self.body.toposort if n.op is Ops.RANGE), default=-1)
        # unshare_ranges may give a REDUCE its own copy of a range: one more axis id per REDUCE at most
        first_free += sum(1 for n in self.body.toposort if n.op is Ops.REDUCE)
        while not self.stopped:
            children = [(*member.opts, action) for member in beam
                        for action in actions(self.backend.target, range(first_free + len(member.opts)))]
            timed = self._measure(pool, children)
            if not timed:
                break
            beam = sorted(timed, key=lambda t: t.seconds)[:self.width]
            if beam[0].seconds >= best.seconds * (1 - MIN_PROGRESS):
                break
            best = beam[0]
        stop = f", stopped: {self.stopped}" if self.stopped else ""
        stop += f", {self.skipped} skipped for recomputing" if self.skipped else ""
        chosen = best.opts
        if chosen != own and own in self.tried and self.tried[own] is not None:
            rematch = self._rematch(own, chosen)
            if rematch is not None:
                mine, theirs = rematch
                verdict = "the default kept" if mine >= theirs else "the winner kept"
                stop += f"; in turns the winner took {_us(mine)}, the default {_us(theirs)}: {verdict}"
                chosen = own if mine >= theirs else chosen
        self.progress.finish(f"{self.timed} programs in {time.perf_counter() - self.start:.1f} s, best "
                             f"{_us(best.seconds)} (default {_us(default)}){stop}, opts: {opts_text(chosen)}")
        rec = trace.RECORDER
        if rec is not None:  # every candidate with its time, for the kernel view (trace.py)
            rec.beam(self.body, self.name, self.backend.name, tried=self.tried, chosen=chosen, width=self.width)
        return chosen

    def _rematch(self, own: tuple[Opt, ...], winner: tuple[Opt, ...]) -> tuple[float, float] | None:
        """The winner's and the engine's own program's median times over REMATCH_ROUNDS runs each, taken in turns
        (module docstring, step 5); None where either cannot be run again (the winner then stands)."""
        programs = []
        for opts in (winner, own):
            cand = self._lower(opts)
            binary = self._compile(cand.source) if cand is not None else None
            if cand is None or binary is None:
                return None
            try:
                programs.append((self.backend.load(cand.info.name, binary), cand.info))
            except Exception:  # as in _time: a program that does not load is never an error of the search
                return None
        times: list[list[float]] = [[], []]
        try:
            for round_ in range(REMATCH_ROUNDS):
                for which in ((0, 1) if round_ % 2 == 0 else (1, 0)):
                    times[which].append(self._run_once(*programs[which]))
        except Exception:
            return None
        return statistics.median(times[0]), statistics.median(times[1])

    def _out_of_budget(self) -> bool:
        if not self.stopped and time.perf_counter() >= self.deadline:
            self.stopped = f"time limit BEAM_TIMEOUT={config.BEAM_TIMEOUT.get():g} s"
        if not self.stopped and self.timed >= self.cap:
            self.stopped = f"candidate limit BEAM_MAX_CANDIDATES={self.cap}"
        return bool(self.stopped)

    def _measure(self, pool: ThreadPoolExecutor, candidates: Sequence[tuple[Opt, ...]],
                 seeds: bool = False) -> list[Timed]:
        """Lower, compile and time the lists not tried yet, in chunks so the limits are checked often; the seeds are
        timed whatever the limits say."""
        pending = [c for c in dict.fromkeys(candidates) if c not in self.tried]
        results: list[Timed] = []
        chunk = max(2 * self.jobs, 4)
        for start in range(0, len(pending), chunk):
            if not seeds and self._out_of_budget():
                break
            lowered = [c for c in (self._lower(opts) for opts in pending[start:start + chunk]) if c is not None]
            if seeds:
                self.seed_ops = min((c.info.ops for c in lowered if c.info.ops > 0), default=0)
            else:
                lowered = [c for c in lowered if not self._recomputes(c)]
            fresh = list(dict.fromkeys(c.source for c in lowered if c.source not in self.by_source))
            if not seeds:
                fresh = fresh[:max(self.cap - self.timed, 0)]
            binaries = dict(zip(fresh, pool.map(self._compile, fresh), strict=True))
            for cand in lowered:
                if cand.source in self.by_source:
                    # the same program as an earlier list: known already, and not a new beam member (a beam of
                    # two spellings of one program would explore nothing new)
                    self.tried[cand.opts] = self.by_source[cand.source]
                    continue
                if cand.source not in binaries or (not seeds and self._out_of_budget()):
                    continue
                seconds = self.by_source[cand.source] = self.tried[cand.opts] = \
                    self._time(cand, binaries[cand.source])
                if seconds is not None:
                    results.append(Timed(seconds, cand.opts))
                    self.best = min(self.best, seconds)
                if self.debug >= 3:
                    print(f"    BEAM {self.name:<24} {_us(seconds) if seconds is not None else 'failed':>12}  "
                          f"{opts_text(cand.opts)}")
        return results

    def _recomputes(self, cand: _Lowered) -> bool:
        """Whether `cand` is estimated to do more than OPS_GROWTH_MAX times the seeds' work: an action that moves a
        loop inside one a reduction does not depend on (TILE of a softmax's rows: its max and sum are then
        recomputed for every column, 2000x the work) would hold the search for minutes in one launch that nothing
        can interrupt. Such a list is recorded as unusable, never run."""
        if not self.seed_ops or cand.info.ops <= OPS_GROWTH_MAX * self.seed_ops:
            return False
        self.tried[cand.opts] = None
        self.skipped += 1
        if self.debug >= 3:
            print(f"    BEAM {self.name:<24} {'skipped':>12}  {opts_text(cand.opts)} (estimated "
                  f"{cand.info.ops / self.seed_ops:.0f}x the operations)")
        return True

    def _lower(self, opts: tuple[Opt, ...]) -> _Lowered | None:
        try:
            program = deserialize(self.job.lower_with(opts_bytes(opts)), Stage.PROGRAM)
        except Exception:  # OptError for an action that does not apply, or anything else codegen refuses: skipped
            self.tried[opts] = None
            return None
        return _Lowered(opts, program.arg, program.src[0].arg)

    def _compile(self, source: str) -> bytes | None:
        try:
            return PROGRAMS.compile(self.backend.compiler, self.job.target, source, persist=False)
        except Exception:  # a candidate the compiler rejects is skipped, as one codegen rejects
            return None

    def _time(self, cand: _Lowered, binary: bytes | None) -> float | None:
        """The fastest of RUNS runs of a candidate on the scratch buffers, or None if it does not load or run."""
        if binary is None:
            return None
        self.timed += 1
        STATS.candidates += 1
        info = cand.info
        try:
            program = self.backend.load(info.name, binary)
            best = math.inf
            for _ in range(RUNS):
                best = min(best, self._run_once(program, info))
                if best > SLOWER_STOP * self.best:
                    break
        except Exception:  # a candidate that fails to load or launch is skipped, never the search
            return None
        self.progress.update(f"{self.timed} programs, best {_us(min(self.best, best))}")
        return best

    def _run_once(self, program: Program, info: ProgramInfo) -> float:
        start = time.perf_counter()
        seconds = program(self.handles, info.global_size, info.local_size, self.vals, wait=True)
        if seconds is None:  # a backend that does not time its launches: time around it
            self.backend.synchronize()
            seconds = time.perf_counter() - start
        return seconds

    def _scratch(self, param: ParamInfo) -> None:
        """A zero-filled buffer for `param`, appended to the handles (free() releases those made so far)."""
        nbytes = param.size * param.dtype.itemsize
        handle = self.backend.allocator.alloc(nbytes)
        self.handles.append(handle)
        self.backend.allocator.copyin(handle, memoryview(bytes(nbytes)))

    def free(self) -> None:
        handles, self.handles = self.handles, []
        for handle in handles:
            self.backend.allocator.free(handle)


class _Progress:
    """The search's progress on stderr: one line rewritten in place on a terminal, else only the final line."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.live = sys.stderr.isatty()

    def update(self, text: str) -> None:
        if self.live:
            sys.stderr.write(f"\r\x1b[K{self.prefix}: {text}")
            sys.stderr.flush()

    def finish(self, text: str) -> None:
        erase = "\r\x1b[K" if self.live else ""
        sys.stderr.write(f"{erase}{self.prefix}: {text}\n")
        sys.stderr.flush()
