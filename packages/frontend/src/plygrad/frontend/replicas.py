"""Models over several devices of one process: a model's tensors replaced by replicas, grouped per device.

`replicate(model, devices)` is what data parallelism in one process needs: nn layers then run unchanged on a batch
split over the devices (a MultiTensor, multi.py), and one optimizer per device (`per_device`) steps its replicas.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from plygrad.frontend.multi import MultiTensor, canonical_devices
from plygrad.frontend.nn.state import get_state_dict
from plygrad.frontend.tensor import Tensor


def per_device(tensors: Sequence[MultiTensor]) -> list[list[Tensor]]:
    """The shards of `tensors` grouped by device: one optimizer per device steps its own replica of every
    parameter (`OptimizerGroup(*(SGD(group) for group in per_device(params)))`)."""
    if not tensors:
        return []
    devices = tensors[0].device
    if any(t.device != devices for t in tensors):
        raise ValueError("per_device: the tensors are not all on the same devices")
    return [[t.shards[i] for t in tensors] for i in range(len(devices))]


def replicate(model: object, devices: Sequence[str]) -> list[MultiTensor]:
    """Every Tensor of `model` (nn.state.get_state_dict's) replaced in place by a MultiTensor holding a copy on
    each of `devices`, each copy a leaf that requires grad as the original did; returns them, each once (tied
    weights stay tied). nn layers then run unchanged on a batch split across the devices, nn.BatchNorm as a
    synced BatchNorm, and `per_device` groups the copies for one optimizer per device."""
    found = canonical_devices(devices)
    made: dict[int, MultiTensor] = {}
    for path, t in get_state_dict(model).items():
        m = made.get(id(t))
        if m is None:
            m = made[id(t)] = MultiTensor([t.detach().to(d).contiguous() for d in found], None)
            m.realize()
            if t.requires_grad:
                m.requires_grad_(True)
        _set_path(model, path, m)
    return list(made.values())


def _set_path(obj: Any, path: str, value: object) -> None:
    """Set the attribute, list item or dict entry that `path` (get_state_dict's dotted key) names."""
    *parents, last = path.split(".")
    for part in parents:
        obj = obj[int(part)] if isinstance(obj, (list, tuple)) else obj[part] if isinstance(obj, dict) \
            else getattr(obj, part)
    if isinstance(obj, list):
        obj[int(last)] = value
    elif isinstance(obj, dict):
        obj[last] = value
    elif isinstance(obj, tuple):
        raise TypeError(f"replicate: {path!r} is an item of a tuple, which cannot be replaced; hold the tensors "
                        "in a list")
    else:
        setattr(obj, path.rsplit(".", 1)[-1], value)
