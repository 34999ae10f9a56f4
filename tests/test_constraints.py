"""constraints.txt pins every third-party requirement the packages declare (docs/development.md, "Pinned
dependencies"): noxfile.py installs under it, so an upstream release cannot change what CI tests against. The nox
sessions also fail on any installed distribution it does not pin; this checks the declared ones without a session."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "constraints.txt"


def pins() -> dict[str, Version]:
    found: dict[str, Version] = {}
    for raw in CONSTRAINTS.read_text(encoding="utf-8").splitlines():
        line = raw.split("#")[0].strip()
        if not line:
            continue
        req = Requirement(line)
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"constraints.txt: {line!r} is not name==version"
        found[canonicalize_name(req.name)] = Version(specs[0].version)
    return found


def declared() -> list[tuple[str, Requirement]]:
    """Every third-party requirement of every packages/*/pyproject.toml that a nox session installs: the
    dependencies and the `test` and `typecheck` extras (not optional hardware extras such as runtime-nv's nvrtc)."""
    reqs = []
    for pyproject in sorted((ROOT / "packages").glob("*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        extras = project.get("optional-dependencies", {})
        for text in (*project.get("dependencies", []), *extras.get("test", []), *extras.get("typecheck", [])):
            req = Requirement(text)
            if not canonicalize_name(req.name).startswith("plygrad-"):
                reqs.append((pyproject.parent.name, req))
    return reqs


@pytest.mark.parametrize(("package", "req"), declared(), ids=str)
def test_every_declared_requirement_is_pinned_to_a_version_it_accepts(package: str, req: Requirement) -> None:
    pinned = pins()
    name = canonicalize_name(req.name)
    assert name in pinned, f"packages/{package} requires {req}, which constraints.txt does not pin"
    assert req.specifier.contains(pinned[name], prereleases=True), f"{req} refuses the pin {name}=={pinned[name]}"


def test_torch_stays_at_the_version_the_machines_hold() -> None:
    assert pins()["torch"] == Version("2.13.0")
