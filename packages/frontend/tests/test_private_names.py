"""No frontend module uses another frontend module's private name, checked from source with `ast`.

A name with a leading underscore is its module's own business; what op modules share lives under public names
(docs/frontend.md, "What an op module may use"). The check walks every module under `src/plygrad/frontend/`,
imports inside functions and under `if TYPE_CHECKING:` included, and reports `file:line` for each
`from plygrad.frontend.X import _name` (or its relative form) and each `X._name` where `X` is a frontend module
bound by an import. Dunder names (`__name__`, `__all__`) are not private. Private attributes of tensors
(`x._uop`) are not module names and are not checked here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "plygrad.frontend"


@dataclass(frozen=True)
class Violation:
    path: Path
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def frontend_modules(src: Path) -> dict[str, Path]:
    """Every module of the frontend by dotted name (a package by its `__init__.py`)."""
    return {module_name(path, src): path for path in sorted((src / "plygrad" / "frontend").rglob("*.py"))}


def _resolve_from(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _dotted(node: ast.expr) -> list[str] | None:
    """`a.b.c` as ["a", "b", "c"], or None when the chain does not start at a plain name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


def private_name_uses(path: Path, module: str, modules: set[str]) -> Iterator[Violation]:
    """Each use in `path` (the module `module`) of a private name of another module in `modules`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    bound: dict[str, str] = {}  # a local name -> the dotted module (or package prefix) it stands for
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname is not None:
                    bound[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    bound[head] = head
        elif isinstance(node, ast.ImportFrom):
            source = _resolve_from(node, module, is_package)
            for alias in node.names:
                full = f"{source}.{alias.name}"
                if full in modules:
                    bound[alias.asname or alias.name] = full
                elif source in modules and source != module and is_private(alias.name):
                    yield Violation(path, node.lineno, f"imports {source}'s private name {alias.name}")
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not is_private(node.attr):
            continue
        chain = _dotted(node.value)
        if chain is None or chain[0] not in bound:
            continue
        owner = ".".join([bound[chain[0]], *chain[1:]])
        if owner in modules and owner != module:
            yield Violation(path, node.lineno, f"uses {owner}'s private name {node.attr}")


def check_tree(src: Path) -> list[Violation]:
    modules = frontend_modules(src)
    names = set(modules)
    return [v for module, path in modules.items() for v in private_name_uses(path, module, names)]


# --- the real tree ---------------------------------------------------------------------------------------------

def test_the_frontend_modules_are_found() -> None:
    # Guards the check below against passing on an empty or misread tree.
    modules = frontend_modules(SRC)
    assert {"plygrad.frontend", "plygrad.frontend.tensor", "plygrad.frontend.nn.optim"} <= set(modules)


def test_no_frontend_module_uses_another_modules_private_name() -> None:
    problems = check_tree(SRC)
    assert not problems, f"{len(problems)} uses of another module's private name:\n" + "\n".join(map(str, problems))


# --- small fake trees that break the rule on purpose -----------------------------------------------------------

def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "plygrad" / "frontend" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (tmp_path / "plygrad" / "frontend" / "__init__.py").touch()
    return tmp_path


@pytest.mark.parametrize(
    "user",
    [
        "from plygrad.frontend.a import _helper\n",
        "from .a import _helper\n",
        "from plygrad.frontend import a\nx = a._helper\n",
        "from . import a as alias\nx = alias._helper\n",
        "import plygrad.frontend.a\nx = plygrad.frontend.a._helper\n",
        "import plygrad.frontend.a as m\nx = m._helper\n",
        "def f():\n    from plygrad.frontend import a\n    return a._helper\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from plygrad.frontend.a import _T\n",
        "from ..a import _helper\n",
    ],
)
def test_a_private_name_of_another_module_is_found(tmp_path: Path, user: str) -> None:
    name = "sub/b.py" if user.startswith("from ..") else "b.py"
    if name.startswith("sub/"):
        (tmp_path / "plygrad" / "frontend" / "sub").mkdir(parents=True)
        (tmp_path / "plygrad" / "frontend" / "sub" / "__init__.py").touch()
    src = _tree(tmp_path, {"a.py": "_helper = 1\n_T = int\n", name: user})
    problems = check_tree(src)
    assert len(problems) == 1, problems
    assert problems[0].path.name == "b.py"


@pytest.mark.parametrize(
    "user",
    [
        "from plygrad.frontend.a import helper\n",
        "from plygrad.frontend import a\nx = a.helper, a.__name__\n",
        "_own = 1\nx = _own\n",
        "import os\nx = os._exit\n",  # not a frontend module
        "from plygrad.frontend import a\ndef f(t):\n    return t._uop\n",  # an attribute of a value, not a module
    ],
)
def test_public_and_own_names_pass(tmp_path: Path, user: str) -> None:
    src = _tree(tmp_path, {"a.py": "helper = 1\n", "b.py": user})
    assert check_tree(src) == []


def test_a_module_may_use_its_own_private_names_through_an_import(tmp_path: Path) -> None:
    src = _tree(tmp_path, {"a.py": "from plygrad.frontend import a\n_x = 1\ny = a._x\n"})
    assert check_tree(src) == []
