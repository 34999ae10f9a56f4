"""docs/design.md §1's import rule, on the real tree and on small fake trees that break it on purpose."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from import_rule import (
    Violation,
    check_workspace,
    dependency_problems,
    import_violations,
    load_workspace,
    namespace_init_files,
    provided_packages,
)

PACKAGES = Path(__file__).resolve().parent.parent / "packages"


def _report(problems: list[Violation]) -> str:
    return "\n".join(str(p) for p in problems)


# --- the real tree ---------------------------------------------------------------------------------------------

def test_the_workspace_is_found_and_provides_plygrad_ir() -> None:
    # Guards the checks below against passing on an empty or misread tree.
    dists, problems = load_workspace(PACKAGES)
    assert not problems, _report(problems)
    assert dists["plygrad-ir"].provides == ("plygrad.ir",)
    assert dists["plygrad-ir"].requires == ()


def test_no_package_owns_the_plygrad_namespace() -> None:
    assert namespace_init_files(PACKAGES) == []


def test_declared_plygrad_dependencies_exist_and_form_layers() -> None:
    dists, _ = load_workspace(PACKAGES)
    problems = dependency_problems(dists)
    assert not problems, _report(problems)


def test_every_package_imports_only_what_it_declares() -> None:
    dists, _ = load_workspace(PACKAGES)
    problems = import_violations(dists)
    assert not problems, _report(problems)


# --- fake trees ------------------------------------------------------------------------------------------------

LAYOUT = {  # folder: (distribution, import path under src/, plygrad dependencies)
    "ir": ("plygrad-ir", "plygrad/ir", []),
    "scheduler": ("plygrad-scheduler", "plygrad/scheduler", ["plygrad-ir>=0.1"]),
    "codegen": ("plygrad-codegen", "plygrad/codegen", ["plygrad-ir"]),
    "runtime": ("plygrad-runtime", "plygrad/runtime", ["plygrad-ir"]),
    "runtime-cpu": ("plygrad-cpu", "plygrad/backends/cpu", ["plygrad-runtime", "cffi>=1.16"]),
    "runtime-nv": ("plygrad-nv", "plygrad/backends/nv", ["plygrad-runtime"]),
}


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def _pyproject(name: str, deps: list[str]) -> str:
    quoted = ", ".join(f'"{d}"' for d in deps)
    return f'[project]\nname = "{name}"\nversion = "0.1.0"\ndependencies = [{quoted}]\n'


def make_workspace(root: Path) -> Path:
    """A miniature packages/ tree shaped like docs/design.md §1, with one clean module per package."""
    for folder, (name, import_path, deps) in LAYOUT.items():
        _write(root / folder / "pyproject.toml", _pyproject(name, deps))
        _write(root / folder / "src" / import_path / "__init__.py", '"""A package."""\n')
    _write(root / "scheduler/src/plygrad/scheduler/fusion.py", """\
        from typing import TYPE_CHECKING
        import numpy
        from plygrad.ir.uop import UOp
        from plygrad.ir import dtype
        from . import fusion_rules
        from .. import ir
        import plygrad
        if TYPE_CHECKING:
            import plygrad.ir.ops
        """)
    _write(root / "runtime-cpu/src/plygrad/backends/cpu/compiler.py", """\
        import plygrad.runtime
        from plygrad.ir.dtype import dtypes  # plygrad-ir arrives through plygrad-runtime: allowed by docs/design.md
        from ..cpu import compiler
        """)
    return root


def test_a_clean_fake_workspace_passes(tmp_path: Path) -> None:
    assert check_workspace(make_workspace(tmp_path)) == []


def test_distributions_map_to_the_folders_they_ship(tmp_path: Path) -> None:
    dists, _ = load_workspace(make_workspace(tmp_path))
    assert dists["plygrad-cpu"].provides == ("plygrad.backends.cpu",)
    assert dists["plygrad-scheduler"].requires == ("plygrad-ir",)
    assert provided_packages(tmp_path / "nowhere") == ()


@pytest.mark.parametrize(("folder", "line", "forbidden"), [
    ("scheduler", "import plygrad.codegen", "plygrad.codegen"),
    ("scheduler", "from plygrad.runtime.buffer import Buffer", "plygrad.runtime.buffer.Buffer"),
    ("scheduler", "from plygrad import codegen", "plygrad.codegen"),
    ("scheduler", "from .. import runtime", "plygrad.runtime"),
    ("scheduler", "from ..codegen import lower", "plygrad.codegen.lower"),
    ("scheduler", "def f():\n    import plygrad.codegen.lower", "plygrad.codegen.lower"),
    ("scheduler", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from plygrad.runtime import x",
     "plygrad.runtime.x"),
    ("scheduler", "import importlib\nimportlib.import_module('plygrad.codegen')", "plygrad.codegen"),
    ("scheduler", "__import__('plygrad.runtime')", "plygrad.runtime"),
    ("runtime", "import plygrad.backends.cpu", "plygrad.backends.cpu"),
    ("runtime-cpu", "from plygrad.backends import nv", "plygrad.backends.nv"),
    ("ir", "import plygrad.scheduler", "plygrad.scheduler"),
])
def test_a_forbidden_import_is_reported(tmp_path: Path, folder: str, line: str, forbidden: str) -> None:
    root = make_workspace(tmp_path)
    import_path = LAYOUT[folder][1]
    bad = root / folder / "src" / import_path / "bad.py"
    _write(bad, line + "\n")
    problems = check_workspace(root)
    assert len(problems) == 1, _report(problems)
    assert problems[0].path == bad
    assert f"imports {forbidden} from" in problems[0].message


def test_importing_an_unknown_plygrad_package_is_reported(tmp_path: Path) -> None:
    root = make_workspace(tmp_path)
    _write(root / "codegen/src/plygrad/codegen/typo.py", "import plygrad.codegne\n")
    [problem] = check_workspace(root)
    assert "plygrad.codegne, which no package under packages/ provides" in problem.message
    assert problem.line == 1


def test_a_relative_import_above_the_top_is_reported(tmp_path: Path) -> None:
    root = make_workspace(tmp_path)
    _write(root / "ir/src/plygrad/ir/deep.py", "from .... import x\n")
    [problem] = check_workspace(root)
    assert "climbs above the top-level package" in problem.message


def test_a_namespace_init_is_reported(tmp_path: Path) -> None:
    root = make_workspace(tmp_path)
    _write(root / "ir/src/plygrad/__init__.py", "")
    assert namespace_init_files(root) == [root / "ir/src/plygrad/__init__.py"]
    assert any("PEP 420" in p.message for p in check_workspace(root))


def test_a_dependency_without_a_folder_is_reported(tmp_path: Path) -> None:
    root = make_workspace(tmp_path)
    _write(root / "codegen/pyproject.toml", _pyproject("plygrad-codegen", ["plygrad-ir", "plygrad-renderers"]))
    [problem] = check_workspace(root)
    assert "depends on plygrad-renderers, but no packages/*/pyproject.toml is named plygrad-renderers" in str(problem)


def test_a_dependency_cycle_is_reported(tmp_path: Path) -> None:
    root = make_workspace(tmp_path)
    _write(root / "ir/pyproject.toml", _pyproject("plygrad-ir", ["plygrad-cpu"]))
    problems = check_workspace(root)
    assert [p.message for p in problems] == [
        "dependency cycle: plygrad-ir -> plygrad-cpu -> plygrad-runtime -> plygrad-ir"]


def test_overlapping_packages_are_reported(tmp_path: Path) -> None:
    # An __init__.py in the shared plygrad/backends/ folder would make plygrad-nv own every backend.
    root = make_workspace(tmp_path)
    _write(root / "runtime-nv/src/plygrad/backends/__init__.py", "")
    problems = check_workspace(root)
    assert any("overlaps" in p.message for p in problems), _report(problems)


def test_syntax_errors_are_reported_not_skipped(tmp_path: Path) -> None:
    root = make_workspace(tmp_path)
    _write(root / "ir/src/plygrad/ir/broken.py", "import (\n")
    [problem] = check_workspace(root)
    assert "cannot be parsed" in problem.message


def test_an_undeclared_package_is_reported_inside_a_function_too(tmp_path: Path) -> None:
    root = make_workspace(tmp_path)
    _write(root / "scheduler/src/plygrad/scheduler/suite.py", "def run():\n    import plygrad.runtime\n")
    [problem] = check_workspace(root)
    assert "imports plygrad.runtime from plygrad-runtime, which it does not declare" in problem.message


def test_an_optional_extra_does_not_allow_importing_a_plygrad_package(tmp_path: Path) -> None:
    """docs/design.md §1 forbids the import, not just the dependency: naming the runtime in an extra and importing it
    lazily still makes the scheduler import the runtime."""
    root = make_workspace(tmp_path)
    _write(root / "scheduler" / "pyproject.toml", _pyproject("plygrad-scheduler", ["plygrad-ir>=0.1"])
           + '\n[project.optional-dependencies]\nconformance = ["plygrad-runtime"]\n')
    _write(root / "scheduler/src/plygrad/scheduler/suite.py", "def run():\n    import plygrad.runtime\n")
    [problem] = check_workspace(root)
    assert "imports plygrad.runtime from plygrad-runtime, which it does not declare" in problem.message
