"""Test helpers for plygrad-distributed: a clean world of one in-process, and jobs of several ranks launched with
`python -m plygrad.distributed.run` on scripts written to a temp folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from plygrad.distributed import world
from plygrad.runtime import collectives

# variables that would make a test process think an MPI launcher started it
LAUNCH_VARIABLES = (*collectives.MPI_LAUNCHER_VARIABLES, "PLYGRAD_COLLECTIVES", "PLYGRAD_DIST_TIMEOUT",
                    *(name for names in world.LAUNCHER_VARIABLES for name in names))


@pytest.fixture(autouse=True)
def world_of_one(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts outside any job: no launcher variables, no provider opened, no membership."""
    for name in LAUNCH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    collectives.reset()
    world.reset()
    yield
    collectives.reset()
    world.reset()


@dataclass(frozen=True)
class Job:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    script: Path

    def outputs(self) -> list[Any]:
        """What each rank wrote with `json.dump` to `f"{__file__}.{rank}.json"`, rank 0's first: long results go
        through files, since the ranks' stdout pipes interleave a line longer than a pipe buffer."""
        found = sorted(self.script.parent.glob(f"{self.script.name}.*.json"), key=lambda p: int(p.name.split(".")[-2]))
        return [json.loads(path.read_text()) for path in found]

    def lines(self, prefix: str) -> list[str]:
        """The stdout lines that start with `prefix`, without it."""
        return [line[len(prefix):] for line in self.stdout.splitlines() if line.startswith(prefix)]


def _environment(extra: dict[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARIABLES}
    return {**env, **(extra or {})}


def _launch(tmp_path: Path, source: str, n: int, *, env: dict[str, str] | None = None, limit: float = 60.0) -> Job:
    """Run `source` (dedented) as a script on `n` ranks through the launcher; `limit` seconds at most."""
    script = tmp_path / f"job_{n}_{time.monotonic_ns()}.py"
    script.write_text(textwrap.dedent(source))
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "plygrad.distributed.run", "-n", str(n), str(script)],
                          capture_output=True, text=True, timeout=limit, env=_environment(env), check=False)
    return Job(done.returncode, done.stdout, done.stderr, time.monotonic() - started, script)


def _run_alone(tmp_path: Path, source: str, *, env: dict[str, str] | None = None) -> Job:
    """Run `source` as a plain `python script.py`: a world of one."""
    script = tmp_path / f"alone_{time.monotonic_ns()}.py"
    script.write_text(textwrap.dedent(source))
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                          env=_environment(env), check=False)
    return Job(done.returncode, done.stdout, done.stderr, time.monotonic() - started, script)


@pytest.fixture(scope="session")
def launch() -> Callable[..., Job]:
    """`launch(tmp_path, source, n, env=..., limit=...)`: a job of `n` ranks through the launcher."""
    return _launch


@pytest.fixture(scope="session")
def run_alone() -> Callable[..., Job]:
    """`run_alone(tmp_path, source, env=...)`: the script as a plain process, a world of one."""
    return _run_alone


@pytest.fixture(scope="session")
def job_environment() -> Callable[..., dict[str, str]]:
    """`job_environment(extra)`: this process's environment without launcher variables, plus `extra`."""
    return _environment
