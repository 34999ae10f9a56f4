"""GPT-2 inference: plygrad (examples/gpt2.py) beside PyTorch (transformers' GPT2LMHeadModel), in the same run.

Run: python bench/gpt_bench.py [--threads 2] [--prompt 128] [--tokens 32] [--runs 5] [--quick] [--json FILE]

The model is GPT-2-small-shaped (12 layers, 768 wide, 12 heads, vocabulary 50257, 1024 positions) with random
weights: transformers initialises it (torch.manual_seed(0)) and saves it into a temporary folder, which both
libraries load. Batch 1, greedy. Figures:

- **prefill**: one forward over a `--prompt`-token prompt, all positions' logits (transformers' forward under
  `torch.no_grad()`; plygrad's `GPT2.__call__` under `no_grad`), median of `--runs` after a warm-up;
- **decode**: tokens/s of the cached decode steps: plygrad's `Generator` (one TinyJit replay per token), transformers'
  `generate(do_sample=False)` with its cache, as (N - 1) / (time of N tokens - time of 1 token);
- **first token of a new process**: a child process loads the checkpoint and generates one token, with the program
  cache pointed at an empty folder (`PLYGRAD_CACHE_DIR`: every kernel compiled), then again with that folder filled
  (warm cache); the figure is the generate call's time (prefill + first token), the load is printed beside it.

Both libraries get `--threads` threads (OMP_NUM_THREADS, set before either is imported, and torch.set_num_threads).
`--quick` shrinks everything (2 layers, 256 wide, vocabulary 4096, 16-token prompt, 8 tokens) to check that the
script works; its figures mean nothing. No timing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2, help="threads for both libraries (default 2)")
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens of the prefill (default 128)")
    parser.add_argument("--tokens", type=int, default=32, help="tokens generated for the decode figure (default 32)")
    parser.add_argument("--runs", type=int, default=5, help="timed calls per figure (median, default 5)")
    parser.add_argument("--quick", action="store_true", help="a tiny model and short runs: checks the script")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON to FILE ('-': stdout)")
    parser.add_argument("--first-token", metavar="FOLDER", help=argparse.SUPPRESS)  # the child process's mode
    return parser.parse_args()


ARGS = _parse()
os.environ["OMP_NUM_THREADS"] = str(ARGS.threads)  # before torch or a plygrad kernel starts its thread pool

import numpy as np  # noqa: E402 (after the thread setting)

sys.path.insert(0, str(HERE.parent / "examples"))  # gpt2.py, gpt2_model.py
from gpt2 import GPT2, Generator  # noqa: E402

from plygrad.frontend import Tensor  # noqa: E402
from plygrad.frontend.tensor import no_grad  # noqa: E402


def prompt_ids(length: int, vocab: int) -> np.ndarray[Any, Any]:
    return np.random.RandomState(0).randint(0, vocab, (1, length)).astype(np.int32)


def first_token(folder: Path, length: int) -> None:
    """The child process: load, generate one token, print the times as JSON."""
    started = time.perf_counter()
    model = GPT2.from_pretrained(folder)
    loaded = time.perf_counter()
    gen = Generator(model, 1, length + 1)
    token = gen(prompt_ids(length, model.config.vocab_size), 1)
    done = time.perf_counter()
    print(json.dumps({"load_s": loaded - started, "first_token_s": done - loaded, "token": int(token[0, 0])}))


def median(fn: Any, runs: int) -> float:
    fn()  # warm-up: compiles, fills caches
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def child(folder: Path, cache: Path, length: int) -> dict[str, Any]:
    env = {**os.environ, "PLYGRAD_CACHE_DIR": str(cache)}
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--first-token", str(folder),
                           "--prompt", str(length), "--threads", str(ARGS.threads)],
                          capture_output=True, text=True, env=env, check=False)
    if done.returncode:
        raise SystemExit(f"gpt_bench: the first-token process failed:\n{done.stderr}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    import torch  # here, after OMP_NUM_THREADS is set; the child process never needs it
    import transformers

    torch.set_num_threads(ARGS.threads)
    shape = dict(n_layer=2, n_embd=256, n_head=4, vocab_size=4096) if ARGS.quick else \
        dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257)
    length, tokens, runs = (16, 8, 2) if ARGS.quick else (ARGS.prompt, ARGS.tokens, max(1, ARGS.runs))
    with tempfile.TemporaryDirectory(prefix="gpt-bench-") as scratch:
        folder = Path(scratch) / "model"
        torch.manual_seed(0)
        reference = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_positions=1024, **shape)).eval()
        reference.save_pretrained(folder)
        ids = prompt_ids(length, shape["vocab_size"])
        ids_torch = torch.tensor(ids, dtype=torch.long)

        cold = child(folder, Path(scratch) / "program-cache", length)
        print(f"  plygrad first token, cold cache: {cold['first_token_s']:.2f} s (load {cold['load_s']:.2f} s)",
              file=sys.stderr, flush=True)
        warm = child(folder, Path(scratch) / "program-cache", length)
        print(f"  plygrad first token, warm cache: {warm['first_token_s']:.2f} s (load {warm['load_s']:.2f} s)",
              file=sys.stderr, flush=True)

        model = GPT2.from_pretrained(folder)
        ids_plygrad = Tensor(ids).realize()

        def plygrad_prefill() -> None:
            with no_grad():
                model(ids_plygrad).realize()

        def torch_prefill() -> None:
            with torch.no_grad():
                reference(ids_torch)

        prefill = {"plygrad": median(plygrad_prefill, runs), "torch": median(torch_prefill, runs)}
        print(f"  prefill: plygrad {prefill['plygrad'] * 1e3:.1f} ms, torch {prefill['torch'] * 1e3:.1f} ms",
              file=sys.stderr, flush=True)

        gen = Generator(model, 1, length + tokens)
        ours = gen(ids, tokens)
        decode_times = []
        for _ in range(runs):
            gen(ids, tokens)
            decode_times.append(gen.decode_s)
        plygrad_decode = (tokens - 1) / float(np.median(decode_times))

        def torch_generate(n: int) -> Any:
            with torch.no_grad():
                return reference.generate(ids_torch, attention_mask=torch.ones_like(ids_torch), max_new_tokens=n,
                                          min_new_tokens=n, do_sample=False, pad_token_id=0)

        theirs = torch_generate(tokens)[0, length:].numpy()
        torch_decode = (tokens - 1) / max(median(lambda: torch_generate(tokens), runs)
                                          - median(lambda: torch_generate(1), runs), 1e-9)
        print(f"  decode: plygrad {plygrad_decode:.1f} tokens/s, torch {torch_decode:.1f} tokens/s",
              file=sys.stderr, flush=True)
        same = bool((ours[0] == theirs).all())

    print(f"command: {' '.join([os.path.basename(sys.executable), *sys.argv])}")
    print(f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores, "
          f"{ARGS.threads} threads each; torch {torch.__version__}, transformers {transformers.__version__}")
    print(f"GPT-2 {shape['n_layer']} layers x {shape['n_embd']}, vocabulary {shape['vocab_size']}, random weights, "
          f"batch 1; prompt {length} tokens, {tokens} generated (greedy; same ids as transformers: {same})")
    print()
    print(f"| {'figure':48s} | {'unit':8s} | {'plygrad':>9s} | {'torch':>9s} |")
    print("|" + "-" * 50 + "|" + "-" * 10 + "|" + "-" * 11 + "|" + "-" * 11 + "|")
    print(f"| {f'prefill, {length} tokens, median of {runs}':48s} | {'ms':8s} | {prefill['plygrad'] * 1e3:9.1f} | "
          f"{prefill['torch'] * 1e3:9.1f} |")
    print(f"| {'decode with the KV cache':48s} | {'tokens/s':8s} | {plygrad_decode:9.1f} | {torch_decode:9.1f} |")
    print(f"| {'first token of a new process, cold program cache':48s} | {'s':8s} | "
          f"{cold['first_token_s']:9.2f} | {'':>9s} |")
    print(f"| {'first token of a new process, warm program cache':48s} | {'s':8s} | "
          f"{warm['first_token_s']:9.2f} | {'':>9s} |")
    print(f"| {'checkpoint load (cold / warm process)':48s} | {'s':8s} | "
          f"{cold['load_s']:4.2f}/{warm['load_s']:4.2f} | {'':>9s} |")
    print(f"plygrad / torch prefill time: {prefill['plygrad'] / prefill['torch']:.2f}x; "
          f"decode speed: {plygrad_decode / torch_decode:.2f}x")
    if ARGS.json:
        rows = [{"case": "prefill", "unit": "s", "lib": lib, "median": prefill[lib]} for lib in prefill]
        rows += [{"case": "decode", "unit": "tokens/s", "lib": "plygrad", "median": plygrad_decode},
                 {"case": "decode", "unit": "tokens/s", "lib": "torch", "median": torch_decode},
                 {"case": "first_token_cold", "unit": "s", "lib": "plygrad", "median": cold["first_token_s"]},
                 {"case": "first_token_warm", "unit": "s", "lib": "plygrad", "median": warm["first_token_s"]}]
        text = json.dumps(rows, indent=1)
        if ARGS.json == "-":
            print(text)
        else:
            Path(ARGS.json).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    if ARGS.first_token:
        first_token(Path(ARGS.first_token), ARGS.prompt)
    else:
        main()
