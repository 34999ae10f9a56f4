"""`plygrad.frontend.nn.state`: tinygrad's `nn.state`, state dicts here and file formats re-exported from their
own modules: `safetensors.py` (safe_save, safe_load, safe_load_metadata), `torch_load.py` (PyTorch checkpoints
without torch) and `archives.py` (tar and zip archives, `TensorIO`).

A model is a plain object tree, so its state dict is found by walking attributes, lists, tuples and dicts: the path
to each Tensor is its key (`layers.0.weight`), which is PyTorch's key for the same layer. Loading writes into the
model's own tensors in place (`assign`), so an optimizer that already holds them keeps working.

Files are read without copying: the readers map the file into memory and give each Tensor a Buffer whose bytes are
staged from the mapping, so nothing is read from disk until a tensor is realized, and a tensor that is never used (or
is replaced by `load_state_dict` before it is realized) costs nothing. Files are untrusted input: every malformed one
raises a ValueError naming the file and the entry, and `torch_load` unpickles with an allow-list of PyTorch's
tensor-rebuilding functions (no arbitrary code runs, and torch is never imported).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, cast

from plygrad.frontend.errors import StateDictError
from plygrad.frontend.nn.archives import TensorIO, tar_extract, zip_extract
from plygrad.frontend.nn.safetensors import safe_load, safe_load_metadata, safe_save
from plygrad.frontend.nn.torch_load import CheckpointError, torch_load
from plygrad.frontend.tensor import Tensor, no_grad

__all__ = [
    "CheckpointError",
    "StateDictError",
    "TensorIO",
    "get_parameters",
    "get_state_dict",
    "load_state_dict",
    "safe_load",
    "safe_load_metadata",
    "safe_save",
    "tar_extract",
    "torch_load",
    "zip_extract",
]


# ---- state dicts ----------------------------------------------------------------------------------------------------
def get_state_dict(obj: object, prefix: str = "", tensor_type: type = Tensor) -> dict[str, Tensor]:
    """Every Tensor reachable from `obj` through attributes, lists, tuples and dicts, keyed by its dotted path.

    `get_state_dict(model)` of `model.layers = [nn.Linear(2, 3)]` is `{"layers.0.weight": ..., "layers.0.bias": ...}`,
    PyTorch's names for the same model. A tensor reachable by two paths (tied weights) appears under both keys, like
    PyTorch; an object met again on the way down (a back-reference to a parent) is not walked twice.
    """
    found: dict[str, Tensor] = {}
    _walk(obj, prefix, tensor_type, found, set())
    return found


def _walk(obj: object, prefix: str, tensor_type: type, found: dict[str, Tensor], seen: set[int]) -> None:
    if isinstance(obj, tensor_type):
        found[prefix.strip(".")] = cast(Tensor, obj)
        return
    if id(obj) in seen:
        return
    items: Any
    if hasattr(obj, "_asdict"):  # a namedtuple: its field names, not its positions
        items = obj._asdict().items()
    elif isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    elif isinstance(getattr(obj, "__dict__", None), dict):
        items = vars(obj).items()
    else:
        return
    seen.add(id(obj))
    for key, value in list(items):
        _walk(value, f"{prefix}{key}.", tensor_type, found, seen)


def get_parameters(obj: object) -> list[Tensor]:
    """The Tensors of `get_state_dict(obj)`, each once (tied weights are one parameter), in state-dict order."""
    return list({id(t): t for t in get_state_dict(obj).values()}.values())


def load_state_dict(model: object, state_dict: Mapping[str, Tensor], strict: bool = True,  # noqa: PLR0917 (tinygrad's)
                    verbose: bool = False, consume: bool = False, realize: bool = True) -> list[Tensor]:
    """Write `state_dict`'s values into `model`'s tensors in place; return the model tensors that were loaded.

    The model's tensor objects stay the same (an optimizer holding them keeps working): each is `assign`ed its value,
    cast to the model tensor's dtype and moved to its device, and all are realized in one schedule (`realize=False`
    leaves the writes pending until the model is next realized). As PyTorch's, one StateDictError (a RuntimeError,
    and a ValueError as plygrad's shape mismatch was) lists every problem before anything is written: with `strict`,
    the model's keys missing from `state_dict` and the keys the model does not have (`strict=False` skips them), and
    always each key whose shapes differ, with both shapes (() and (1,) are interchangeable, as in tinygrad).
    `consume` deletes each loaded key from `state_dict` (a dict) to free it early.
    """
    start = time.perf_counter()
    model_state = get_state_dict(model)
    missing = [k for k in model_state if k not in state_dict]
    unexpected = [k for k in state_dict if k not in model_state]
    mismatched = [f"shape mismatch for {k!r}: the model has shape {t.shape} but the state dict has shape "
                  f"{state_dict[k].shape}." for k, t in model_state.items()
                  if isinstance(state_dict.get(k), Tensor) and state_dict[k].shape != t.shape
                  and {state_dict[k].shape, t.shape} != {(), (1,)}]
    if mismatched or (strict and (missing or unexpected)):
        lines = [f"load_state_dict: the state dict does not fit the {type(model).__name__} model."]
        if strict and missing:
            lines.append(f"Missing key(s) ({len(missing)}): {', '.join(missing)}.")
        if strict and unexpected:
            lines.append(f"Unexpected key(s) ({len(unexpected)}): {', '.join(unexpected)}.")
        lines.extend(line[0].upper() + line[1:] for line in mismatched)
        if strict and (missing or unexpected):
            lines.append("Pass strict=False to load only the keys both have.")
        raise StateDictError(" ".join(lines))
    loaded: list[Tensor] = []
    with no_grad():
        for key, target in model_state.items():
            if key not in state_dict:
                continue
            value = state_dict[key]
            if not isinstance(value, Tensor):
                raise TypeError(f"load_state_dict: the value of {key!r} is a {type(value).__name__}, not a Tensor")
            if value.shape != target.shape:  # () and (1,): every other mismatch was raised above
                value = value.reshape(target.shape)
            target.assign(_own_copy(value.cast(target.dtype).to(target.device), target))
            if consume and isinstance(state_dict, dict):
                del state_dict[key]
            loaded.append(target)
    if realize and loaded:
        unique = list({id(t): t for t in loaded}.values())
        unique[0].realize(*unique[1:])
    if verbose:
        print(f"load_state_dict: loaded {len(loaded)} tensors in {(time.perf_counter() - start) * 1e3:.1f} ms"
              + (f", skipped missing {missing}" if missing else "") + (f", ignored {unexpected}" if unexpected else ""))
    return loaded


def _own_copy(value: Tensor, target: Tensor) -> Tensor:
    """`value`, made a computation when `target` has no memory of its own: such a target takes `value`'s graph, and a
    plain view of another tensor's Buffer would leave the model sharing (and later writing into) that memory."""
    if target._is_realized() or not value._is_realized():
        return value
    return value.contiguous()
