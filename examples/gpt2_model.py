"""GPT-2 written with `plygrad.frontend`, as `transformers.GPT2LMHeadModel` computes it, and its checkpoint folders.

The classes mirror GPT2LMHeadModel's module tree, so the attribute paths are the checkpoint's keys
(`transformer.h.3.attn.c_attn.weight`) and `nn.state.get_state_dict` / `load_state_dict` use transformers' names:

    transformer.wte, wpe      token and learned position embeddings
    transformer.h[i]          ln_1 -> attn (fused c_attn q|k|v, causal attention, c_proj) -> residual
                              ln_2 -> mlp (c_fc, gelu_new, c_proj) -> residual
    transformer.ln_f          the final LayerNorm
    lm_head                   logits = h @ wte.weight.T (the same Tensor: tied embeddings)

transformers' `Conv1D` stores its weight as (in, out) and computes `x @ W + b`, which is `Tensor.linear`'s layout.
A `KVCache` holds one preallocated (B, heads, max_len, head_dim) key and value Tensor per layer; a forward with
`cache=` writes the new keys and values at `start_pos` (an int or a bound `Variable`) and attends to all before.
Used by examples/gpt2.py (generation and the CLI), examples/train_gpt.py and bench/gpt_bench.py.
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any, cast

import numpy as np

from plygrad.frontend import Tensor, dtypes, nn
from plygrad.frontend.nn.state import get_state_dict, load_state_dict, safe_load, safe_save, torch_load
from plygrad.ir import UOp

# config.json's activation_function -> Tensor.gelu's `approximate` (transformers' names for the two GELUs)
GELU_VARIANTS = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu": "none"}
# buffers older checkpoints store beside the weights (the causal mask as a (1, 1, P, P) table): recomputed here
BUFFER_SUFFIXES = (".attn.bias", ".attn.masked_bias")

Position = int | UOp  # a bound Variable (a UOp): the symbolic position of a decode step


@dataclass(frozen=True)
class GPT2Config:
    """The fields of transformers' GPT2Config (config.json) this model reads; `from_json` ignores the others."""

    vocab_size: int
    n_positions: int
    n_embd: int
    n_layer: int
    n_head: int
    layer_norm_epsilon: float = 1e-5
    n_inner: int | None = None  # the MLP's width; None: 4 * n_embd
    activation_function: str = "gelu_new"
    initializer_range: float = 0.02
    scale_attn_weights: bool = True
    scale_attn_by_inverse_layer_idx: bool = False
    tie_word_embeddings: bool = True
    bos_token_id: int | None = 50256
    eos_token_id: int | None = 50256

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head:
            raise ValueError(f"GPT2Config: n_embd {self.n_embd} is not a multiple of n_head {self.n_head}")
        if self.activation_function not in GELU_VARIANTS:
            raise ValueError(f"GPT2Config: activation_function {self.activation_function!r} is not one this model "
                             f"implements ({', '.join(GELU_VARIANTS)})")

    @property
    def inner(self) -> int:
        return 4 * self.n_embd if self.n_inner is None else self.n_inner

    @classmethod
    def from_json(cls, source: str | Path | dict[str, Any]) -> GPT2Config:
        """The config of a transformers `config.json` (a path to the file or its folder, or the parsed dict)."""
        if isinstance(source, dict):
            raw, where = source, "GPT2Config.from_json"
        else:
            path = Path(source)
            path = path / "config.json" if path.is_dir() else path
            raw, where = json.loads(path.read_text(encoding="utf-8")), str(path)
        if raw.get("model_type", "gpt2") != "gpt2":
            raise ValueError(f"{where}: model_type {raw['model_type']!r} is not gpt2")
        if raw.get("add_cross_attention"):
            raise ValueError(f"{where}: add_cross_attention (an encoder-decoder GPT-2) is not supported")
        missing = [f.name for f in fields(cls) if f.default is MISSING and f.name not in raw]
        if missing:
            raise ValueError(f"{where}: config is missing {', '.join(missing)}")
        return cls(**{f.name: raw[f.name] for f in fields(cls) if f.name in raw})

    def to_json_dict(self) -> dict[str, Any]:
        """config.json as transformers writes it for GPT2LMHeadModel (readable by `GPT2Config.from_pretrained`)."""
        return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", **asdict(self),
                "attn_pdrop": 0.0, "embd_pdrop": 0.0, "resid_pdrop": 0.0, "reorder_and_upcast_attn": False}


# ---- layers ---------------------------------------------------------------------------------------------------------
def _normal(shape: tuple[int, ...], std: float, init: bool) -> Tensor:
    """A trainable N(0, std) tensor, or with `init` False uninitialized memory (a checkpoint overwrites it: drawing
    GPT-2 small's 124M random numbers first would cost seconds, since a tensor that requires grad is realized)."""
    return (Tensor.randn(*shape).mul(std) if init else Tensor.empty(*shape)).requires_grad_(True)


def _embedding(vocab_size: int, dim: int, std: float, init: bool) -> nn.Embedding:
    """nn.Embedding with transformers' N(0, std) table; made without nn.Embedding's own N(0, 1) draw, which would be
    realized (and thrown away) first."""
    emb = nn.Embedding.__new__(nn.Embedding)
    emb.vocab_size, emb.embed_size, emb.weight = vocab_size, dim, _normal((vocab_size, dim), std, init)
    return emb


class Conv1D:
    """transformers' Conv1D: `x @ weight + bias` with weight (in, out), initialized N(0, std), bias zeros."""

    def __init__(self, n_in: int, n_out: int, std: float, init: bool) -> None:
        self.weight = _normal((n_in, n_out), std, init)
        self.bias = Tensor.zeros(n_out).requires_grad_(True)

    def __call__(self, x: Tensor) -> Tensor:
        return x.linear(self.weight, self.bias)


class KVCache:
    """One preallocated key and value Tensor (batch, heads, max_len, head_dim) per layer, written in place."""

    def __init__(self, config: GPT2Config, batch: int, max_len: int, device: str | None = None) -> None:
        if max_len > config.n_positions:
            raise ValueError(f"KVCache: max_len {max_len} is over the model's {config.n_positions} positions")
        shape = (batch, config.n_head, max_len, config.n_embd // config.n_head)
        self.batch, self.max_len = batch, max_len
        self.keys = [Tensor.zeros(*shape, device=device).contiguous().realize() for _ in range(config.n_layer)]
        self.values = [Tensor.zeros(*shape, device=device).contiguous().realize() for _ in range(config.n_layer)]


class Attention:
    """Causal multi-head self-attention with the fused q|k|v projection `c_attn` and the output projection."""

    def __init__(self, config: GPT2Config, layer_idx: int, init: bool) -> None:
        std = config.initializer_range
        self.n_head, self.n_embd = config.n_head, config.n_embd
        self.c_attn = Conv1D(config.n_embd, 3 * config.n_embd, std, init)
        self.c_proj = Conv1D(config.n_embd, config.n_embd, std / math.sqrt(2 * config.n_layer), init)
        scale = 1.0 / math.sqrt(config.n_embd // config.n_head) if config.scale_attn_weights else 1.0
        self.scale = scale / (layer_idx + 1) if config.scale_attn_by_inverse_layer_idx else scale
        self.layer_idx = layer_idx

    def __call__(self, x: Tensor, mask: Tensor, start_pos: Position, cache: KVCache | None) -> Tensor:
        batch, length, _ = x.shape
        head_dim = self.n_embd // self.n_head
        q, k, v = (t.reshape(batch, length, self.n_head, head_dim).transpose(1, 2)
                   for t in self.c_attn(x).split(self.n_embd, dim=-1))
        if cache is not None:
            keys, values = cache.keys[self.layer_idx], cache.values[self.layer_idx]
            keys[:, :, start_pos:start_pos + length].assign(k)
            values[:, :, start_pos:start_pos + length].assign(v)
            k, v = keys[:, :, :start_pos + length], values[:, :, :start_pos + length]
        out = q.scaled_dot_product_attention(k, v, attn_mask=mask, scale=self.scale)
        return self.c_proj(out.transpose(1, 2).reshape(batch, length, self.n_embd))


class MLP:
    def __init__(self, config: GPT2Config, init: bool) -> None:
        std = config.initializer_range
        self.c_fc = Conv1D(config.n_embd, config.inner, std, init)
        self.c_proj = Conv1D(config.inner, config.n_embd, std / math.sqrt(2 * config.n_layer), init)
        self.approximate = GELU_VARIANTS[config.activation_function]

    def __call__(self, x: Tensor) -> Tensor:
        return self.c_proj(self.c_fc(x).gelu(approximate=self.approximate))


def _layer_norm(config: GPT2Config) -> nn.LayerNorm:
    return nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)


class Block:
    """Pre-LayerNorm transformer block: x + attn(ln_1(x)), then + mlp(ln_2(.))."""

    def __init__(self, config: GPT2Config, layer_idx: int, init: bool) -> None:
        self.ln_1 = _layer_norm(config)
        self.attn = Attention(config, layer_idx, init)
        self.ln_2 = _layer_norm(config)
        self.mlp = MLP(config, init)

    def __call__(self, x: Tensor, mask: Tensor, start_pos: Position, cache: KVCache | None) -> Tensor:
        h = x + self.attn(self.ln_1(x), mask, start_pos, cache)
        return h + self.mlp(self.ln_2(h))


class Transformer:
    """GPT2Model: the embeddings, the blocks and the final LayerNorm (no head)."""

    def __init__(self, config: GPT2Config, init: bool) -> None:
        self.wte = _embedding(config.vocab_size, config.n_embd, config.initializer_range, init)
        self.wpe = _embedding(config.n_positions, config.n_embd, config.initializer_range, init)
        self.h = [Block(config, i, init) for i in range(config.n_layer)]
        self.ln_f = _layer_norm(config)


class _Positions:
    """int32 0..n-1, realized: sliced at a symbolic start, where `Tensor.arange` needs ints. A slotted holder, so
    `get_state_dict` (which walks attribute dicts) does not take the table for a weight of the model."""

    __slots__ = ("table",)

    def __init__(self, n: int, device: str | None) -> None:
        self.table = Tensor.arange(n, dtype=dtypes.int32, device=device).realize()


class LMHead:
    """logits = h @ weight.T; `weight` is the token embedding table itself when the embeddings are tied."""

    def __init__(self, weight: Tensor) -> None:
        self.weight = weight

    def __call__(self, h: Tensor) -> Tensor:
        return h.matmul(self.weight.transpose())


# ---- the model ------------------------------------------------------------------------------------------------------
class GPT2:
    """GPT2LMHeadModel: token ids (B, T) -> next-token logits (B, T, vocab_size). Initialized like transformers
    (N(0, initializer_range) weights, the residual projections scaled by 1/sqrt(2 n_layer), zero biases, unit
    LayerNorms); `init=False` leaves the weights uninitialized, for a checkpoint to fill (`from_pretrained`)."""

    def __init__(self, config: GPT2Config, *, init: bool = True) -> None:
        self.config = config
        self.transformer = Transformer(config, init)
        tied = self.transformer.wte.weight
        self.lm_head = LMHead(tied if config.tie_word_embeddings else
                              _normal((config.vocab_size, config.n_embd), config.initializer_range, init))
        self._positions = _Positions(config.n_positions, None)

    def __call__(self, ids: Tensor, start_pos: Position = 0, attention_mask: Tensor | None = None, *,
                 position_ids: Tensor | None = None, cache: KVCache | None = None, last: bool = False) -> Tensor:
        """The logits (B, T, vocab) of int token ids (B, T), or (B, 1, vocab) of the last position with `last`.

        `start_pos` (an int, or a bound Variable) is where `ids` start: the number of tokens already in `cache`.
        `attention_mask` (B, start_pos + T) is 1 for real tokens and 0 for padding (left padding: no token attends
        to one); positions then follow transformers' `generate`: cumsum(mask) - 1, 0 on padding. `position_ids`
        (B, T) overrides them. Without a cache `start_pos` must be 0."""
        if ids.ndim != 2 or not ids.dtype.is_int:
            raise ValueError(f"GPT2: ids must be integer (batch, length), got {ids.dtype} of shape {ids.shape}")
        batch, length = ids.shape
        if cache is None and not (isinstance(start_pos, int) and start_pos == 0):
            raise ValueError(f"GPT2: start_pos {start_pos} without a cache: there are no earlier keys to attend to")
        if cache is not None and cache.batch != batch:
            raise ValueError(f"GPT2: ids of batch {batch} with a KVCache made for batch {cache.batch}")
        total = start_pos + length
        limit = cache.max_len if cache is not None else self.config.n_positions
        if isinstance(total, int) and total > limit:
            raise ValueError(f"GPT2: {total} positions, over the {'cache' if cache else 'model'}'s {limit}")
        if attention_mask is not None and (attention_mask.ndim != 2 or attention_mask.shape[0] != batch
                                           or attention_mask.shape[1] != total):
            raise ValueError(f"GPT2: attention_mask of shape {attention_mask.shape} does not cover the batch of "
                             f"{batch} and the {total} positions (cache + new tokens)")
        mask = self._mask(batch, length, start_pos, attention_mask)
        pos_emb = self._position_embeddings(batch, length, start_pos, attention_mask, position_ids)
        x = self.transformer.wte(ids) + pos_emb
        for block in self.transformer.h:
            x = block(x, mask, start_pos, cache)
        if last:
            x = x[:, -1:]
        return self.lm_head(self.transformer.ln_f(x))

    def _range(self, start: Position, length: Position) -> Tensor:
        """int32 start .. start+length-1, symbolic where `start` or `length` is."""
        if isinstance(start, int) and isinstance(length, int):
            return Tensor.arange(start, start + length, dtype=dtypes.int32)
        return self._positions.table[start:start + length]

    def _mask(self, batch: int, length: int, start_pos: Position, attention_mask: Tensor | None) -> Tensor:
        """The bool (B, 1, T, S) mask of the keys each query sees: the causal triangle (query i is at position
        start_pos + i), minus padded keys. A query always sees itself, so a padding query (which sees no real key)
        gets finite values instead of a 0/0, which would reach real tokens through its value row."""
        total = cast(int, start_pos + length)  # a UOp where start_pos is one: Tensor's signatures say int
        keys = self._range(0, total).reshape(1, 1, 1, total)
        queries = self._range(start_pos, length).reshape(1, 1, length, 1)
        causal = keys <= queries
        if attention_mask is None:
            return causal
        real = attention_mask.ne(0).reshape(batch, 1, 1, total)
        return causal & (real | (keys == queries))

    def _position_embeddings(self, batch: int, length: int, start_pos: Position, attention_mask: Tensor | None,
                             position_ids: Tensor | None) -> Tensor:
        wpe = self.transformer.wpe
        if position_ids is None and attention_mask is None:
            return wpe.weight[start_pos:start_pos + length].reshape(1, length, self.config.n_embd)
        if position_ids is None:
            assert attention_mask is not None
            real = attention_mask.ne(0)
            counted = real.cast(dtypes.int32).cumsum(1) - 1
            position_ids = real.where(counted, 0)[:, start_pos:start_pos + length]
        if position_ids.shape not in ((batch, length), (length,)):
            raise ValueError(f"GPT2: position_ids of shape {position_ids.shape}, expected ({batch}, {length})")
        return wpe(position_ids.cast(dtypes.int32)).reshape(-1, length, self.config.n_embd)

    # ---- checkpoints ------------------------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, folder: str | Path, device: str | None = None) -> GPT2:
        """The model of a transformers checkpoint folder: config.json plus model.safetensors (or a sharded
        model.safetensors.index.json) or pytorch_model.bin, its weights realized (on `device`)."""
        folder = Path(folder)
        model = cls(GPT2Config.from_json(folder / "config.json"), init=False)
        if device is not None:
            model.to_(device)
        load_state_dict(model, _checkpoint_state(folder, model.config))
        return model

    def to_(self, device: str) -> GPT2:
        """Rebind every tensor of the model to `device` (lazy: loading a state dict then writes into these); the
        embeddings stay tied."""
        for key, t in get_state_dict(self).items():
            _set_path(self, key, t.to(device))
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.transformer.wte.weight
        self._positions = _Positions(self.config.n_positions, device)
        return self

    def state_dict_to_save(self) -> dict[str, Tensor]:
        """The state dict as transformers saves it: tied `lm_head.weight` left out (it is `transformer.wte.weight`)."""
        state = get_state_dict(self)
        if self.config.tie_word_embeddings:
            state.pop("lm_head.weight")
        return state

    def save_pretrained(self, folder: str | Path) -> None:
        """Write config.json and model.safetensors into `folder` (made if missing), readable by transformers'
        `GPT2LMHeadModel.from_pretrained` and by `GPT2.from_pretrained`."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(self.config.to_json_dict(), indent=2) + "\n",
                                            encoding="utf-8")
        state = {key: t.detach().contiguous() for key, t in self.state_dict_to_save().items()}
        safe_save(state, folder / "model.safetensors", metadata={"format": "pt"})


def _set_path(obj: object, key: str, value: Tensor) -> None:
    """Rebind the tensor at dotted path `key` (a state-dict key) of `obj` to `value`."""
    *parents, name = key.split(".")
    for part in parents:
        obj = obj[int(part)] if isinstance(obj, list) else getattr(obj, part)
    setattr(obj, name, value)


def _checkpoint_state(folder: Path, config: GPT2Config) -> dict[str, Tensor]:
    """The checkpoint's tensors under this model's keys: `transformer.` added where a GPT2Model checkpoint (the
    original `gpt2` files) lacks it, mask buffers dropped, the tied head pointed at the embeddings."""
    index = folder / "model.safetensors.index.json"
    raw: dict[str, Any]
    if (folder / "model.safetensors").is_file():
        raw = safe_load(folder / "model.safetensors")
    elif index.is_file():
        shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        raw = {k: t for shard in shards for k, t in safe_load(folder / shard).items()}
    elif (folder / "pytorch_model.bin").is_file():
        raw = torch_load(folder / "pytorch_model.bin")
    else:
        raise FileNotFoundError(f"{folder}: no model.safetensors, model.safetensors.index.json or pytorch_model.bin")
    state: dict[str, Tensor] = {}
    for key, value in raw.items():
        if key.endswith(BUFFER_SUFFIXES):
            continue
        if not isinstance(value, Tensor):
            raise ValueError(f"{folder}: checkpoint entry {key!r} is a {type(value).__name__}, not a tensor")
        full = key if key.startswith(("transformer.", "lm_head.")) else f"transformer.{key}"
        state[full] = value
    if config.tie_word_embeddings:
        if "transformer.wte.weight" not in state:
            raise ValueError(f"{folder}: the checkpoint has no transformer.wte.weight (the token embeddings)")
        state["lm_head.weight"] = state["transformer.wte.weight"]
    return state


def left_pad(prompts: list[list[int]], pad_id: int = 0) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """(ids, attention_mask), int32 (B, longest): prompts of different lengths padded on the left, as
    transformers' tokenizers do for generation (`padding_side="left"`)."""
    if not prompts or any(not p for p in prompts):
        raise ValueError("left_pad: give at least one prompt, each with at least one token")
    width = max(len(p) for p in prompts)
    ids = np.full((len(prompts), width), pad_id, dtype=np.int32)
    mask = np.zeros((len(prompts), width), dtype=np.int32)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = prompt
        mask[row, width - len(prompt):] = 1
    return ids, mask
