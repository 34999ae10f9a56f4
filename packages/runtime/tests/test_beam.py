"""BEAM search in the runtime (beam.py), against the fake PY backend and fake engines (beam_fakes.py): the costed
backend makes known which optimization list is fastest, so the search's choice can be checked, and its limits."""


from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from beam_fakes import COST, COSTED_PY, ENGINE_CALLS, CostedBackend, lower_with_opts
from rt_fakes import fake_plugins, lower_to_text
from rt_schedules import add_then_sum

from plygrad.ir import AxisType, KernelInfo, Ops, Opt, OptOps, Stage, Target, UOp, dtypes, serialize, to_text
from plygrad.runtime import PROGRAMS, Buffer, Device, beam, config, prepare_kernel, run_linear
from plygrad.runtime.discovery import BACKENDS, CODEGEN, installed
from plygrad.runtime.plan import clear_plans
from plygrad.runtime.testing import add_kernel, row_sum_kernel, scale_kernel


@pytest.fixture
def costed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The costed PY backend as "PY" and the fake engine as `default`, BEAM=4, fresh search counts."""
    monkeypatch.setenv("BEAM", "4")
    beam.STATS.reset()
    ENGINE_CALLS.clear()
    with fake_plugins(), installed(BACKENDS, "PY", COSTED_PY), installed(CODEGEN, "default", lower_with_opts):
        yield


def run_sum(rows: int = 4, cols: int = 4) -> list[np.ndarray]:
    """add_then_sum over a = arange: the row sums and the sums before reduction."""
    a = Buffer("PY", rows * cols, dtypes.float32).copyin(np.arange(rows * cols, dtype=np.float32).tobytes())
    out = run_linear(add_then_sum(a, a, rows, cols))
    return [np.frombuffer(out[i].copyout(), np.float32) for i in (-2, -1)]


def expected_sum(rows: int = 4, cols: int = 4) -> list[np.ndarray]:
    doubled = 2 * np.arange(rows * cols, dtype=np.float32)
    return [doubled.reshape(rows, cols).sum(1), doubled]


def fresh_process_caches() -> None:
    """What a new process starts with: no plans, programs or records in memory (the disk cache stays)."""
    PROGRAMS.clear_memory()
    clear_plans()
    Device.reset()


# ---- the contract ----------------------------------------------------------------------------------------------
def test_opts_bytes_round_trip_and_reject_anything_else() -> None:
    opts = (Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.THREAD, 1, 8))
    assert beam.opts_from_bytes(beam.opts_bytes(opts)) == opts
    assert beam.opts_from_bytes(beam.opts_bytes(())) == ()
    assert beam.opts_from_bytes(b"not IR") is None
    assert beam.opts_from_bytes(serialize(add_kernel(4), Stage.KERNEL)) is None


def test_takes_opts_reads_the_engine_signature() -> None:
    assert beam.takes_opts(lower_with_opts)
    assert not beam.takes_opts(lower_to_text)
    assert beam.takes_opts(lambda kernel, target, *rest: b"")


def test_actions_cover_the_heuristics_and_workgroup_targets() -> None:
    found = set(beam.actions(Target("CPU", "c", threads=8), [0]))
    for amount in (2, 3, 4, 8, 16):
        assert {Opt(OptOps.UPCAST, 0, amount), Opt(OptOps.UNROLL, 0, amount)} <= found
    assert Opt(OptOps.THREAD, 0, 8) in found and Opt(OptOps.TILE, 0, 16) in found
    assert not {o for o in found if o.op in (OptOps.LOCAL, OptOps.GROUP)}
    gpu = set(beam.actions(Target.cuda(), [1]))
    assert {Opt(OptOps.LOCAL, 1, 256), Opt(OptOps.GROUP, 1, 16)} <= gpu
    assert not {o for o in gpu if o.op in (OptOps.THREAD, OptOps.TILE)}, "a GPU target has threads=1, no row blocks"


# ---- searching -------------------------------------------------------------------------------------------------
def test_beam_off_lowers_with_the_engines_own_choice(costed: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BEAM")
    for got, want in zip(run_sum(), expected_sum(), strict=True):
        np.testing.assert_array_equal(got, want)
    assert ENGINE_CALLS == [None, None], "two kernels, each lowered once, without an opts argument"
    assert beam.STATS.searches == 0


def test_search_finds_the_fastest_list_and_changes_no_result(costed: None, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    # launches of 2 to 32 ms: a scheduling hiccup of a shared machine (a millisecond or two) cannot reorder them
    monkeypatch.setattr(COST, "base", 0.032)
    monkeypatch.setenv("DEBUG", "2")
    for got, want in zip(run_sum(), expected_sum(), strict=True):
        np.testing.assert_array_equal(got, want)
    assert beam.STATS.searches == 2
    loaded = prepare_kernel(Device["PY"], row_sum_kernel(4, 4), "conformance_row_sum")
    # the cheapest: both axes upcast by 4 (one list or the other order: the same program)
    assert set(loaded.info.opts) == {Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 4)}
    assert beam.STATS.searches == 2, "the kernel was searched once"
    captured = capsys.readouterr()
    assert "conformance_row_sum opts: UPCAST(axis=" in captured.out, "DEBUG=2 shows the opts each kernel ran with"
    progress = [line for line in captured.err.splitlines() if line.startswith("BEAM 4 conformance_row_sum")]
    assert len(progress) == 1 and "programs in" in progress[0] and "best" in progress[0], captured.err


def test_a_winner_timed_in_a_fast_spell_loses_the_rematch_against_the_default(
        costed: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A 2-element kernel: only UPCAST(0, 2) applies, the engine's own choice (cost base/2); the unoptimized program
    (cost base) is timed while the machine is fast, and wins the search. Timed again beside the default, in turns,
    it loses, and the default is kept (and recorded)."""
    monkeypatch.setattr(COST, "base", 0.016)
    backend = Device["PY"]
    assert isinstance(backend, CostedBackend)
    backend.fast_spells[COST.base] = beam.RUNS  # the unoptimized seed's timed runs, no more
    loaded = prepare_kernel(backend, add_kernel(2), "conformance_add")
    assert loaded.info.opts == (Opt(OptOps.UPCAST, 0, 2),)
    assert backend.fast_spells[COST.base] == 0, "the spell covered the search's runs of the unoptimized program"
    assert "the default kept" in capsys.readouterr().err
    backend.fast_spells[COST.base] = 0
    fresh_process_caches()
    again = prepare_kernel(Device["PY"], add_kernel(2), "conformance_add")
    assert again.info.opts == (Opt(OptOps.UPCAST, 0, 2),) and beam.STATS.searches == 1, "the record says so"


def test_choice_is_read_back_from_memory_and_from_disk(costed: None) -> None:
    run_sum()
    assert beam.STATS.searches == 2
    clear_plans()
    reused = beam.STATS.reused
    run_sum()
    assert beam.STATS.searches == 2 and beam.STATS.reused > reused, "from memory"
    fresh_process_caches()
    before = PROGRAMS.stats.record_disk_hits
    for got, want in zip(run_sum(), expected_sum(), strict=True):
        np.testing.assert_array_equal(got, want)
    assert beam.STATS.searches == 2, "not searched again"
    assert PROGRAMS.stats.record_disk_hits - before == 2, "both lists read from disk, as a new process would"


def test_a_damaged_or_stale_record_is_searched_again(costed: None) -> None:
    run_sum()
    target = Device["PY"].target.to_bytes()
    add_key, sum_key = (beam.search_key(serialize(k, Stage.KERNEL), target, "default", 4)
                        for k in (add_kernel(16), row_sum_kernel(4, 4)))
    damaged = PROGRAMS.entry_path(add_key, beam.SEARCH_FOLDER)
    damaged.write_bytes(damaged.read_bytes()[:-3])  # truncated: the digest no longer matches
    # intact, but a list the engine rejects (an engine that changed without a new version)
    PROGRAMS.write_record(beam.SEARCH_FOLDER, sum_key, beam.opts_bytes((Opt(OptOps.UPCAST, 9, 2),)))
    fresh_process_caches()
    for got, want in zip(run_sum(), expected_sum(), strict=True):
        np.testing.assert_array_equal(got, want)
    assert beam.STATS.searches == 4, "both kernels searched again"
    loaded = prepare_kernel(Device["PY"], row_sum_kernel(4, 4), "conformance_row_sum")
    assert Opt(OptOps.UPCAST, 9, 2) not in loaded.info.opts
    PROGRAMS.clear_memory()
    for key in (add_key, sum_key):
        record = PROGRAMS.read_record(beam.SEARCH_FOLDER, key)
        assert record is not None and beam.opts_from_bytes(record), "replaced on disk by the new search's list"


def test_time_limit_is_honoured(costed: None, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(COST, "base", 0.05)
    monkeypatch.setenv("BEAM_TIMEOUT", "0.1")
    start = time.perf_counter()
    prepare_kernel(Device["PY"], row_sum_kernel(4, 4), "conformance_row_sum")
    took = time.perf_counter() - start
    # the two starting points (own 25 ms, none 50 ms, 3 runs each) are timed whatever the limit; nothing after
    assert beam.STATS.candidates == 2
    assert took < 0.1 + 0.25 + 2.0, f"the search took {took:.2f} s with BEAM_TIMEOUT=0.1"
    assert "stopped: time limit BEAM_TIMEOUT=0.1 s" in capsys.readouterr().err


def test_candidate_limit_is_honoured(costed: None, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("BEAM_MAX_CANDIDATES", "3")
    prepare_kernel(Device["PY"], row_sum_kernel(4, 4), "conformance_row_sum")
    assert beam.STATS.candidates == 3
    assert "stopped: candidate limit BEAM_MAX_CANDIDATES=3" in capsys.readouterr().err


def test_scratch_buffers_are_the_searchs_own_and_freed(costed: None) -> None:
    device = Device["PY"]
    assert isinstance(device, CostedBackend)
    prepare_kernel(device, add_kernel(8), "conformance_add")
    assert device.allocations == 3, "one zero-filled scratch buffer per parameter, nothing else"
    assert device.frees == 3, "all freed"


def test_engine_without_opts_argument_falls_back_with_a_message(monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    def two_argument_engine(kernel: bytes, target: bytes) -> bytes:  # an engine written before BEAM
        return lower_to_text(kernel, target)

    monkeypatch.setenv("BEAM", "2")
    beam.STATS.reset()
    with fake_plugins(), installed(CODEGEN, "default", two_argument_engine):
        for got, want in zip(run_sum(), expected_sum(), strict=True):
            np.testing.assert_array_equal(got, want)
    err = capsys.readouterr().err
    assert err.count("codegen 'default' takes no optimization list") == 1, f"said once, for two kernels: {err}"
    assert beam.STATS.searches == 0


def test_threads_needing_one_kernel_share_one_search(costed: None) -> None:
    results: list[tuple[Opt, ...]] = []
    device = Device["PY"]

    def work() -> None:
        results.append(prepare_kernel(device, row_sum_kernel(4, 4), "conformance_row_sum").info.opts)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert beam.STATS.searches == 1
    assert len(results) == 4 and len(set(results)) == 1


@pytest.mark.parametrize(("name", "value", "message"), [("BEAM_TIMEOUT", "soon", "is not a number"),
                                                         ("BEAM_TIMEOUT", "nan", "is not a number"),
                                                         ("BEAM", "wide", "is not an integer")])
def test_bad_settings_say_which(name: str, value: str, message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, value)
    get = {"BEAM": config.BEAM.get, "BEAM_TIMEOUT": config.BEAM_TIMEOUT.get}[name]
    with pytest.raises(ValueError, match=f"{name}='{value}' {message}"):
        get()


def test_debug_3_prints_every_candidate(costed: None, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DEBUG", "3")
    prepare_kernel(Device["PY"], add_kernel(8), "conformance_add")
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("    BEAM conformance_add")]
    assert len(lines) == beam.STATS.candidates == 3, "own choice, no opts, UPCAST(0, 4)"
    assert any(line.endswith("UPCAST(axis=0, amount=4)") for line in lines)


def test_a_kernel_with_a_variable_is_searched(costed: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(COST, "base", 0.032)
    kernel, _ = scale_kernel(8)
    loaded = prepare_kernel(Device["PY"], kernel, "conformance_scale")
    assert beam.STATS.searches == 1 and loaded.info.opts == (Opt(OptOps.UPCAST, 0, 4),)


def test_a_kernel_whose_bounds_cannot_be_proved_is_not_run(costed: None,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    out, a = UOp(Ops.PARAM, dtypes.float32.ptr(4), (), 0), UOp(Ops.PARAM, dtypes.float32.ptr(8), (), 1)
    i = UOp.range(8, 0, AxisType.LOOP)  # writes 8 elements of a 4-element buffer
    written = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, i)),
                                           UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, a.dtype, (a, i)),))))
    kernel = UOp(Ops.SINK, dtypes.void, (UOp(Ops.END, dtypes.void, (written, i)),), KernelInfo("overrun"))
    device = Device["PY"]
    assert isinstance(device, CostedBackend)
    loaded = prepare_kernel(device, kernel, "overrun")
    assert loaded.info.opts == (Opt(OptOps.UPCAST, 0, 2),), "the engine's own choice"
    assert (device.allocations, beam.STATS.searches) == (0, 0), "nothing ran"
    assert "not searched: access store of PARAM 0 cannot be proved inside its 4 elements" in capsys.readouterr().err


# ---- the program cache's part: in-memory candidates and records -------------------------------------------------
def test_candidates_stay_in_memory_until_one_is_wanted_for_good(costed: None) -> None:
    compiler, target = Device["PY"].compiler, b"target"
    source = to_text(add_kernel(4), Stage.KERNEL)  # what the PY compiler reads
    PROGRAMS.compile(compiler, target, source, persist=False)
    assert not list((config.cache_dir() / "programs").rglob("*.bin")), "a candidate is not written to disk"
    PROGRAMS.compile(compiler, target, source)
    assert len(list((config.cache_dir() / "programs").rglob("*.bin"))) == 1, "the winner is, when it is loaded"


def test_records_live_in_memory_and_on_disk_unless_the_disk_cache_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    PROGRAMS.write_record("beam", "ab" * 32, b"payload")
    assert PROGRAMS.entry_path("ab" * 32, "beam").is_file()
    PROGRAMS.clear_memory()
    assert PROGRAMS.read_record("beam", "ab" * 32) == b"payload"
    PROGRAMS.discard_record("beam", "ab" * 32)
    assert PROGRAMS.read_record("beam", "ab" * 32) is None
    monkeypatch.setenv("PLYGRAD_DISABLE_CACHE", "1")
    PROGRAMS.write_record("beam", "cd" * 32, b"payload")
    assert not PROGRAMS.entry_path("cd" * 32, "beam").exists()
    assert PROGRAMS.read_record("beam", "cd" * 32) == b"payload"
