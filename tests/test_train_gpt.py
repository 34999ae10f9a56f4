"""examples/train_gpt.py: 20 training steps of a tiny GPT follow PyTorch's (transformers' GPT2LMHeadModel from the
same initial weights, the same batches, torch AdamW, clipping and schedule) within 1e-3, and the script's --short
mode trains, samples and writes a checkpoint that examples/gpt2_model.py and transformers read back."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from tokenizers import Tokenizer

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))

import train_gpt  # noqa: E402
from gpt2_model import GPT2  # noqa: E402

from plygrad.frontend import Tensor  # noqa: E402

# the --short model's shapes, so the subprocess below finds its kernels compiled in the program cache
TINY = dataclasses.replace(train_gpt.SHORT, steps=20, lr=1e-2, warmup=5, seed=3)


@pytest.fixture(scope="module")
def corpus() -> tuple[np.ndarray, np.ndarray]:  # type: ignore[type-arg]
    return train_gpt.load_corpus(limit_files=HELD_OUT_FILES)


HELD_OUT_FILES = 2 * train_gpt.HELD_OUT_EVERY + 1  # two held-out files among the first ones


def test_the_split_is_by_file_and_the_encoding_round_trips(corpus: tuple[np.ndarray, np.ndarray]) -> None:  # type: ignore[type-arg]
    train, held = corpus
    assert len(train) > 10 * len(held) > 0
    text = "def f(x):\n\treturn x + 1  # \u00e9"
    assert train_gpt.decode(train_gpt.encode(text)) == text.replace("\u00e9", train_gpt.UNK)
    files = train_gpt.stdlib_files()
    assert files == sorted(files) and not any("site-packages" in p.parts for p in files)


def test_twenty_steps_follow_pytorch(corpus: tuple[np.ndarray, np.ndarray]) -> None:  # type: ignore[type-arg]
    train, held = corpus
    _, losses, final, _ = train_gpt.train(TINY, train, held, eval_every=1000, eval_count=1, log=lambda _: None)
    ref_losses, ref_final, _ = train_gpt.torch_train(TINY, train, held, eval_count=1, log=lambda _: None)
    np.testing.assert_allclose(losses, ref_losses, atol=1e-3, rtol=0)
    assert losses[-1] < losses[0] - 0.5, "twenty steps at lr 1e-2 should learn the character frequencies"
    np.testing.assert_allclose(final, ref_final, atol=1e-3)


def test_short_mode_writes_a_checkpoint_that_loads_back(tmp_path: Path) -> None:
    out = tmp_path / "ckpt"
    run = subprocess.run([sys.executable, str(EXAMPLES / "train_gpt.py"), "--short", "--out", str(out)],
                         capture_output=True, text=True, timeout=900, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "held-out loss" in run.stdout and "sample:" in run.stdout and "tok/s" in run.stdout
    assert {p.name for p in out.iterdir()} >= {"config.json", "model.safetensors", "tokenizer.json"}
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    ids = tok.encode("def main():\n\treturn 0").ids
    assert tok.decode(ids) == "def main():\n\treturn 0" and json.loads((out / "config.json").read_text())
    model = GPT2.from_pretrained(out)
    hf = transformers.GPT2LMHeadModel.from_pretrained(out).eval()
    with Tensor.test():
        got = model(Tensor(np.array([ids], np.int32))).numpy()
    with torch.no_grad():
        want = hf(torch.tensor([ids])).logits.numpy()
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)
