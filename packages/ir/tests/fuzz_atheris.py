"""Coverage-guided fuzzing of the IR readers with atheris (not collected by pytest: run it by hand).

    python packages/ir/tests/fuzz_atheris.py -atheris_runs=200000            # the binary reader
    FUZZ_TARGET=text python packages/ir/tests/fuzz_atheris.py -max_total_time=300
    FUZZ_TARGET=target python packages/ir/tests/fuzz_atheris.py golden/format-1.0/   # seed from golden files

The contract under test (docs/design.md §3): any input decodes to a graph that passes verification, or raises
IRDecodeError / IRVersionError. Anything else escaping, and a decode error from the readers' "internal" safety
nets (which means a check is missing), is a crash that atheris reports with the input that caused it.
"""

from __future__ import annotations

import os
import sys

import atheris

with atheris.instrument_imports():
    from plygrad.ir.errors import IRDecodeError, IRVersionError
    from plygrad.ir.serialize import deserialize, deserialize_target, serialize
    from plygrad.ir.text import from_text, to_text


def _check(error: IRDecodeError, size: int) -> None:
    if "internal" in str(error):
        raise AssertionError(f"a reader's safety net caught a missing check: {error}")
    if not 0 <= error.offset <= size:
        raise AssertionError(f"offset {error.offset} lies outside the input of {size}")


def fuzz_binary(data: bytes) -> None:
    try:
        graph = deserialize(data)
    except IRVersionError:
        return
    except IRDecodeError as e:
        _check(e, len(data))
        return
    assert deserialize(serialize(graph)) is graph


def fuzz_target(data: bytes) -> None:
    try:
        deserialize_target(data)
    except IRVersionError:
        return
    except IRDecodeError as e:
        _check(e, len(data))


def fuzz_text(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    try:
        graph = from_text(text)
    except IRVersionError:
        return
    except IRDecodeError as e:
        _check(e, len(text))
        return
    assert from_text(to_text(graph)) is graph


TARGETS = {"binary": fuzz_binary, "text": fuzz_text, "target": fuzz_target}

if __name__ == "__main__":
    atheris.Setup(sys.argv, TARGETS[os.environ.get("FUZZ_TARGET", "binary")])
    atheris.Fuzz()
