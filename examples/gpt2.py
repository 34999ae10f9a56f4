"""Text generation with GPT-2 on plygrad: a KV cache, one jitted decode step, greedy or sampled tokens.

    python3 examples/gpt2.py CHECKPOINT_DIR --prompt "text" --tokens 30 [--temperature 0] [--ids]
    python3 examples/gpt2.py CHECKPOINT_DIR --prompt-ids "464 2068 7586" --tokens 30 --ids

CHECKPOINT_DIR is a folder as transformers' `save_pretrained` writes it (config.json, model.safetensors or
pytorch_model.bin; tokenizer.json for --prompt). The prompt is run once (prefill) and fills the cache; each next token
is one decode step, the same `TinyJit` replay at every position (the position is a bound Variable). The model is
examples/gpt2_model.py; docs/gpt2.md explains the pattern.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpt2_model.py beside this file, however it is run

from gpt2_model import GPT2, GPT2Config, KVCache, left_pad

from plygrad.frontend import Tensor, Variable, dtypes
from plygrad.frontend.jit import TinyJit
from plygrad.frontend.tensor import no_grad

__all__ = ["GPT2", "GPT2Config", "Generator", "KVCache", "generate", "left_pad", "sample"]

Array = np.ndarray[Any, Any]


def sample(logits: Tensor, temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None) -> Tensor:
    """The next token (B, 1) int32 of last-position logits (B, V), on the device: the argmax when `temperature` is
    0, else a draw from softmax(logits / temperature) restricted as transformers' warpers do, top-k first (the k
    largest), then top-p (the smallest set of most likely tokens whose probabilities sum to at least top_p)."""
    if temperature < 0:
        raise ValueError(f"sample: temperature must be >= 0, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"sample: top_k must be >= 1, got {top_k}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"sample: top_p must be in (0, 1], got {top_p}")
    if temperature == 0.0:
        return logits.argmax(-1, keepdim=True).cast(dtypes.int32)
    scaled = logits.float() / temperature
    candidates = logits.shape[-1] if top_k is None else min(top_k, logits.shape[-1])
    values, indices = scaled.topk(candidates, dim=-1)  # sorted, largest first
    if top_p is not None and top_p < 1.0:
        probs = values.softmax(-1)
        # keep a token while the mass before it is under top_p: the first always stays
        before = probs.cumsum(-1) - probs
        values = (before < top_p).where(values, -float("inf"))
    choice = values.softmax(-1).multinomial(1)  # (B, 1) index among the candidates
    return indices.gather(-1, choice).cast(dtypes.int32)


class Generator:
    """Generation for one model, batch size and cache length: the KV cache, the padding mask and the jitted decode
    step are made once and reused by every `__call__` (prompts up to `max_len` tokens including the new ones)."""

    def __init__(self, model: GPT2, batch: int, max_len: int, *, temperature: float = 0.0, top_k: int | None = None,
                 top_p: float | None = None, device: str | None = None) -> None:
        self.model, self.batch, self.max_len = model, batch, max_len
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p
        self.cache = KVCache(model.config, batch, max_len, device)
        # 1 for the keys a token may attend to, 0 for left padding: the prompt's mask, then ones for new tokens
        self.mask = Tensor.ones(batch, max_len, dtype=dtypes.int32, device=device).contiguous().realize()
        self.pads = Tensor.zeros(batch, 1, dtype=dtypes.int32, device=device).contiguous().realize()
        self.positions = Tensor.arange(max_len, dtype=dtypes.int32, device=device).realize()
        self.out = Tensor.zeros(batch, max_len + 1, dtype=dtypes.int32, device=device).contiguous().realize()
        self.pos = Variable("pos", 0, max_len - 1)
        self.decode_step = TinyJit(self._decode)
        self.device = device
        self.prefill_s = self.decode_s = 0.0
        self.prompt_tokens = self.new_tokens = 0

    def _decode(self, token: Tensor, pos: Any) -> Tensor:
        """One token per row at cache position `pos` (a bound Variable): attend to the cache, sample the next
        token, write it into `out` at pos + 1 and return it. Every array it touches is preallocated, so a replay
        of the recording serves every position."""
        position_ids = self.positions[pos:pos + 1].reshape(1, 1) - self.pads  # transformers': real tokens before
        logits = self.model(token, pos, self.mask[:, :pos + 1], position_ids=position_ids, cache=self.cache)
        nxt = sample(logits[:, -1], self.temperature, self.top_k, self.top_p)
        written = self.out[:, pos + 1:pos + 2].assign(nxt)
        nxt.realize(written)  # a jitted function's writes must be realized inside it to be recorded
        return nxt

    def __call__(self, ids: Array | list[list[int]], max_new_tokens: int, attention_mask: Array | None = None,
                 seed: int | None = None) -> Array:
        """The `max_new_tokens` new token ids (B, N) int32 after the prompts `ids` (B, T), left-padded where
        `attention_mask` (B, T) has zeros."""
        # without gradients: no autograd bookkeeping, and the cache writes leave the cache one plain view, so the
        # prefill of the next call has the same structure (one schedule) instead of a longer history each time
        with no_grad():
            return self._generate(ids, max_new_tokens, attention_mask, seed)

    def _generate(self, ids: Array | list[list[int]], max_new_tokens: int, attention_mask: Array | None,
                  seed: int | None) -> Array:
        prompt = np.asarray(ids, dtype=np.int32)
        mask = np.ones_like(prompt) if attention_mask is None else np.asarray(attention_mask, dtype=np.int32)
        if prompt.ndim != 2 or prompt.shape[0] != self.batch or mask.shape != prompt.shape:
            raise ValueError(f"Generator: ids of shape {prompt.shape} and mask of shape {mask.shape}; expected "
                             f"({self.batch}, T) for both")
        if (mask[:, -1] == 0).any() or (np.diff(mask, axis=1) < 0).any():
            raise ValueError("Generator: the attention mask must be left padding (zeros, then ones in every row)")
        length = prompt.shape[1]
        if max_new_tokens < 1 or length + max_new_tokens - 1 > self.max_len:
            raise ValueError(f"Generator: {length} prompt tokens + {max_new_tokens} new ones need a cache of "
                             f"{length + max_new_tokens - 1} positions, this one has {self.max_len}")
        if seed is not None:
            Tensor.manual_seed(seed)
        full = np.ones((self.batch, self.max_len), dtype=np.int32)
        full[:, :length] = mask
        # realized now: the decode step's replays read these Buffers directly, past any pending write
        self.mask.assign(Tensor(full, device=self.device)).realize(
            self.pads.assign(Tensor((length - mask.sum(1, keepdims=True)).astype(np.int32), device=self.device)))
        positions = np.maximum(np.cumsum(mask, 1) - 1, 0).astype(np.int32) * mask

        start = time.perf_counter()
        logits = self.model(Tensor(prompt, device=self.device), 0, self.mask[:, :length],
                            position_ids=Tensor(positions, device=self.device), cache=self.cache, last=True)
        token = sample(logits[:, -1], self.temperature, self.top_k, self.top_p)
        token.realize(self.out[:, length:length + 1].assign(token))
        self.prefill_s = time.perf_counter() - start
        start = time.perf_counter()
        for pos in range(length, length + max_new_tokens - 1):
            token = self.decode_step(token, self.pos.bind(pos))
        result: Array = self.out.numpy()[:, length:length + max_new_tokens]
        self.decode_s = time.perf_counter() - start
        self.prompt_tokens, self.new_tokens = length, max_new_tokens
        return result


def generate(model: GPT2, ids: Array | list[list[int]] | Tensor, max_new_tokens: int, *, temperature: float = 0.0,
             top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
             attention_mask: Array | Tensor | None = None, max_len: int | None = None) -> Array:
    """The `max_new_tokens` token ids (B, N) that follow the prompts `ids` (B, T): greedy when `temperature` is 0,
    else sampled (top-k, top-p, reproducible with `seed`). Left-padded prompts give `attention_mask`. One call makes
    its own `Generator` (cache of `max_len` positions, default T + N); reuse a Generator to keep its compiled step."""
    prompt = ids.numpy() if isinstance(ids, Tensor) else np.asarray(ids, dtype=np.int32)
    mask = attention_mask.numpy() if isinstance(attention_mask, Tensor) else attention_mask
    if prompt.ndim != 2:
        raise ValueError(f"generate: ids must be (batch, length), got shape {prompt.shape}")
    needed = prompt.shape[1] + max_new_tokens
    gen = Generator(model, prompt.shape[0], max_len or min(needed, model.config.n_positions),
                    temperature=temperature, top_k=top_k, top_p=top_p)
    return gen(prompt, max_new_tokens, mask, seed)


# ---- the command line -----------------------------------------------------------------------------------------------
def _prompts(args: argparse.Namespace, folder: Path) -> tuple[list[list[int]], Any]:
    """The prompts as token ids, and the tokenizer (None without tokenizer.json)."""
    tokenizer_file = folder / "tokenizer.json"
    tokenizer = None
    if tokenizer_file.is_file():
        from tokenizers import Tokenizer  # only the CLI needs it, with a tokenizer file

        tokenizer = Tokenizer.from_file(str(tokenizer_file))
    if args.prompt_ids:
        try:
            return [[int(t) for t in p.split()] for p in args.prompt_ids], tokenizer
        except ValueError as e:
            raise SystemExit(f"gpt2.py: --prompt-ids takes space-separated integers: {e}") from e
    if tokenizer is None:
        raise SystemExit(f"gpt2.py: {folder} has no tokenizer.json: give the prompt as token ids with --prompt-ids")
    return [tokenizer.encode(p).ids for p in args.prompt], tokenizer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=(
        "Without tokenizer.json in CHECKPOINT_DIR give the prompt as token ids: --prompt-ids \"1 2 3\". Both prompt "
        "options may be repeated for a batch (left-padded)."))
    parser.add_argument("checkpoint", type=Path, help="a folder as transformers' save_pretrained writes it")
    parser.add_argument("--prompt", action="append", default=[], help="prompt text (needs tokenizer.json)")
    parser.add_argument("--prompt-ids", action="append", default=[], help="prompt as space-separated token ids")
    parser.add_argument("--tokens", type=int, default=20, help="how many tokens to generate (default 20)")
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default); else sample")
    parser.add_argument("--top-k", type=int, default=None, help="sample among the k most likely tokens")
    parser.add_argument("--top-p", type=float, default=None, help="sample among the most likely tokens of mass p")
    parser.add_argument("--seed", type=int, default=None, help="seed of the sampling (reproducible runs)")
    parser.add_argument("--ids", action="store_true", help="print the generated token ids instead of text")
    parser.add_argument("--device", default=None, help="where the model runs (default: the frontend's default)")
    args = parser.parse_args(argv)
    if bool(args.prompt) == bool(args.prompt_ids):
        parser.error("give the prompt with --prompt or --prompt-ids (one of the two)")
    if args.tokens < 1:
        parser.error("--tokens must be at least 1")
    prompts, tokenizer = _prompts(args, args.checkpoint)
    if not all(prompts):
        parser.error("every prompt needs at least one token")
    model = GPT2.from_pretrained(args.checkpoint, args.device)
    pad = model.config.eos_token_id if model.config.eos_token_id is not None else 0
    ids, mask = left_pad(prompts, min(pad, model.config.vocab_size - 1))
    needed = ids.shape[1] + args.tokens
    if needed - 1 > model.config.n_positions:
        parser.error(f"{ids.shape[1]} prompt tokens + {args.tokens} new ones exceed the model's "
                     f"{model.config.n_positions} positions")
    gen = Generator(model, len(prompts), min(needed, model.config.n_positions), temperature=args.temperature,
                    top_k=args.top_k, top_p=args.top_p, device=args.device)
    out = gen(ids, args.tokens, mask, args.seed)
    for row in out.tolist():
        print(" ".join(map(str, row)) if args.ids or tokenizer is None else tokenizer.decode(row))
    print(f"prefill: {gen.prompt_tokens * len(prompts) / gen.prefill_s:.1f} tokens/s "
          f"({len(prompts)} x {gen.prompt_tokens} tokens in {gen.prefill_s * 1e3:.0f} ms); "
          f"decode: {max(gen.new_tokens - 1, 0) * len(prompts) / max(gen.decode_s, 1e-9):.1f} tokens/s "
          f"({len(prompts)} x {gen.new_tokens - 1} steps in {gen.decode_s * 1e3:.0f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
