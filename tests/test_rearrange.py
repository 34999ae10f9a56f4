"""`Tensor.rearrange` against einops.rearrange on NumPy arrays (values), PyTorch (gradients), and its errors."""

from __future__ import annotations

from typing import Any

import einops
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_compare import compare

from plygrad.frontend import Tensor
from plygrad.frontend.rearrange import RearrangeError
from plygrad.ir import ShapeError

CASES: list[tuple[tuple[int, ...], str, dict[str, int]]] = [
    ((2, 3, 4, 5), "b c h w -> b (c h w)", {}),
    ((2, 3, 4, 5), "b c h w -> b h w c", {}),
    ((2, 6, 5), "b (h p) w -> b h p w", {"p": 2}),
    ((2, 6, 5), "b (h p) w -> (b w) p h", {"h": 3}),
    ((2, 3, 4, 5), "b ... c -> b c ...", {}),
    ((2, 3, 4, 5), "... h w -> ... (w h)", {}),
    ((2, 3, 4), "b ... -> b (...)", {}),
    ((3, 1, 4), "a 1 b -> b a", {}),
    ((3, 4), "a b -> a () b 1", {}),
    ((3, 4), "a b -> (b a)", {}),
    ((2, 12), "b (h w c) -> b h w c", {"h": 2, "w": 3}),
    ((5,), "a -> a", {}),
    ((2, 3), "… b -> b …", {}),
    ((2, 0, 3), "a b c -> c (a b)", {}),
    ((1, 1), "1 1 -> ", {}),
    ((2, 3), "a b -> (a b) 1", {}),
]


@pytest.mark.parametrize(("shape", "pattern", "sizes"), CASES)
def test_rearrange_matches_einops(shape: tuple[int, ...], pattern: str, sizes: dict[str, int]) -> None:
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    want = einops.rearrange(a, pattern.replace("…", "..."), **sizes)
    got = Tensor(a).rearrange(pattern, **sizes).numpy()
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@given(st.lists(st.integers(1, 3), min_size=1, max_size=4), st.randoms(use_true_random=False))
@settings(max_examples=10, deadline=None)
def test_rearrange_any_permutation_and_grouping(shape: list[int], rnd: Any) -> None:
    names = [f"a{i}" for i in range(len(shape))]
    order = names[:]
    rnd.shuffle(order)
    cut = rnd.randint(0, len(order))
    right = " ".join(order[:cut]) + (f" ({' '.join(order[cut:])})" if order[cut:] else "")
    pattern = f"{' '.join(names)} -> {right}"
    a = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(Tensor(a).rearrange(pattern).numpy(), einops.rearrange(a, pattern))


def test_rearrange_gradient_matches_torch() -> None:
    a = np.random.default_rng(1).standard_normal((2, 6, 5)).astype(np.float32)
    compare(lambda x: x.rearrange("b (h p) w -> (b w) p h", p=2),
            lambda x: einops.rearrange(x, "b (h p) w -> (b w) p h", p=2), a)


@pytest.mark.parametrize(("shape", "pattern", "sizes", "message"), [
    ((2, 3), "a b", {}, "exactly one '->'"),
    ((2, 3), "a b -> a", {}, "axis b must appear on both sides"),
    ((2, 3), "a a -> a", {}, "appears more than once"),
    ((2, 3), "a (b -> a b", {}, "without a matching"),
    ((2, 3), "a b) -> a b", {}, "without a matching"),
    ((2, 3), "a ((b)) -> a b", {}, "nested parentheses"),
    ((2, 3), "a _b -> a _b", {}, "is not an axis name"),
    ((2, 3), "a 2 -> a", {}, "is not an axis name"),
    ((2, 3, 4), "a b -> a b", {}, "has 2 axes but the tensor has 3"),
    ((2, 6), "a (b c) -> a b c", {}, "cannot infer the sizes of b, c"),
    ((2, 6), "a (b c) -> a b c", {"b": 4}, "does not split"),
    ((2, 6), "a (b c) -> a b c", {"b": 2, "c": 2}, "multiply to 4"),
    ((2, 6), "a b -> a b", {"z": 2}, "size given for axis z"),
    ((2, 6), "(a ...) b -> a b ...", {}, "cannot be inside parentheses"),
    ((2, 6), "a 1 -> a", {}, "unit axis in the pattern but has size 6"),
])
def test_rearrange_errors_name_the_pattern(shape: tuple[int, ...], pattern: str, sizes: dict[str, int],
                                           message: str) -> None:
    with pytest.raises(RearrangeError, match=message) as info:
        Tensor.ones(*shape).rearrange(pattern, **sizes)
    assert repr(pattern) in str(info.value)
    assert isinstance(info.value, ShapeError)


def test_rearrange_is_a_view_of_torch_layout() -> None:
    t = torch.arange(24.0).reshape(2, 3, 4)
    got = Tensor(t.numpy()).rearrange("a b c -> c (a b)").numpy()
    np.testing.assert_array_equal(got, t.permute(2, 0, 1).reshape(4, 6).numpy())
