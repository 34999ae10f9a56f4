"""The packaged scheduler conformance suite (`plygrad.scheduler.conformance`) on real and deliberately broken
schedulers: `default` and `unfused` pass it, and toy plugins that fuse wrongly, order kernels wrongly or index
outside a buffer fail it on a graph the report names, which fails again when run alone by its seed. The suite runs
schedules on NumPy (`plygrad.scheduler.numpy_exec`), never on the runtime: a subprocess shows it imports none."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from plygrad.ir import Ops, Stage, UOp, deserialize, serialize, verify
from plygrad.scheduler import conformance, schedule
from plygrad.scheduler.conformance import ConformanceError, check_scheduler, run_conformance
from plygrad.scheduler.random_graphs import KINDS, random_graph

SCHEDULERS = "plygrad.schedulers"
GRAPHS = 12


def _rewrite_kernels(data: bytes, op: Ops, into: Ops) -> bytes:
    """`default`'s schedule with every `op` inside its kernels turned into `into` (a fusion that got one op wrong)."""
    linear = deserialize(schedule(data), Stage.SCHEDULE)
    swaps = {n: n.replace(op=into) for call in linear.src for n in call.src[0].toposort if n.op is op}
    return serialize(linear.substitute(swaps) if swaps else linear, Stage.SCHEDULE)


def adds_instead_of_max(data: bytes) -> bytes:
    return _rewrite_kernels(data, Ops.MAX, Ops.ADD)


def calls_reversed(data: bytes) -> bytes:
    """`default`'s kernels in reverse order: a consumer runs before the kernel it reads."""
    linear = deserialize(schedule(data), Stage.SCHEDULE)
    return serialize(linear.replace(src=tuple(reversed(linear.src))), Stage.SCHEDULE)


def reads_past_the_end(data: bytes) -> bytes:
    """`default`'s schedule with every address 1000 elements further on: it verifies, but reads outside."""
    linear = deserialize(schedule(data), Stage.SCHEDULE)
    moved = {n: n.replace(src=(n.src[0], n.src[1] + UOp.const(n.src[1].dtype, 1000), *n.src[2:]))
             for call in linear.src for n in call.src[0].toposort if n.op is Ops.INDEX}
    return serialize(linear.substitute(moved), Stage.SCHEDULE)


@pytest.mark.parametrize("name", ["default", "unfused"])
def test_the_real_schedulers_pass_by_entry_point_name(name: str) -> None:
    report = check_scheduler(name, graphs=GRAPHS, seed=0)
    assert report.ok and report.graphs == GRAPHS and report.skipped == 0
    assert report.kernels > 0


def test_default_makes_fewer_kernels_than_unfused_on_the_same_graphs() -> None:
    report = check_scheduler("default", graphs=GRAPHS, seed=0)
    assert report.kernels < report.unfused_kernels


@pytest.mark.parametrize("toy", [adds_instead_of_max, calls_reversed, reads_past_the_end])
def test_a_wrong_schedule_is_caught_and_reproduced_by_its_seed(toy: Callable[[bytes], bytes]) -> None:
    report = run_conformance(toy, graphs=GRAPHS, seed=0)
    assert not report.ok, report.summary()
    first = report.failures[0]
    assert "unfused gives" in first.problem or "refused" in first.problem
    assert f"graph seed {first.seed}" in report.summary()
    again = run_conformance(toy, graphs=1, seed=first.seed)
    assert [f.seed for f in again.failures] == [first.seed]
    with pytest.raises(ConformanceError, match=f"scheduler '{toy.__name__}'"):
        check_scheduler(toy, graphs=GRAPHS, seed=0)


def _install_toy(where: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> str:
    """A real installed plugin: a module and a dist-info folder (entry_points.txt) on sys.path, found by
    importlib.metadata as any pip-installed scheduler is. Returns the entry point's value (module:attr); the module
    name is the test's own, so no test sees another's module in sys.modules."""
    module = f"toy_{where.name}"
    (where / f"{module}.py").write_text(textwrap.dedent(body))
    info = where / "toy_scheduler-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-scheduler\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[plygrad.schedulers]\ntoy = {module}:schedule\n")
    monkeypatch.syspath_prepend(str(where))
    return f"{module}:schedule"


def test_a_plugin_installed_under_a_name_is_checked_by_that_name(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    value = _install_toy(tmp_path, monkeypatch, """\
        def schedule(data):
            return b"not a schedule"
        """)
    report = run_conformance("toy", graphs=2, seed=0)
    assert report.scheduler == "'toy'" and not report.ok
    assert f"the schedule from scheduler 'toy' ({value} from distribution toy-scheduler 0.1) does not decode" \
        in report.failures[0].problem


def test_an_installed_plugin_that_fails_to_import_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    value = _install_toy(tmp_path, monkeypatch, "raise RuntimeError('broken on purpose')\n")
    with pytest.raises(LookupError, match=re.escape(f"scheduler 'toy' ({value}) failed to import: broken on")):
        run_conformance("toy", graphs=1)


def test_a_plugin_that_raises_is_a_failure_not_a_crash() -> None:
    def refuses(data: bytes) -> bytes:
        raise RuntimeError("not today")

    report = run_conformance(refuses, graphs=2, seed=0)
    assert [f.problem for f in report.failures] == ["the scheduler raised RuntimeError: not today"] * 2


def test_bytes_that_do_not_decode_are_refused_naming_the_plugin() -> None:
    def garbage(data: bytes) -> bytes:
        return b"not a schedule"

    [failure] = run_conformance(garbage, graphs=1, seed=0).failures
    assert failure.problem.startswith("its schedule was refused: the schedule from scheduler 'garbage' (in-process ")
    assert "does not decode as serialized plygrad IR" in failure.problem


def test_random_graphs_are_valid_deterministic_and_cover_every_kind() -> None:
    seen: set[Ops] = set()
    for seed in range(60):
        graph = random_graph(seed)
        verify(graph.sink, Stage.TENSOR)
        assert random_graph(seed).sink is graph.sink  # hash-consed: the same seed builds the same graph
        seen |= {n.op for n in graph.sink.toposort}
    # elementwise, reductions, every movement op, casts, gathers (CMPEQ of an index), assigns
    assert {Ops.ADD, Ops.MUL, Ops.MAX, Ops.REDUCE, Ops.PAD, Ops.SHRINK, Ops.FLIP, Ops.RESHAPE, Ops.PERMUTE,
            Ops.EXPAND, Ops.CAST, Ops.CMPEQ, Ops.ASSIGN, Ops.WHERE} <= seen
    assert set(KINDS) == {"unary", "binary", "reduce", "views", "broadcast", "gather"}


def test_the_command_line_checks_a_scheduler_by_name() -> None:
    done = subprocess.run([sys.executable, "-m", "plygrad.scheduler.conformance", "default", "--graphs", "3",
                           "--seed", "5"], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "scheduler 'default': 3 of 3 random graphs (seeds 5..7) equal to unfused" in done.stdout


def test_the_command_line_names_a_missing_scheduler() -> None:
    done = subprocess.run([sys.executable, "-m", "plygrad.scheduler.conformance", "no_such_scheduler"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode != 0
    assert "no plygrad.schedulers entry point named 'no_such_scheduler'" in done.stderr


def _python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    return done.stdout.strip()


def test_importing_the_suite_imports_neither_numpy_nor_another_layer() -> None:
    """NumPy is the `conformance` extra: the scheduler package, suite included, imports without it."""
    code = ("import sys, plygrad.scheduler, plygrad.scheduler.conformance; "
            "print(sorted(m for m in sys.modules if m == 'numpy' or m.startswith(('plygrad.runtime', "
            "'plygrad.frontend', 'plygrad.backends', 'plygrad.codegen'))))")
    assert _python(code) == "[]"


def test_running_the_suite_imports_no_runtime_or_backend() -> None:
    code = ("import sys; from plygrad.scheduler.conformance import check_scheduler; "
            "check_scheduler('default', graphs=3); "
            "print(sorted(m for m in sys.modules if m.startswith(('plygrad.runtime', 'plygrad.frontend', "
            "'plygrad.backends', 'plygrad.codegen'))))")
    assert _python(code) == "[]"


def test_without_numpy_the_suite_names_the_extra_to_install() -> None:
    code = ("import sys; sys.modules['numpy'] = None; from plygrad.scheduler.conformance import run_conformance\n"
            "try:\n    run_conformance('default', graphs=1)\nexcept ImportError as exc:\n    print(exc)")
    assert "pip install plygrad-scheduler[conformance]" in _python(code)


def test_unfused_disagreeing_with_the_numpy_reference_is_a_skip_not_a_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """The oracle is checked too: if `unfused` computed something else than the graph says, nothing is judged."""
    monkeypatch.setattr(conformance, "schedule_unfused", adds_instead_of_max)
    report = run_conformance("default", graphs=GRAPHS, seed=0)
    assert any("unfused disagrees with the NumPy reference: output" in s.problem for s in report.skips)


def test_a_run_where_unfused_refuses_every_graph_is_not_a_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """If the oracle cannot run (here: its schedules are refused), nothing was checked, and the suite says so."""

    def broken_oracle(data: bytes) -> bytes:
        return b"broken"

    monkeypatch.setattr(conformance, "schedule_unfused", broken_oracle)
    report = run_conformance("default", graphs=2, seed=0)
    assert report.skipped == 2 and not report.failures and not report.ok
    assert "nothing was checked: unfused had no answer for any graph" in report.summary()
