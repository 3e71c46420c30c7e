"""Benchmark: the DSA indexer's top-k selection and a training step of the indexer with its
sparse loss, per shape, top-k backend and scorer, in a patched Megatron tree.

Backends: "none" is upstream's path for the scorer: with TileLang, megatron-core's fused
hooks as DSAttention calls them with dsa_kernel_backend="tilelang" (run_fused_qk_topk and
run_fused_qk_topk_with_loss, blocks of fused_indexer_block_size=8192 rows: TileLang logits,
then torch.topk); with the torch scorer, the unfused fused_qk_topk_naive /
FusedDSAIndexerLoss, which score densely and run out of memory from 32K tokens. "torch" and
"flashinfer" are the explicit backends, scoring and selecting in blocks of rows
(dsa_blockwise) with the same scorer. Shapes: b=1, 64 index heads x 128, top-k 2048,
integer-valued bf16 q/k (so every scorer computes exact scores and ties are plentiful);
causal rows as per-row key bounds at 32K and 128K tokens, and the context-parallel shape of
a CP4 rank (zigzag: the first and last eighth of 128K positions as 32K queries, against all
128K keys). The training step is selection plus the sparse indexer loss, forward and
backward, with absorbed-MLA attention inputs (16 heads x 576, one key head).

Each record: milliseconds, the median of --reps runs (after a warm-up at 2k tokens that
compiles every kernel), the peak memory allocated over the inputs during one run, and whether
the keys are identical:
for "torch" and "flashinfer", the two backends select the same keys and those equal a
brute-force reference (float64 scores, the tie policy by column) on sampled rows; a
training step's keys equal its selection's. Backend "none" follows no tie policy (null).

GPU:

    python ci/bench_indexer.py --tree PATCHED_TREE [--json FILE]

writes {"environment": {...}, "records": [{"seq", "backend", "scorer", "phase", "ms",
"peak_extra_mib", "identical_keys", ...}]} (seq: query rows, or "QUERIESxKEYS" for the
context-parallel shape).

CPU (CI: a small head count at 8K tokens, the torch scorer; peak extra memory is the
process's peak RSS over its RSS once the inputs exist, each phase in its own process), so a
regression back to dense scoring shows without a GPU:

    python ci/bench_indexer.py --tree PATCHED_TREE --cpu [--seqs 8192] [--heads 4]

PATCHED_TREE is a tree made by `rebaser apply` (its worktree path is in the report).
"""

from __future__ import annotations

import argparse
import importlib
import json
import resource
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Optional, Union

import torch

MIB = 1 << 20
TIE_BREAK = 1
SAMPLED_ROWS = 8


@dataclass(frozen=True)
class Shape:
    queries: int
    keys: int
    cp: bool = False  # queries at a CP4 rank's zigzag positions, else causal over all keys

    @property
    def label(self) -> Union[int, str]:
        return f"{self.queries}x{self.keys}" if self.cp else self.queries


@dataclass
class Result:
    seq: Union[int, str]
    backend: str  # "none", "torch" or "flashinfer"
    scorer: str  # "tilelang" or "torch"
    phase: str  # "select" or "train"
    ms: Optional[float]
    peak_extra_mib: Optional[float]
    identical_keys: Optional[bool] = None
    note: str = ""

    def line(self) -> str:
        head = f"{self.seq!s:>13} {self.backend:>10} {self.scorer:>8} {self.phase:>6}"
        if self.ms is None:
            return f"{head}  {self.note}"
        keys = "" if self.identical_keys is None else f"  identical keys {self.identical_keys}"
        return (
            f"{head} {self.ms:10.1f} ms  peak extra {self.peak_extra_mib:9.1f} MiB{keys}"
            f"{'  ' + self.note if self.note else ''}"
        )


def import_tree(tree: Path):
    """dsa and dsa_blockwise from the patched tree."""
    sys.path.insert(0, str(tree))
    from megatron.core.transformer.experimental_attention_variant import dsa, dsa_blockwise

    return dsa, dsa_blockwise


def environment() -> dict:
    """Driver, torch, TileLang, tvm-ffi and FlashInfer of this run."""
    found = {"torch": torch.__version__}
    if torch.cuda.is_available():
        found["device"] = torch.cuda.get_device_name()
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        )
        found["driver"] = smi.stdout.strip() or None
    for name in ("triton", "tilelang", "tvm_ffi", "flashinfer"):
        try:
            found[name] = importlib.import_module(name).__version__
        except Exception:  # not installed, or fails to import: say so
            found[name] = None
    return found


class Clock:
    """Wall milliseconds of a callable; CUDA work is synchronised."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def ms(self, fn: Callable[[], object]) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if self.cuda:
            torch.cuda.synchronize()
        return (time.perf_counter() - start) * 1e3


class PeakMemory:
    """Peak memory over what is allocated when measuring starts: CUDA allocator statistics,
    or on the CPU the process's peak RSS (run one phase per process)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def start(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        else:
            with open("/proc/self/statm") as statm:
                self.base = int(statm.read().split()[1]) * resource.getpagesize()

    def extra_mib(self) -> float:
        if self.cuda:
            return (torch.cuda.max_memory_allocated() - self.base) / MIB
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
        return max(0, peak - self.base) / MIB


def query_positions(shape: Shape, device) -> torch.Tensor:
    """Each query's position among the keys: causal over all of them, or a CP4 rank's
    zigzag chunks (the first and the last of eight)."""
    if not shape.cp:
        return torch.arange(shape.keys - shape.queries, shape.keys, device=device)
    chunk = shape.keys // 8
    return torch.cat(
        [torch.arange(chunk, device=device), torch.arange(7 * chunk, 8 * chunk, device=device)]
    )[: shape.queries]


def make_inputs(args, shape: Shape, device: torch.device, grad: bool) -> dict:
    generator = torch.Generator(device=device).manual_seed(0)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32

    def small_integers(*shape_, low=-1, high=2, indexer=False):
        tensor = torch.randint(low, high, shape_, generator=generator, device=device)
        return tensor.to(dtype).requires_grad_(grad and indexer)

    def rand(*shape_):
        return torch.randn(*shape_, generator=generator, device=device).to(dtype)

    sq, sk = shape.queries, shape.keys
    weights = torch.randint(0, 2, (sq, 1, args.heads), generator=generator, device=device)
    positions = query_positions(shape, device)
    return dict(
        q=small_integers(sq, 1, args.heads, args.dim, indexer=True),
        k=small_integers(sk, 1, args.dim, indexer=True),
        weights=weights.float().requires_grad_(grad),
        query=rand(sq, 1, args.attn_heads, args.attn_dim),
        key=rand(sk, 1, 1, args.attn_dim),  # absorbed MLA: one key head
        # Causal attention as per-row key bounds (how DSAttention passes packed sequences).
        starts=torch.zeros(sq, dtype=torch.int64, device=device),
        ends=positions + 1,
    )


def single_rank():
    group = SimpleNamespace(size=lambda: 1, rank=lambda: 0)
    return SimpleNamespace(tp=group, cp=group)


def plan_for(dsa_blockwise, args, backend: str, scorer: str):
    from megatron.core.transformer.experimental_attention_variant.dsa_topk import TopkPolicy

    policy = TopkPolicy(backend, deterministic=True, tie_break=TIE_BREAK)
    budget = None if args.budget_mib is None else args.budget_mib * MIB
    return dsa_blockwise.BlockwisePlan(
        policy, budget_bytes=budget, use_tilelang=scorer == "tilelang"
    )


def fused_hooks():
    from megatron.core.transformer.experimental_attention_variant import dsa_tilelang_kernels

    return dsa_tilelang_kernels


def selection(dsa, dsa_blockwise, args, backend: str, scorer: str, x: dict):
    """A callable returning the [b, sq, k] indices."""
    if backend == "none" and scorer == "tilelang":
        hooks = fused_hooks()

        def run():
            with torch.no_grad():
                indices, _ = hooks.run_fused_qk_topk(
                    x["q"], x["k"], x["weights"], args.topk, x["starts"].int(), x["ends"].int(),
                    block_size=args.upstream_block,
                )  # fmt: skip
            return indices

        return run
    plan = None if backend == "none" else plan_for(dsa_blockwise, args, backend, scorer)

    def run():
        with torch.no_grad():
            return dsa.fused_qk_topk_naive(
                x["q"],
                x["k"],
                x["weights"],
                args.topk,
                varlen_starts=x["starts"],
                varlen_ends=x["ends"],
                topk_policy=plan,
            )[1]

    return run


def training_step(dsa, dsa_blockwise, args, backend: str, scorer: str, x: dict):
    """A callable running selection and the sparse indexer loss, forward and backward,
    returning the indices."""
    pg = single_rank()
    scale = args.attn_dim**-0.5
    heads = x["query"].size(2)

    def clear():
        for tensor in (x["q"], x["k"], x["weights"]):
            tensor.grad = None

    if backend == "none" and scorer == "tilelang":
        hooks = fused_hooks()

        def run():
            clear()
            indices, _, loss = hooks.run_fused_qk_topk_with_loss(
                x["q"], x["k"], x["weights"], args.topk, x["starts"].int(), x["ends"].int(),
                args.upstream_block, x["query"], x["key"], scale, 1.0, pg,
            )  # fmt: skip
            loss.backward()
            return indices

        return run
    if backend == "none":
        loss_function = dsa.FusedDSAIndexerLoss.apply
    else:
        loss_function = dsa_blockwise.indexer_loss_function(
            plan_for(dsa_blockwise, args, backend, scorer)
        )

    def run():
        clear()
        # DSAttention's reference path hands the loss the key head expanded to every head.
        indices, loss = loss_function(
            x["q"], x["weights"], x["k"], x["query"], x["key"].expand(-1, -1, heads, -1),
            scale, args.topk, 1.0, None, True, pg, x["starts"], x["ends"], None, None,
            False, True,
        )  # fmt: skip
        loss.backward()
        return indices

    return run


def measure(dsa, dsa_blockwise, args, shape, backend, scorer, phase, device):
    """(Result, indices or None)."""
    clock, memory = Clock(device), PeakMemory(device)
    build = selection if phase == "select" else training_step
    x = None
    try:
        x = make_inputs(args, shape, device, grad=phase == "train")
        run = build(dsa, dsa_blockwise, args, backend, scorer, x)
        memory.start()
        found = []

        def once():
            found.clear()  # the peak counts one run's output, not --reps of them
            found.append(run())

        times = [clock.ms(once) for _ in range(args.reps)]
        result = Result(
            shape.label, backend, scorer, phase, sorted(times)[len(times) // 2], memory.extra_mib()
        )
        return result, found[-1], x
    except torch.OutOfMemoryError as error:
        first = str(error).splitlines()[0][:90]
        return Result(shape.label, backend, scorer, phase, None, None, note=f"OOM: {first}"), None, x
    except Exception as error:  # report it and go on with the other cases
        traceback.print_exc()
        note = f"failed: {type(error).__name__}: {str(error)[:120]}"
        return Result(shape.label, backend, scorer, phase, None, None, note=note), None, x


def reference_rows(x: dict, topk: int, rows: list) -> dict:
    """Brute-force top-k of sampled rows: float64 scores (exact for these integer inputs),
    ties to the smallest column (policy 1), as sorted column lists."""
    found = {}
    for row in rows:
        start, end = int(x["starts"][row]), int(x["ends"][row])
        keys = x["k"][start:end, 0].double()
        head_scores = torch.relu(x["q"][row, 0].double() @ keys.T)
        scores = (head_scores * x["weights"][row, 0, :, None].double()).sum(0)
        columns = torch.arange(start, end, device=scores.device)
        # Descending score, then ascending column: stable sort on score after column order.
        order = torch.sort(scores, descending=True, stable=True).indices
        found[row] = sorted(columns[order[: min(topk, end - start)]].tolist())
    return found


def keys_equal_reference(indices: torch.Tensor, reference: dict) -> bool:
    for row, expected in reference.items():
        selected = indices[0, row]
        if sorted(selected[selected >= 0].tolist()) != expected:
            return False
    return True


def run_cases_in_process(args, device: torch.device) -> list[Result]:
    dsa, dsa_blockwise = import_tree(args.tree)
    print(f"environment: {json.dumps(environment())}", flush=True)
    if "tilelang" in args.scorers and dsa_blockwise._tilelang_scorer() is None:
        print("TileLang's indexer kernels are unavailable: no tilelang-scorer records", flush=True)
        args.scorers = [s for s in args.scorers if s != "tilelang"]
    warm = argparse.Namespace(**{**vars(args), "reps": 1})
    # Compile every kernel (TileLang, Triton, FlashInfer's JIT) before timing: at more tokens
    # than k, so every kernel specialised on the selection's width sees it.
    warm_shape = Shape(2 * args.topk, 2 * args.topk)
    for scorer in args.scorers:
        for backend in args.backends:
            for phase in ("select", "train"):
                started = time.perf_counter()
                result, _, _ = measure(
                    dsa, dsa_blockwise, warm, warm_shape, backend, scorer, phase, device
                )
                print(f"warm-up {backend} {scorer} {phase}: {time.perf_counter() - started:.1f} s"
                      f"{'  ' + result.note if result.note else ''}", flush=True)  # fmt: skip
    results = []
    for shape in args.shapes:
        for scorer in args.scorers:
            if scorer == "torch" and shape.label not in args.torch_scorer_shapes:
                continue
            selected = {}
            for phase in ("select", "train"):
                for backend in args.backends:
                    result, indices, x = measure(
                        dsa, dsa_blockwise, args, shape, backend, scorer, phase, device
                    )
                    if indices is not None and backend != "none":
                        selected[(backend, phase)] = indices
                    results.append(result)
                    if phase == "train" and indices is not None and backend != "none":
                        before = selected.get((backend, "select"))
                        result.identical_keys = before is not None and torch.equal(
                            before, indices
                        )
                    if phase == "select" and backend == args.backends[-1]:
                        mark_identical(results, selected, x, args, shape, scorer)
                    print(result.line(), flush=True)
                    del x, indices
                    torch.cuda.empty_cache()
                    if args.json:
                        write_json(args, results)
            selected.clear()
    return results


def mark_identical(results, selected, x, args, shape, scorer) -> None:
    """Selection records of this shape and scorer: torch and FlashInfer agree, and equal the
    brute-force reference on sampled rows."""
    explicit = [b for b in args.backends if b != "none"]
    found = [selected.get((b, "select")) for b in explicit]
    if not found or any(f is None for f in found) or x is None:
        return
    sq = shape.queries
    rows = sorted({int(r) for r in torch.linspace(0, sq - 1, SAMPLED_ROWS).tolist()} | {sq - 1})
    reference = reference_rows(x, args.topk, rows)
    agree = all(torch.equal(found[0], other) for other in found[1:])
    exact = keys_equal_reference(found[0], reference)
    for result in results:
        same_case = result.seq == shape.label and result.scorer == scorer
        if same_case and result.phase == "select" and result.backend in explicit:
            result.identical_keys = agree and exact
    print(f"  keys: backends agree {agree}, equal the reference on rows {rows}: {exact}")


def write_json(args, results: list[Result]) -> None:
    args.json.write_text(
        json.dumps(
            dict(
                environment=environment(),
                settings=dict(
                    heads=args.heads,
                    dim=args.dim,
                    topk=args.topk,
                    tie_break=TIE_BREAK,
                    attention=f"{args.attn_heads} heads x {args.attn_dim}, one key head",
                    upstream_block_rows=args.upstream_block,
                    budget_mib=args.budget_mib,
                    reps=args.reps,
                ),
                records=[asdict(r) for r in results],
            ),
            indent=2,
        )
    )


def run_cases_in_children(args) -> list[Result]:
    """CPU: each (seq, backend, phase) in a fresh process, so its peak RSS is its own."""
    results = []
    for shape in args.shapes:
        for backend in args.backends:
            for phase in ("select", "train"):
                child = ["--child", str(shape.queries), backend, phase]
                command = [sys.executable, __file__, *args.argv, *child]
                done = subprocess.run(command, capture_output=True, text=True)
                if done.returncode != 0:
                    sys.exit(
                        f"bench_indexer: case {shape.label} {backend} {phase} failed:\n"
                        f"{done.stderr}"
                    )
                result = Result(**json.loads(done.stdout.strip().splitlines()[-1]))
                print(result.line(), flush=True)
                results.append(result)
    return results


def dense_bytes(args, shape: Shape) -> int:
    """What upstream's unfused dense scoring holds at once: [sq, heads, sk] float32 twice
    (product and its ReLU/weighted copy), plus [sq, sk] scores."""
    return 4 * shape.queries * shape.keys * (2 * args.heads + 1)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, required=True, help="a tree made by rebaser apply")
    parser.add_argument("--cpu", action="store_true", help="CPU mode (CI): small, peak RSS")
    parser.add_argument("--seqs", type=int, nargs="+", help="causal sequence lengths")
    parser.add_argument("--cp", type=int, nargs="*", help="CP4 shapes: key counts (GPU 131072)")
    parser.add_argument("--backends", nargs="+", choices=["none", "torch", "flashinfer"])
    parser.add_argument("--scorers", nargs="+", choices=["tilelang", "torch"])
    parser.add_argument(
        "--torch-scorer-shapes", nargs="*", help="shapes (labels) that also run the torch scorer"
    )
    parser.add_argument("--heads", type=int, help="index heads (GPU 64, CPU 4)")
    parser.add_argument("--dim", type=int, default=128, help="index head dim")
    parser.add_argument("--topk", type=int, default=2048)
    parser.add_argument("--attn-heads", type=int, default=16)
    parser.add_argument("--attn-dim", type=int, default=576)
    parser.add_argument(
        "--budget-mib", type=int, help="block budget (default: GPU from free memory, CPU 64)"
    )
    parser.add_argument("--upstream-block", type=int, default=8192, help="upstream's block rows")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.argv = list(argv)
    cpu = args.cpu
    seqs = args.seqs or ([8192] if cpu else [32768, 131072])
    cp = args.cp if args.cp is not None else ([] if cpu else [131072])
    args.shapes = [Shape(s, s) for s in seqs] + [Shape(keys // 4, keys, cp=True) for keys in cp]
    args.backends = args.backends or (["torch"] if cpu else ["none", "torch", "flashinfer"])
    args.scorers = args.scorers or (["torch"] if cpu else ["tilelang", "torch"])
    labels = args.torch_scorer_shapes
    args.torch_scorer_shapes = (
        {s.label for s in args.shapes}
        if cpu
        else {int(v) if v.isdigit() else v for v in (labels if labels is not None else ["32768"])}
    )
    args.heads = args.heads or (4 if cpu else 64)
    if cpu and args.budget_mib is None:
        args.budget_mib = 64
    return args


def main(argv: Optional[list[str]] = None) -> None:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.child:
        seq, backend, phase = args.child
        dsa, dsa_blockwise = import_tree(args.tree)
        shape = Shape(int(seq), int(seq))
        result, _, _ = measure(
            dsa, dsa_blockwise, args, shape, backend, "torch", phase, torch.device("cpu")
        )
        print(json.dumps(asdict(result)))
        return
    device = torch.device("cpu" if args.cpu else "cuda")
    print(
        f"device: {torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}; torch "
        f"{torch.__version__}; b=1, {args.heads} index heads x {args.dim}, top-k {args.topk}, "
        f"tie policy {TIE_BREAK}; loss: sparse, {args.attn_heads} attention heads x "
        f"{args.attn_dim}, one key head; block budget "
        f"{'from free memory' if args.budget_mib is None else f'{args.budget_mib} MiB'}"
    )
    for shape in args.shapes:
        print(
            f"dense scoring at {shape.label} tokens would hold "
            f"{dense_bytes(args, shape) / MIB:.0f} MiB"
        )
    print(f"{'seq':>13} {'backend':>10} {'scorer':>8} {'phase':>6}")
    results = run_cases_in_children(args) if args.cpu else run_cases_in_process(args, device)
    if args.json:
        if args.cpu:
            args.json.write_text(
                json.dumps(dict(environment=environment(), records=[asdict(r) for r in results]))
            )
        else:
            write_json(args, results)


if __name__ == "__main__":
    main()
