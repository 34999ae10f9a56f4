"""Module docstrings stay short (issue #33): what the module does and where the docs explain it, at most 15 lines.

The why, the history and the measurements belong in docs/*.md, bench/ and commit messages, where they can be kept
true. `STILL_LONG` names the modules someone is still shortening; remove each entry as its module gets short.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 15

# module (relative to the repository root) -> who is shortening it; each entry is a debt, not an exemption
STILL_LONG: dict[str, str] = {}


def _docstring_lines(path: Path) -> int:
    """How many source lines the module docstring spans, 0 when there is none."""
    body = ast.parse(path.read_text(encoding="utf-8")).body
    if not body or not isinstance(body[0], ast.Expr) or not isinstance(body[0].value, ast.Constant):
        return 0
    if not isinstance(body[0].value.value, str):
        return 0
    end = body[0].end_lineno if body[0].end_lineno is not None else body[0].lineno
    return end - body[0].lineno + 1


def _modules() -> list[Path]:
    return sorted(ROOT.glob("packages/*/src/**/*.py"))


@pytest.mark.skipif(not (ROOT / "packages").is_dir(), reason="needs the repository's packages/ tree")
def test_module_docstrings_are_at_most_15_lines() -> None:
    too_long = {}
    for path in _modules():
        name = path.relative_to(ROOT).as_posix()
        lines = _docstring_lines(path)
        if lines > MAX_LINES and name not in STILL_LONG:
            too_long[name] = lines
    assert not too_long, (
        f"module docstrings over {MAX_LINES} lines (say what the module does and point at the docs section; "
        f"move the rest to docs/): " + ", ".join(f"{name} ({n} lines)" for name, n in too_long.items())
    )

