"""Train a small character-level GPT on the Python standard library's own source, with plygrad on the CPU.

    python3 examples/train_gpt.py [--steps 500] [--out gpt_stdlib] [--short] [--torch] [--threshold 2.0]

The text is every `*.py` file under `sysconfig.get_paths()["stdlib"]` (site-packages and dist-packages left out),
read in sorted order; every 20th file is held out and never trained on. Tokens are characters: printable ASCII,
newline and tab, anything else one `<unk>` token. The model is examples/gpt2_model.py's GPT2 (4 layers, 128 wide,
4 heads, context 128 by default), trained with AdamW (weight decay on matrices only), a linear warmup then a cosine
decay (`LinearLR` + `CosineAnnealingLR` in `SequentialLR`), gradient clipping at norm 1, the whole step one
`TinyJit` function. It prints a progress line with the loss and tokens/s, the held-out loss every `--eval-every`
steps, saves the model with `save_pretrained` plus a `tokenizer.json` the `tokenizers` package reads (so
`python3 examples/gpt2.py OUT --prompt "def "` continues a prompt), prints a sample, and exits non-zero if the
final held-out loss (nats per character) is above `--threshold`. `--torch` runs the same loop (same initial weights,
batches, optimizer, schedule and clipping) in PyTorch eager with transformers' GPT2LMHeadModel instead;
docs/gpt2.md has the figures of both.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import sysconfig
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpt2_model import GPT2, GPT2Config

from plygrad.frontend import Tensor, TinyJit, nn
from plygrad.frontend.nn import optim
from plygrad.frontend.nn.state import get_parameters, get_state_dict

Array = np.ndarray[Any, Any]
UNK = "<unk>"
VOCAB: tuple[str, ...] = (UNK, "\n", "\t", *(chr(c) for c in range(32, 127)))
HELD_OUT_EVERY = 20  # every 20th file (in sorted order) is held out


# ---- data -----------------------------------------------------------------------------------------------------------
def stdlib_files() -> list[Path]:
    """The standard library's *.py files, sorted by path, without installed packages."""
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in root.rglob("*.py")
                  if not {"site-packages", "dist-packages"} & set(p.relative_to(root).parts) and p.is_file())


def encode(text: str) -> Array:
    """Character ids (uint8) of `text`; a character outside VOCAB is `<unk>` (id 0)."""
    table = np.zeros(128, np.uint8)
    for i, c in enumerate(VOCAB[1:], start=1):
        table[ord(c)] = i
    ascii_only = re.sub(r"[^\x00-\x7f]", "\x00", text).encode("ascii")
    return table[np.frombuffer(ascii_only, np.uint8)]


def decode(ids: Any) -> str:
    return "".join(VOCAB[int(i)] for i in ids)


def load_corpus(limit_files: int | None = None) -> tuple[Array, Array]:
    """(train, held-out) character ids of the stdlib's source, split by file; `limit_files` reads only the first
    files (for a quick run)."""
    files = stdlib_files()[:limit_files]
    parts: tuple[list[str], list[str]] = ([], [])
    for i, path in enumerate(files):
        parts[i % HELD_OUT_EVERY == 0].append(path.read_text(encoding="utf-8", errors="replace"))
    return encode("".join(parts[0])), encode("".join(parts[1]))


def tokenizer_json() -> dict[str, Any]:
    """tokenizer.json for `tokenizers.Tokenizer.from_file`: a BPE with the characters as its vocabulary and no
    merges (so each character is a token, an unknown one `<unk>`), decoded by concatenation."""
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": 0, "content": UNK, "single_word": False, "lstrip": False, "rstrip": False,
                              "normalized": False, "special": True}],
            "normalizer": None, "pre_tokenizer": None, "post_processor": None, "decoder": {"type": "Fuse"},
            "model": {"type": "BPE", "dropout": None, "unk_token": UNK, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": {c: i for i, c in enumerate(VOCAB)}, "merges": []}}


def batches(data: Array, batch: int, context: int, seed: int) -> Iterator[tuple[Array, Array]]:
    """Random windows (input, next characters), int32 (batch, context), from a seeded generator."""
    rng = np.random.default_rng(seed)
    while True:
        starts = rng.integers(0, len(data) - context - 1, size=batch)
        window = np.stack([data[s:s + context + 1] for s in starts]).astype(np.int32)
        yield window[:, :-1], window[:, 1:]


def eval_batches(data: Array, batch: int, context: int, count: int) -> list[tuple[Array, Array]]:
    """`count` fixed batches spread evenly over the held-out text."""
    span = batch * count
    starts = np.linspace(0, len(data) - context - 2, span).astype(np.int64)
    window = np.stack([data[s:s + context + 1] for s in starts]).astype(np.int32)
    return [(window[i * batch:(i + 1) * batch, :-1], window[i * batch:(i + 1) * batch, 1:]) for i in range(count)]


# ---- training -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    steps: int = 500
    batch: int = 32
    context: int = 128
    layers: int = 4
    width: int = 128
    heads: int = 4
    lr: float = 3e-3
    warmup: int = 60
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    clip: float = 1.0
    seed: int = 0

    def config(self) -> GPT2Config:
        return GPT2Config(vocab_size=len(VOCAB), n_positions=self.context, n_embd=self.width, n_layer=self.layers,
                          n_head=self.heads, bos_token_id=None, eos_token_id=None)


def decay_groups(named: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """(decayed, not decayed): weight decay on matrices (linear weights, embeddings), not on biases and norms."""
    seen: set[int] = set()
    decay: list[Any] = []
    plain: list[Any] = []
    for _, t in sorted(named.items()):
        if id(t) in seen:
            continue
        seen.add(id(t))
        (decay if t.ndim >= 2 else plain).append(t)
    return decay, plain


def schedule_factors(s: Settings) -> tuple[float, int, int, float]:
    """LinearLR's start factor, its length, CosineAnnealingLR's T_max and eta_min, shared by both libraries."""
    return 1.0 / s.warmup, s.warmup, max(1, s.steps - s.warmup), s.lr * s.min_lr_ratio


def make_optimizer(model: GPT2, s: Settings) -> tuple[optim.Optimizer, optim.LRScheduler]:
    decay, plain = decay_groups(get_state_dict(model))
    opt = optim.OptimizerGroup(
        optim.AdamW(decay, lr=s.lr, b1=0.9, b2=0.95, eps=1e-8, weight_decay=s.weight_decay),
        optim.AdamW(plain, lr=s.lr, b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.0))
    start, warm, t_max, eta_min = schedule_factors(s)
    sched = optim.SequentialLR(opt, [optim.LinearLR(opt, start, total_iters=warm),
                                     optim.CosineAnnealingLR(opt, T_max=t_max, eta_min=eta_min)], [warm])
    return opt, sched


def lm_loss(logits: Tensor, targets: Tensor) -> Tensor:
    return logits.reshape(-1, logits.shape[-1]).cross_entropy(targets.reshape(-1))


def make_steps(model: GPT2, opt: optim.Optimizer, s: Settings) -> tuple[Callable[..., tuple[Tensor, Tensor]],
                                                                         Callable[..., Tensor]]:
    """The jitted training step (loss and gradient norm before clipping) and the jitted held-out loss."""
    params = get_parameters(model)

    @TinyJit
    def train_step(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        with Tensor.train():
            opt.zero_grad()
            loss = lm_loss(model(x), y)
            loss.backward()
            norm = nn.utils.clip_grad_norm_(params, s.clip)
            opt.step()
            return loss.realize(), norm.realize()

    @TinyJit
    def eval_step(x: Tensor, y: Tensor) -> Tensor:
        with Tensor.train(False), Tensor.test():
            return lm_loss(model(x), y).realize()

    return train_step, eval_step


def progress(step: int, total: int, loss: float, tokens_per_s: float, lr: float) -> str:
    done = int(30 * step / total)
    bar = "#" * done + "." * (30 - done)
    return f"[{bar}] step {step:5d}/{total} loss {loss:.4f} {tokens_per_s:8.0f} tok/s lr {lr:.2e}"


def train(s: Settings, train_data: Array, held_out: Array, *, eval_every: int, eval_count: int,
          log: Callable[[str], None] = print) -> tuple[GPT2, list[float], float, float]:
    """Train; returns the model, the training losses, the final held-out loss and the tokens/s of the steps after
    the first (which schedules and compiles)."""
    Tensor.manual_seed(s.seed)
    model = GPT2(s.config())
    opt, sched = make_optimizer(model, s)
    train_step, eval_step = make_steps(model, opt, s)
    held = eval_batches(held_out, s.batch, s.context, eval_count)

    def held_out_loss() -> float:
        return float(np.mean([eval_step(Tensor(x), Tensor(y)).item() for x, y in held]))

    losses: list[float] = []
    data = batches(train_data, s.batch, s.context, s.seed)
    timed, start = 0.0, time.perf_counter()
    for step in range(1, s.steps + 1):
        x, y = next(data)
        t0 = time.perf_counter()
        loss, _ = train_step(Tensor(x), Tensor(y))
        losses.append(loss.item())
        if step > 1:
            timed += time.perf_counter() - t0
        lr = sched.get_last_lr()[0]
        sched.step()
        rate = (step - 1) * s.batch * s.context / timed if timed else 0.0
        if step % 10 == 0 or step in (1, s.steps):
            log(progress(step, s.steps, losses[-1], rate, lr))
        if step % eval_every == 0 and step != s.steps:
            log(f"step {step}: held-out loss {held_out_loss():.4f}")
    final = held_out_loss()
    log(f"held-out loss {final:.4f} after {s.steps} steps ({time.perf_counter() - start:.1f} s)")
    return model, losses, final, (s.steps - 1) * s.batch * s.context / timed if timed else 0.0


def sample(model: GPT2, prompt: str, length: int, *, context: int, temperature: float, seed: int) -> str:
    """`length` characters after `prompt`, sampled one at a time over the last `context` characters (a fixed
    window, so one jitted forward serves every step)."""
    rng = np.random.default_rng(seed)
    ids = list(encode(prompt).astype(np.int32)) or [1]

    @TinyJit
    def forward(window: Tensor) -> Tensor:
        with Tensor.train(False), Tensor.test():
            return model(window)[0].realize()

    for _ in range(length):
        window = np.array(ids[-context:], np.int32)
        valid = len(window)
        padded = np.concatenate([window, np.zeros(context - valid, np.int32)])  # causal: the tail is never seen
        logits = forward(Tensor(padded.reshape(1, context))).numpy()[valid - 1].astype(np.float64)
        if temperature == 0:
            ids.append(int(logits.argmax()))
            continue
        p = np.exp((logits - logits.max()) / temperature)
        ids.append(int(rng.choice(len(p), p=p / p.sum())))
    return decode(ids)


def save(model: GPT2, out: Path) -> None:
    model.save_pretrained(out)
    (out / "tokenizer.json").write_text(json.dumps(tokenizer_json(), ensure_ascii=False), encoding="utf-8")


# ---- the same loop in PyTorch ---------------------------------------------------------------------------------------
def torch_twin(model: GPT2, s: Settings) -> tuple[Any, Any, Any]:
    """transformers' GPT2LMHeadModel with `model`'s weights, and torch AdamW and schedule set up as make_optimizer."""
    import torch
    import transformers

    hf = transformers.GPT2Config(**{k: v for k, v in s.config().to_json_dict().items() if k != "architectures"})
    twin = transformers.GPT2LMHeadModel(hf)
    state = {k: torch.from_numpy(v.numpy().copy()) for k, v in model.state_dict_to_save().items()}
    twin.load_state_dict(state, strict=False)
    twin.train()
    named = dict(twin.named_parameters())
    decay, plain = decay_groups(named)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": s.weight_decay}, {"params": plain, "weight_decay": 0.0}],
                            lr=s.lr, betas=(0.9, 0.95), eps=1e-8)
    start, warm, t_max, eta_min = schedule_factors(s)
    lrs = torch.optim.lr_scheduler
    sched = lrs.SequentialLR(opt, [lrs.LinearLR(opt, start, total_iters=warm),
                                   lrs.CosineAnnealingLR(opt, T_max=t_max, eta_min=eta_min)], [warm])
    return twin, opt, sched


def torch_train(s: Settings, train_data: Array, held_out: Array, eval_count: int,
                log: Callable[[str], None] = print) -> tuple[list[float], float, float]:
    """The same run in PyTorch eager: (training losses, final held-out loss, tokens/s after the first step)."""
    import torch

    Tensor.manual_seed(s.seed)
    twin, opt, sched = torch_twin(GPT2(s.config()), s)
    loss_fn = torch.nn.functional.cross_entropy
    losses: list[float] = []
    data = batches(train_data, s.batch, s.context, s.seed)
    timed = 0.0
    for step in range(1, s.steps + 1):
        x, y = next(data)
        t0 = time.perf_counter()
        opt.zero_grad()
        logits = twin(torch.from_numpy(x).long()).logits
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), torch.from_numpy(y).long().reshape(-1))
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(twin.parameters(), s.clip)
        opt.step()
        losses.append(loss.item())
        if step > 1:
            timed += time.perf_counter() - t0
        sched.step()
        if step % 10 == 0 or step in (1, s.steps):
            log(progress(step, s.steps, losses[-1], (step - 1) * s.batch * s.context / timed if timed else 0.0,
                         sched.get_last_lr()[0]))
    twin.eval()
    with torch.no_grad():
        held = [loss_fn(twin(torch.from_numpy(x).long()).logits.reshape(-1, len(VOCAB)),
                        torch.from_numpy(y).long().reshape(-1)).item()
                for x, y in eval_batches(held_out, s.batch, s.context, eval_count)]
    final = float(np.mean(held))
    log(f"held-out loss {final:.4f} after {s.steps} steps (PyTorch eager)")
    return losses, final, (s.steps - 1) * s.batch * s.context / timed if timed else 0.0


# ---- the command line -----------------------------------------------------------------------------------------------
SHORT = Settings(steps=12, batch=4, context=32, layers=1, width=32, heads=2, warmup=3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    defaults = Settings()
    for name in ("steps", "batch", "context", "layers", "width", "heads", "warmup", "seed"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name))
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--eval-batches", type=int, default=8)
    parser.add_argument("--out", type=Path, default=Path("gpt_stdlib"), help="checkpoint folder (made if missing)")
    parser.add_argument("--threshold", type=float, default=2.0,
                        help="exit 1 if the final held-out loss (nats per character) is above this")
    parser.add_argument("--sample", type=int, default=200, help="characters to sample at the end")
    parser.add_argument("--short", action="store_true", help="a few steps of a tiny model on a few files (a test)")
    parser.add_argument("--torch", action="store_true", help="run the same loop in PyTorch eager instead")
    args = parser.parse_args(argv)
    if args.short:
        s, limit, eval_every, eval_count, threshold = SHORT, 40, 6, 2, 4.0
        args.sample = min(args.sample, 24)
    else:
        s = Settings(steps=args.steps, batch=args.batch, context=args.context, layers=args.layers, width=args.width,
                     heads=args.heads, lr=args.lr, warmup=min(args.warmup, max(1, args.steps - 1)), seed=args.seed)
        limit, eval_every, eval_count, threshold = None, args.eval_every, args.eval_batches, args.threshold
    t0 = time.perf_counter()
    train_data, held_out = load_corpus(limit)
    print(f"stdlib source: {len(train_data):,} training and {len(held_out):,} held-out characters "
          f"({time.perf_counter() - t0:.1f} s); {len(VOCAB)} tokens")
    n_params = None
    if args.torch:
        _, final, rate = torch_train(s, train_data, held_out, eval_count)
    else:
        model, _, final, rate = train(s, train_data, held_out, eval_every=eval_every, eval_count=eval_count)
        n_params = sum(t.numel() for t in get_parameters(model))
        save(model, args.out)
        print(f"saved {n_params:,} parameters to {args.out}/ (config.json, model.safetensors, tokenizer.json)")
        if args.sample:
            print("sample:\n" + sample(model, "def ", args.sample, context=s.context, temperature=0.8, seed=s.seed))
    print(f"{'PyTorch eager' if args.torch else 'plygrad'}: {rate:,.0f} tokens/s, final held-out loss {final:.4f}")
    if not math.isfinite(final) or final > threshold:
        print(f"held-out loss {final:.4f} is above the threshold {threshold}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
