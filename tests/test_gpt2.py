"""examples/gpt2.py and gpt2_model.py against `transformers.GPT2LMHeadModel`: the same checkpoint, the same numbers.

The checkpoint is made here, never downloaded: a randomly initialised 2-layer GPT2LMHeadModel (torch.manual_seed),
saved with `save_pretrained` into a temp folder. Its initializer range is 0.1, not GPT-2's 0.02: with 0.02 the
logits of a random model are so flat that greedy decoding repeats one token, and a 30-token comparison would test
little. Compared: logits of prompts of several lengths, alone and as one left-padded batch (positions as
transformers' `generate` derives them from the mask); 30 greedy tokens with the KV cache against
`generate(do_sample=False)`; the decode step recorded once by TinyJit and replayed at every position; seeded
sampling; checkpoints in both file formats and our `save_pretrained` read by transformers; the CLI as a subprocess.

Test-only dependencies: transformers and torch (noxfile.py's INTEGRATION_TOOLS).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import transformers

from plygrad.frontend import Tensor
from plygrad.frontend.nn.state import get_parameters, get_state_dict
from plygrad.runtime import GlobalCounters

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))

import gpt2  # noqa: E402 (examples/ is not a package: found through the path above)
from gpt2_model import GPT2, GPT2Config, left_pad  # noqa: E402

Array = np.ndarray[Any, Any]
VOCAB = 1000
PROMPTS = [[5, 61, 7, 808, 9, 10, 311], [11, 12], [400, 3, 99, 27]]  # three lengths, left-padded as one batch


def _hf_config(**extra: Any) -> transformers.GPT2Config:
    return transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=128,
                                   initializer_range=0.1, bos_token_id=0, eos_token_id=0, **extra)


@pytest.fixture(scope="module")
def reference() -> transformers.GPT2LMHeadModel:
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(_hf_config()).eval()


@pytest.fixture(scope="module")
def folder(reference: transformers.GPT2LMHeadModel, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gpt2")
    reference.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def model(folder: Path) -> GPT2:
    return GPT2.from_pretrained(folder)


def _hf_logits(reference: transformers.GPT2LMHeadModel, ids: Array, mask: Array | None = None) -> Array:
    with torch.no_grad():
        if mask is None:
            return reference(torch.tensor(ids, dtype=torch.long)).logits.numpy()
        positions = np.maximum(np.cumsum(mask, 1) - 1, 0) * mask  # what generate passes for left padding
        return reference(torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                         position_ids=torch.tensor(positions, dtype=torch.long)).logits.numpy()


def _hf_greedy(reference: transformers.GPT2LMHeadModel, ids: Array, mask: Array, tokens: int) -> Array:
    with torch.no_grad():
        out = reference.generate(torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                                 max_new_tokens=tokens, do_sample=False, pad_token_id=0)
    return out[:, ids.shape[1]:].numpy()


# ---- the model ------------------------------------------------------------------------------------------------------
def test_state_dict_has_transformers_keys(model: GPT2, reference: transformers.GPT2LMHeadModel) -> None:
    ours = get_state_dict(model)
    assert set(ours) == set(reference.state_dict())
    assert ours["lm_head.weight"] is ours["transformer.wte.weight"]  # tied: one parameter
    assert len(get_parameters(model)) == len(ours) - 1


def test_logits_of_single_prompts_match_transformers(model: GPT2, reference: transformers.GPT2LMHeadModel) -> None:
    for prompt in PROMPTS:
        ids = np.array([prompt], dtype=np.int32)
        np.testing.assert_allclose(model(Tensor(ids)).numpy(), _hf_logits(reference, ids), atol=1e-4, rtol=0)


def test_logits_of_a_left_padded_batch_match_transformers(model: GPT2, reference: transformers.GPT2LMHeadModel) -> None:
    ids, mask = left_pad(PROMPTS)
    ours = model(Tensor(ids), attention_mask=Tensor(mask)).numpy()
    assert np.isfinite(ours).all()  # padding queries see themselves: no 0/0 reaching real tokens
    real = mask.astype(bool)
    np.testing.assert_allclose(ours[real], _hf_logits(reference, ids, mask)[real], atol=1e-4, rtol=0)
    alone = model(Tensor(np.array([PROMPTS[1]], dtype=np.int32))).numpy()[0]
    np.testing.assert_allclose(ours[1, -len(PROMPTS[1]):], alone, atol=1e-5, rtol=0)


def test_pytorch_model_bin_loads_the_same(reference: transformers.GPT2LMHeadModel, folder: Path,
                                          tmp_path: Path) -> None:
    (tmp_path / "config.json").write_bytes((folder / "config.json").read_bytes())
    torch.save(reference.state_dict(), tmp_path / "pytorch_model.bin")  # what safe_serialization=False wrote
    ids = np.array([PROMPTS[0]], dtype=np.int32)
    np.testing.assert_allclose(GPT2.from_pretrained(tmp_path)(Tensor(ids)).numpy(), _hf_logits(reference, ids),
                               atol=1e-4, rtol=0)


def test_save_pretrained_is_read_by_transformers(tmp_path: Path) -> None:
    Tensor.manual_seed(3)
    ours = GPT2(GPT2Config(vocab_size=300, n_positions=32, n_embd=32, n_layer=1, n_head=2))
    ours.save_pretrained(tmp_path)
    theirs = transformers.GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    ids = np.array([[4, 250, 17]], dtype=np.int32)
    np.testing.assert_allclose(ours(Tensor(ids)).numpy(), _hf_logits(theirs, ids), atol=1e-5, rtol=0)
    again = GPT2.from_pretrained(tmp_path)
    np.testing.assert_array_equal(again(Tensor(ids)).numpy(), ours(Tensor(ids)).numpy())


def test_config_reads_transformers_json(folder: Path) -> None:
    config = GPT2Config.from_json(folder)
    assert (config.n_layer, config.n_embd, config.n_head, config.vocab_size) == (2, 64, 4, VOCAB)
    with pytest.raises(ValueError, match="n_head"):
        GPT2Config.from_json({"vocab_size": 10, "n_positions": 8, "n_embd": 8, "n_layer": 1})
    with pytest.raises(ValueError, match="activation_function"):
        GPT2Config.from_json({"vocab_size": 10, "n_positions": 8, "n_embd": 8, "n_layer": 1, "n_head": 2,
                              "activation_function": "swish"})


def test_bad_input_is_named(model: GPT2) -> None:
    with pytest.raises(ValueError, match="ids must be integer"):
        model(Tensor(np.zeros((1, 3), dtype=np.float32)))
    with pytest.raises(ValueError, match="attention_mask of shape"):
        model(Tensor(np.zeros((2, 3), dtype=np.int32)), attention_mask=Tensor(np.ones((2, 4), dtype=np.int32)))
    with pytest.raises(ValueError, match="left padding"):
        gpt2.generate(model, [[1, 2, 0]], 2, attention_mask=np.array([[1, 1, 0]]))


# ---- generation -----------------------------------------------------------------------------------------------------
def test_greedy_tokens_match_transformers_and_the_step_is_captured_once(
        model: GPT2, reference: transformers.GPT2LMHeadModel) -> None:
    ids, mask = left_pad(PROMPTS)
    gen = gpt2.Generator(model, len(PROMPTS), ids.shape[1] + 30)
    np.testing.assert_array_equal(gen(ids, 30, mask), _hf_greedy(reference, ids, mask, 30))
    step = gen.decode_step
    assert step.cnt == 29 and step.captured is not None  # one plain call, one recording, 27 replays
    recorded, kernels = step.captured, step.captured.capture.kernel_count
    # another batch of prompts through the same Generator: only replays of that one recording
    other = [[7, 7, 500], [1], [2, 3, 4, 5, 6]]
    ids2, mask2 = left_pad(other)
    GlobalCounters.reset()
    np.testing.assert_array_equal(gen(ids2, 12, mask2), _hf_greedy(reference, ids2, mask2, 12))
    assert step.captured is recorded and step.cnt == 29 + 11
    assert GlobalCounters.kernel_count >= 11 * kernels  # each replay launched the recorded kernels


def test_sampling_is_reproducible_and_top_k_1_is_greedy(model: GPT2) -> None:
    ids, mask = left_pad(PROMPTS[:2])
    sampler = gpt2.Generator(model, 2, ids.shape[1] + 6, temperature=0.9, top_k=50, top_p=0.9)
    first = sampler(ids, 6, mask, seed=11)
    np.testing.assert_array_equal(sampler(ids, 6, mask, seed=11), first)  # replays draw from the seed too
    assert (sampler(ids, 6, mask, seed=12) != first).any()
    greedy = gpt2.generate(model, ids, 6, attention_mask=mask)
    np.testing.assert_array_equal(gpt2.generate(model, ids, 6, temperature=1.5, top_k=1, seed=5,
                                                attention_mask=mask), greedy)


def test_top_k_and_top_p_keep_only_their_tokens() -> None:
    logits = np.log(np.array([[0.5, 0.3, 0.1, 0.06, 0.04]] * 256, dtype=np.float32))
    Tensor.manual_seed(0)
    drawn = gpt2.sample(Tensor(logits), temperature=1.0, top_k=2).numpy().ravel()
    assert set(drawn) == {0, 1}
    drawn = gpt2.sample(Tensor(logits), temperature=1.0, top_p=0.85).numpy().ravel()  # 0.5 + 0.3 < 0.85
    assert set(drawn) == {0, 1, 2}
    assert abs((drawn == 0).mean() - 0.5 / 0.9) < 0.1
    with pytest.raises(ValueError, match="top_p"):
        gpt2.sample(Tensor(logits), temperature=1.0, top_p=0.0)


def test_cli_prints_the_greedy_ids(folder: Path, reference: transformers.GPT2LMHeadModel) -> None:
    prompt = PROMPTS[2]
    done = subprocess.run([sys.executable, str(EXAMPLES / "gpt2.py"), str(folder), "--prompt-ids",
                           " ".join(map(str, prompt)), "--tokens", "10", "--ids"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    ids = np.array([prompt], dtype=np.int32)
    assert [int(t) for t in lines[0].split()] == _hf_greedy(reference, ids, np.ones_like(ids), 10)[0].tolist()
    assert "prefill:" in lines[1] and "decode:" in lines[1] and "tokens/s" in lines[1]


def test_cli_without_tokenizer_asks_for_ids(folder: Path) -> None:
    done = subprocess.run([sys.executable, str(EXAMPLES / "gpt2.py"), str(folder), "--prompt", "hello"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0 and "--prompt-ids" in done.stderr
