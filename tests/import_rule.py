"""The import rule of docs/design.md §1, checked from source with `ast`.

plygrad's layers may only meet through serialized IR, so a package imports nothing from another plygrad package
unless it declares that package as a dependency. A package is allowed to import: itself, the plygrad packages named
in its `[project] dependencies`, and `plygrad.ir` whenever plygrad-ir is among its (transitive) dependencies — the
design names the IR as the one thing every layer shares, so a backend that depends on plygrad-runtime may use the IR
types without repeating plygrad-ir in its pyproject.

Everything here is read from the tree itself, so a new package under `packages/` is covered the moment it exists:
- which import packages a distribution provides comes from its `src/plygrad/...` folders (plygrad-cpu owns
  `plygrad.backends.cpu` because that is where its code lives, not because of a naming convention);
- what it may import comes from its `pyproject.toml`, read with `tomllib`.

The checker walks every module of every `src/` tree: top-level imports, imports inside functions, under
`if TYPE_CHECKING:`, relative imports (resolved against the importing module), and literal-string dynamic imports
(`importlib.import_module("plygrad.x")`, `__import__("plygrad.x")`). Entry points are not imports: finding a
neighbour layer through an entry point is exactly how the design wants layers to meet.
"""

from __future__ import annotations

import ast
import itertools
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

NAMESPACE = "plygrad"
CORE_DISTRIBUTION = "plygrad-ir"
DYNAMIC_IMPORTERS = frozenset({"import_module", "__import__"})


@dataclass(frozen=True)
class Violation:
    """One broken rule, located so that a reader can jump to it."""

    path: Path
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


@dataclass(frozen=True)
class Distribution:
    """What the rule needs to know about one `packages/<folder>`: its name, what it provides, what it declares."""

    folder: Path
    name: str  # canonical distribution name, e.g. "plygrad-cpu"
    provides: tuple[str, ...]  # import packages it owns, e.g. ("plygrad.backends.cpu",)
    requires: tuple[str, ...]  # canonical names of the plygrad distributions in [project] dependencies
    optional_requires: tuple[str, ...]  # the same for every optional-dependencies extra

    @property
    def src(self) -> Path:
        return self.folder / "src"


def is_plygrad_distribution(name: str) -> bool:
    return canonicalize_name(name).startswith(f"{NAMESPACE}-")


def is_plygrad_module(module: str) -> bool:
    return module == NAMESPACE or module.startswith(f"{NAMESPACE}.")


def _plygrad_requirements(requirements: list[str], pyproject: Path) -> tuple[list[str], list[Violation]]:
    names: list[str] = []
    problems: list[Violation] = []
    for text in requirements:
        try:
            name = canonicalize_name(Requirement(text).name)
        except InvalidRequirement as exc:
            problems.append(Violation(pyproject, 0, f"cannot parse the requirement {text!r}: {exc}"))
            continue
        if is_plygrad_distribution(name):
            names.append(name)
    return names, problems


def provided_packages(src: Path) -> tuple[str, ...]:
    """The import packages a `src/` tree owns, found breadth-first under `src/plygrad/`.

    A folder without `__init__.py` and without modules is a namespace portion shared with other distributions
    (`plygrad/` itself, `plygrad/backends/`), so the search goes below it; the first folder that holds code is what
    the distribution owns. A loose `src/plygrad/foo.py` owns `plygrad.foo`.
    """
    root = src / NAMESPACE
    if not root.is_dir():
        return ()
    found: list[str] = []
    pending = [root]
    while pending:
        folder = pending.pop(0)
        prefix = ".".join(folder.relative_to(src).parts)
        holds_code = any(child.suffix == ".py" for child in folder.iterdir() if child.is_file())
        if folder != root and holds_code:
            found.append(prefix)
            continue
        if folder == root:
            found.extend(f"{prefix}.{child.stem}" for child in sorted(folder.glob("*.py")) if child.stem != "__init__")
        pending.extend(sorted(child for child in folder.iterdir() if child.is_dir() and child.name != "__pycache__"))
    return tuple(found)


def load_workspace(packages_dir: Path) -> tuple[dict[str, Distribution], list[Violation]]:
    """Every `packages/*/pyproject.toml`, keyed by canonical distribution name, plus problems reading them."""
    dists: dict[str, Distribution] = {}
    problems: list[Violation] = []
    for pyproject in sorted(packages_dir.glob("*/pyproject.toml")):
        with pyproject.open("rb") as f:
            project = tomllib.load(f).get("project", {})
        if "name" not in project:
            problems.append(Violation(pyproject, 0, "has no [project] name; every package must be a distribution"))
            continue
        requires, bad = _plygrad_requirements(project.get("dependencies", []), pyproject)
        problems.extend(bad)
        optional: list[str] = []
        for extra in project.get("optional-dependencies", {}).values():
            names, bad = _plygrad_requirements(extra, pyproject)
            optional.extend(names)
            problems.extend(bad)
        name = canonicalize_name(project["name"])
        if name in dists:
            problems.append(Violation(pyproject, 0, f"distribution {name} is already defined in {dists[name].folder}"))
            continue
        folder = pyproject.parent
        dists[name] = Distribution(folder, name, provided_packages(folder / "src"), tuple(requires), tuple(optional))
    return dists, problems


def namespace_init_files(packages_dir: Path) -> list[Path]:
    """`src/plygrad/__init__.py` files: any one of them would make `plygrad` a regular package owned by one
    distribution and hide every other distribution's `plygrad.*` (PEP 420)."""
    return sorted(packages_dir.glob(f"*/src/{NAMESPACE}/__init__.py"))


def dependency_problems(dists: Mapping[str, Distribution]) -> list[Violation]:
    """Declared plygrad dependencies that have no folder, packages that provide nothing or overlap, and cycles."""
    problems: list[Violation] = []
    for dist in dists.values():
        pyproject = dist.folder / "pyproject.toml"
        for dep in sorted(set(dist.requires) | set(dist.optional_requires)):
            if dep not in dists:
                problems.append(Violation(pyproject, 0, f"{dist.name} depends on {dep}, but no packages/*/pyproject"
                                          f".toml is named {dep}: add that package or remove the dependency"))
        if not dist.provides:
            problems.append(Violation(pyproject, 0, f"{dist.name} has no code under src/{NAMESPACE}/: a plygrad "
                                      f"package lives in src/{NAMESPACE}/<name>/ (src layout, PEP 420 namespace)"))
    owners = sorted((pkg, dist.name) for dist in dists.values() for pkg in dist.provides)
    for (pkg_a, dist_a), (pkg_b, dist_b) in itertools.combinations(owners, 2):
        if dist_a != dist_b and (pkg_b == pkg_a or pkg_b.startswith(f"{pkg_a}.")):
            problems.append(Violation(dists[dist_b].folder / "src", 0, f"{dist_b} provides {pkg_b}, which overlaps "
                                      f"{pkg_a} from {dist_a}; shared folders must stay namespace portions (no code)"))
    problems.extend(_cycles(dists))
    return problems


def _cycles(dists: Mapping[str, Distribution]) -> list[Violation]:
    """Dependency cycles, found with an iterative depth-first search (a cycle would make layering meaningless)."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = finished
    problems: list[Violation] = []
    for start in sorted(dists):
        if start in state:
            continue
        stack: list[tuple[str, Iterator[str]]] = [(start, iter(dists[start].requires))]
        state[start] = 1
        while stack:
            name, deps = stack[-1]
            dep = next((d for d in deps if d in dists), None)
            if dep is None:
                state[name] = 2
                stack.pop()
            elif state.get(dep) == 1:
                path = [n for n, _ in stack]
                cycle = " -> ".join([*path[path.index(dep):], dep])
                problems.append(Violation(dists[name].folder / "pyproject.toml", 0, f"dependency cycle: {cycle}"))
            elif dep not in state:
                state[dep] = 1
                stack.append((dep, iter(dists[dep].requires)))
    return problems


def dependency_closure(name: str, dists: Mapping[str, Distribution]) -> set[str]:
    """Every plygrad distribution that installing `name` installs (its declared dependencies, transitively)."""
    seen: set[str] = set()
    pending = list(dists[name].requires)
    while pending:
        dep = pending.pop()
        if dep in seen or dep not in dists:
            continue
        seen.add(dep)
        pending.extend(dists[dep].requires)
    return seen


def allowed_distributions(name: str, dists: Mapping[str, Distribution]) -> set[str]:
    allowed = {name, *dists[name].requires}
    if CORE_DISTRIBUTION in dependency_closure(name, dists):
        allowed.add(CORE_DISTRIBUTION)
    return allowed


def module_name(path: Path, src: Path) -> tuple[str, bool]:
    """The dotted name of a source file and whether it is a package (`__init__.py`)."""
    parts = path.relative_to(src).with_suffix("").parts
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def imported_modules(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) for every import in a parsed module, wherever it sits.

    For `from X import a` the candidate is `X.a`: it names the submodule when `a` is one (`from plygrad import
    codegen`), and otherwise lies inside `X`, which the owner lookup treats the same. A relative import that climbs
    above the top-level package is reported with the name `..` so the caller can flag it.
    """
    package = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module.split(".") if node.module else []
            if node.level:
                keep = len(package) - (node.level - 1)
                if keep <= 0:
                    yield node.lineno, ".." * node.level
                    continue
                base = package[:keep] + base
            for alias in node.names:
                yield node.lineno, ".".join(base if alias.name == "*" else [*base, alias.name])
        elif isinstance(node, ast.Call) and _called_name(node.func) in DYNAMIC_IMPORTERS and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                yield node.lineno, first.value


def _called_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def owner_of(module: str, dists: Mapping[str, Distribution]) -> str | None:
    """The distribution whose provided package is the longest prefix of `module`, if any."""
    best: tuple[int, str] | None = None
    for dist in dists.values():
        for pkg in dist.provides:
            if (module == pkg or module.startswith(f"{pkg}.")) and (best is None or len(pkg) > best[0]):
                best = (len(pkg), dist.name)
    return None if best is None else best[1]


def _is_namespace_portion(module: str, dists: Mapping[str, Distribution]) -> bool:
    return any(pkg.startswith(f"{module}.") for dist in dists.values() for pkg in dist.provides)


def import_violations(dists: Mapping[str, Distribution]) -> list[Violation]:
    """Every import in every package's src/ of a plygrad package the importer may not use."""
    problems: list[Violation] = []
    for dist in dists.values():
        allowed = allowed_distributions(dist.name, dists)
        for path in sorted(dist.src.rglob("*.py")):
            module, is_package = module_name(path, dist.src)
            try:
                tree = ast.parse(path.read_bytes(), filename=str(path))
            except SyntaxError as exc:
                problems.append(Violation(path, exc.lineno or 0, f"cannot be parsed, so its imports are unchecked: "
                                          f"{exc.msg}"))
                continue
            for line, imported in imported_modules(tree, module, is_package):
                if imported.startswith(".."):
                    problems.append(Violation(path, line, f"relative import climbs above the top-level package "
                                              f"from {module}"))
                    continue
                if not is_plygrad_module(imported):
                    continue
                owner = owner_of(imported, dists)
                if owner is None:
                    if not _is_namespace_portion(imported, dists):
                        problems.append(Violation(path, line, f"{dist.name} imports {imported}, which no package "
                                                  "under packages/ provides"))
                elif owner not in allowed:
                    problems.append(Violation(path, line, f"{dist.name} imports {imported} from {owner}, which it "
                                              f"does not declare; allowed: {', '.join(sorted(allowed))}. Declare the "
                                              "dependency if docs/design.md §1 allows it, else reach that layer "
                                              "through its entry point and IR bytes"))
    return problems


def check_workspace(packages_dir: Path) -> list[Violation]:
    """Everything above in one call: the list is empty exactly when the tree follows the rule."""
    dists, problems = load_workspace(packages_dir)
    problems.extend(Violation(path, 0, "must not exist: plygrad is a PEP 420 namespace owned by no distribution")
                    for path in namespace_init_files(packages_dir))
    problems.extend(dependency_problems(dists))
    problems.extend(import_violations(dists))
    return problems
