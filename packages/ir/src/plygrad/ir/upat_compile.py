"""Compiling a rule's `UPat` to straight-line Python, so the rewrite engine's inner loop does no interpretation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from plygrad.ir.uop import UOp, arg_key
from plygrad.ir.upat import _ANY, _SRC_ANY, _SRC_EACH, RuleFn, UPat

# ---- compiling patterns to Python ---------------------------------------------------------------------------------
# Interpreting a UPat costs a few function calls and list allocations per pattern node. A rule is tried on every
# node of its op, so each rule's pattern is compiled once into straight-line Python: nested `if`s over the node's
# fields, one block per way the pattern can match (each permutation of a commutative source list, each
# alternative of a UPat.any), ending in a call of the rule function with the bound names. Patterns the compiler
# does not handle (a pattern applied to every source that itself binds names or has sources) keep the interpreter.

_SIMPLE_ARG_TYPES: Final = (int, str, bool)


class _UnsupportedPatternError(Exception):
    pass


class _Codegen:
    def __init__(self) -> None:
        self.consts: dict[str, Any] = {}
        self.temps = 0

    def const(self, value: Any) -> str:
        name = f"K{len(self.consts)}"
        self.consts[name] = value
        return name

    def temp(self) -> str:
        self.temps += 1
        return f"n{self.temps}"

    def node_checks(self, pat: UPat, var: str) -> list[str]:
        """Conditions on the fields of the node in `var` (not its sources)."""
        conds: list[str] = []
        if pat.ops is not None:  # the root's op is rechecked: a Rule's match may be called without dispatch
            conds.append(f"{var}.op is {self.const(next(iter(pat.ops)))}" if len(pat.ops) == 1
                         else f"{var}.op in {self.const(pat.ops)}")
        if pat.dtypes is not None:
            conds.append(f"{var}.dtype is {self.const(next(iter(pat.dtypes)))}" if len(pat.dtypes) == 1
                         else f"{var}.dtype in {self.const(pat.dtypes)}")
        if pat.arg_key is not _ANY:
            if type(pat.arg) in _SIMPLE_ARG_TYPES:  # exact type and value: 1, 1.0 and True stay apart
                conds.append(f"type({var}.arg) is {self.const(type(pat.arg))} and {var}.arg == {self.const(pat.arg)}")
            else:
                conds.append(f"arg_key({var}.arg) == {self.const(pat.arg_key)}")
        return conds

    def each_check(self, pat: UPat, var: str) -> str:
        """The condition on `w` that every source of `var` must meet to match `pat` (no names, no sources)."""
        if pat.name is not None or pat.alternatives is not None or pat.src_kind != _SRC_ANY:
            raise _UnsupportedPatternError
        conds = self.node_checks(pat, "w")
        return " and ".join(conds) if conds else "True"

    def expand(self, pat: UPat, var: str) -> list[list[tuple[str, str]]]:
        """Every way `pat` can match the node in `var`, each as a list of steps: ("if", cond), ("let", "v = e"),
        ("each", "var cond") (every source meets cond), ("name", "name var")."""
        if pat.alternatives is not None:
            ways: list[list[tuple[str, str]]] = []
            for alt in pat.alternatives:
                ways.extend(self.expand(alt, var))
            if pat.name is not None:
                ways = [[*w, ("name", f"{pat.name} {var}")] for w in ways]
            return ways
        head: list[tuple[str, str]] = [("if", c) for c in self.node_checks(pat, var)]
        if pat.name is not None:
            head.append(("name", f"{pat.name} {var}"))
        if pat.src_kind == _SRC_ANY:
            return [head]
        if pat.src_kind == _SRC_EACH:
            return [[*head, ("each", f"{var} {self.each_check(pat.src, var)}")]]  # type: ignore[arg-type]
        length = f"len({var}.src) == {pat.src_len}" if pat.strict_len else f"len({var}.src) >= {pat.src_len}"
        head.append(("if", length))
        ways = []
        for option in pat.src:  # type: ignore[union-attr]
            partial: list[list[tuple[str, str]]] = [[]]
            for i, child in enumerate(option):
                child_var = self.temp()
                child_ways = self.expand(child, child_var)
                partial = [[*p, ("let", f"{child_var} = {var}.src[{i}]"), *c] for p in partial for c in child_ways]
            ways.extend([*head, *p] for p in partial)
        return ways


def compile_rule(pattern: UPat, fn: RuleFn, takes_ctx: bool) -> Callable[[UOp, Any], Any] | None:
    """Python source matching `pattern` and calling `fn`, compiled; None where the interpreter must be used."""
    gen = _Codegen()
    try:
        ways = gen.expand(pattern, "u")
    except (_UnsupportedPatternError, RecursionError):
        return None
    if len(ways) > 64:  # deeply nested commutative patterns: the interpreter is smaller
        return None
    lines = ["def match(u, ctx):"]
    for way in ways:
        depth = 1
        bound: dict[str, str] = {}
        for kind, text in way:
            pad = "    " * depth
            if kind == "if":
                lines.append(f"{pad}if {text}:")
                depth += 1
            elif kind == "let":
                lines.append(f"{pad}{text}")
            elif kind == "each":  # a loop, not all(...): no generator is created per match
                var, cond = text.split(" ", 1)
                lines += [f"{pad}for w in {var}.src:", f"{pad}    if not ({cond}):", f"{pad}        break",
                          f"{pad}else:"]
                depth += 1
            else:
                name, var = text.split(" ")
                if name in bound:
                    lines.append(f"{pad}if {var} is {bound[name]}:")
                    depth += 1
                else:
                    bound[name] = var
        pad = "    " * depth
        args = ", ".join(f"{n}={bound[n]}" for n in sorted(bound))  # an alternative may bind fewer names
        call_args = f"ctx=ctx, {args}" if takes_ctx and args else ("ctx=ctx" if takes_ctx else args)
        lines.append(f"{pad}r = fn({call_args})")
        lines.append(f"{pad}if r is not None and r is not u:")
        lines.append(f"{pad}    return r")
    lines.append("    return None")
    namespace: dict[str, Any] = {"fn": fn, "arg_key": arg_key, **gen.consts}
    try:
        code = compile("\n".join(lines), f"<rule {getattr(fn, '__name__', 'fn')}>", "exec")
    except (SyntaxError, RecursionError, MemoryError):  # nesting deeper than CPython compiles: interpret it
        return None
    exec(code, namespace)  # noqa: S102 - the source is generated from the pattern's fields, never from input
    matcher: Callable[[UOp, Any], Any] = namespace["match"]
    return matcher

