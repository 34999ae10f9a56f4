"""Indexing with tensors: advanced `__getitem__`, `__setitem__`, gather/scatter/scatter_reduce, masked_fill,
masked_select, one_hot, nonzero."""

from __future__ import annotations

from plygrad.frontend.scan import ScanOps


class IndexingOps(ScanOps):
    """Indexing with tensors."""

    __slots__ = ()
