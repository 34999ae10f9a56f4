"""Every public name of tinygrad 0.14's `Tensor`, `dtypes`, `nn`, `nn.optim` and `nn.state` exists in plygrad
(issue 13), so code written for tinygrad finds what it calls.

The names are data, listed once from tinygrad 0.14 (`dir()` of each object, public names, without the module
imports); this test never imports tinygrad. A name tinygrad has and plygrad deliberately does not is on EXCLUDED
with the reason. It checks names only: each feature's behaviour is tested against NumPy/PyTorch in its own file.
"""

from __future__ import annotations

from typing import Final

import pytest

from plygrad.frontend import Tensor, dtypes, nn
from plygrad.frontend.nn import optim, state

TENSOR: Final = (
    "T", "abs", "acos", "acosh", "add", "all", "allclose", "alu", "any", "arange", "argmax", "argmin", "argsort",
    "as_param", "asin", "asinh", "assign", "atan", "atanh", "avg_pool2d", "backward", "batchnorm", "bfloat16",
    "binary_crossentropy", "binary_crossentropy_logits", "bitcast", "bitwise_and", "bitwise_not", "bitwise_or",
    "bitwise_xor", "bool", "call", "callify", "cast", "cat", "ceil", "celu", "chunk", "clamp", "clip", "clone",
    "const", "const_like", "contiguous", "contiguous_backward", "conv2d", "conv_transpose2d", "copysign", "cos",
    "cosh", "cross_entropy", "cummax", "cummin", "cumprod", "cumsum", "custom_kernel", "data", "decode_hevc_frame",
    "detach", "device", "diag", "diagonal", "div", "dot", "double", "dropout", "dtype", "einsum", "element_size",
    "elu", "empty", "empty_like", "eq", "erf", "exp", "exp2", "expand", "eye", "flatten", "flip", "float", "floor",
    "fmod", "from_blob", "from_url", "full", "full_like", "gather", "gelu", "glorot_uniform", "grad", "gradient",
    "half", "hardsigmoid", "hardswish", "hardtanh", "hash", "image_conv2d", "image_dot", "int", "interpolate",
    "invalids", "is_floating_point", "is_param", "is_param_", "isclose", "isfinite", "isinf", "isnan", "item",
    "kaiming_normal", "kaiming_uniform", "keccak", "layernorm", "leaky_relu", "lerp", "linear", "linear_with_vars",
    "linspace", "log", "log10", "log2", "log_softmax", "logaddexp", "logcumsumexp", "logical_not", "logsigmoid",
    "logsumexp", "long", "lshift", "manual_seed", "masked_fill", "masked_select", "matmul", "max", "max_numel",
    "max_pool2d", "max_shape", "max_unpool2d", "maximum", "mean", "meshgrid", "min", "minimum", "mish", "mod",
    "mul", "multinomial", "nbytes", "ndim", "ne", "neg", "newton_schulz", "nll_loss", "nonzero", "normal",
    "normalize", "numel", "numpy", "one_hot", "ones", "ones_like", "pad", "pad_to", "permute", "pow", "prod", "qr",
    "quick_gelu", "rand", "rand_like", "randint", "randn", "randn_like", "random_bits", "randperm", "realize",
    "rearrange", "reciprocal", "relu", "relu6", "repeat", "repeat_interleave", "replace", "reshape", "roll",
    "round", "rshift", "rsqrt", "scaled_dot_product_attention", "scaled_uniform", "scatter", "scatter_reduce",
    "schedule_linear", "selu", "sequential", "shape", "shard", "shard_", "shard_like", "short", "shrink",
    "shrink_to", "sigmoid", "sign", "silu", "sin", "sinh", "size", "softmax", "softmin", "softplus", "softsign",
    "sort", "sparse_categorical_crossentropy", "split", "sqrt", "square", "squeeze", "stack", "std", "std_mean",
    "sub", "sum", "svd", "swish", "tan", "tanh", "threefry", "to", "to_", "tolist", "topk", "transpose", "tril",
    "triu", "trunc", "ufix", "unflatten", "unfold", "uniform", "unsqueeze", "uop", "uprod", "usum", "var",
    "var_mean", "view", "where", "zeros", "zeros_like",
)

DTYPES: Final = (
    "all", "bfloat16", "bool", "char", "default_float", "default_int", "double", "finfo", "float", "float16",
    "float32", "float64", "floats", "fp8_fnuz", "fp8_ocp", "fp8e4m3", "fp8e4m3fnuz", "fp8e5m2", "fp8e5m2fnuz",
    "fp8s", "from_py", "half", "int", "int16", "int16s", "int32", "int32s", "int64", "int64s", "int8", "int8s",
    "ints", "is_bool", "is_float", "is_int", "is_unsigned", "long", "short", "sints", "uchar", "uint", "uint16",
    "uint32", "uint64", "uint8", "uints", "ulong", "ushort", "void", "weakfloat", "weakint", "weaks",
)

NN: Final = (
    "BatchNorm", "BatchNorm2d", "BatchNorm3d", "Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d",
    "Embedding", "GroupNorm", "InstanceNorm", "LSTMCell", "LayerNorm", "LayerNorm2d", "Linear", "RMSNorm",
)

OPTIM: Final = (
    "Adam", "AdamW", "LAMB", "LARS", "Muon", "Optimizer", "OptimizerGroup", "SGD",
)

STATE: Final = (
    "TensorIO", "accept_filename", "fs_load", "fs_store", "get_parameters", "get_state_dict", "load_state_dict",
    "safe_load", "safe_load_metadata", "safe_save", "tar_extract", "torch_load", "zip_extract",
)

EXCLUDED: Final = {
    # tinygrad plumbing: its UOp-level escape hatches, kernel-call machinery and parameter slots
    "alu", "call", "callify", "custom_kernel", "as_param", "is_param", "is_param_", "invalids",
    # image ops (tinygrad's texture-memory path for Qualcomm GPUs)
    "image_conv2d", "image_dot",
    # hashing and video decoding built for tinygrad's own tools (and the content-addressed `fs_*` storage on them)
    "keccak", "hash", "decode_hevc_frame", "fs_load", "fs_store",
    # in-place sharding: a Tensor cannot become a MultiTensor in place (frontend/multi.py); MultiTensor.shard_ and
    # replicas.replicate(model, devices) do what tinygrad's `shard_` of a model's tensors does
    "shard_",
    # nn.state's internal decorator turning a path argument into a disk Tensor
    "accept_filename",
    # schedule_linear's helper returning the symbolic-shape Variables' values too: plygrad's schedules carry those
    # values in their CALLs' BINDs (symbolic shapes: docs/frontend.md), so there is nothing separate to return
    "linear_with_vars",
    # the weak-type promotion placeholders (dtypes of unresolved Python scalars): plygrad's result_dtype keeps Python
    # scalars weak without a dtype for them
    "weakint", "weakfloat", "weaks",
}

CASES: Final = [("Tensor", Tensor, TENSOR), ("dtypes", dtypes, DTYPES), ("nn", nn, NN), ("nn.optim", optim, OPTIM),
                ("nn.state", state, STATE)]


@pytest.mark.parametrize(("where", "obj", "names"), CASES, ids=[c[0] for c in CASES])
def test_every_tinygrad_name_exists(where: str, obj: object, names: tuple[str, ...]) -> None:
    missing = [n for n in names if n not in EXCLUDED and not hasattr(obj, n)]
    assert not missing, f"{where} lacks {len(missing)} of tinygrad 0.14's names: {', '.join(missing)}"


def test_the_exclusions_are_tinygrad_names_plygrad_lacks() -> None:
    """An exclusion is dropped once plygrad has the name, or when tinygrad no longer lists it."""
    listed = {n for _, _, names in CASES for n in names}
    assert listed >= EXCLUDED, f"not tinygrad names: {sorted(EXCLUDED - listed)}"
    present = sorted(n for n in EXCLUDED for _, obj, names in CASES if n in names and hasattr(obj, n))
    assert not present, f"plygrad has these now; remove them from EXCLUDED: {present}"
