"""Benchmark: the DSA indexer's top-k selection and a training step of the indexer with its
loss, per sequence length and top-k backend, in a patched Megatron tree.

For each case it prints milliseconds, the peak extra memory (over the inputs) and, for the
explicit backends, the time of the selection alone against torch.topk on the same score
blocks. Backend "none" is upstream's path as the machine has it (the unfused
fused_qk_topk_naive / FusedDSAIndexerLoss unless TileLang or cuDNN DSA kernels are
installed; the header says which), which scores densely and so stops at some length with
an out-of-memory error; the explicit backends ("torch", "flashinfer") score and select in
blocks of rows (dsa_blockwise).

GPU (defaults: b=1, 64 index heads, head dim 128, top-k 2048, 8K/32K/128K tokens; the loss
uses 16 attention heads of dim 192 and the sparse indexer loss):

    python ci/bench_indexer.py --tree PATCHED_TREE [--json FILE]

CPU (CI: a small head count at 8K tokens; peak extra memory is the process's peak RSS over
its RSS once the inputs exist, each phase in its own process), so a regression back to
dense scoring shows without a GPU:

    python ci/bench_indexer.py --tree PATCHED_TREE --cpu [--seqs 8192] [--heads 4]

PATCHED_TREE is a tree made by `rebaser apply` (its worktree path is in the report).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Optional

import torch

MIB = 1 << 20


@dataclass
class Case:
    seq: int
    backend: str  # "none", "torch" or "flashinfer"
    phase: str  # "select" or "train"


@dataclass
class Result:
    seq: int
    backend: str
    phase: str
    ms: Optional[float]
    peak_extra_mib: Optional[float]
    select_ms: Optional[float] = None
    topk_ms: Optional[float] = None
    note: str = ""

    def line(self) -> str:
        if self.ms is None:
            return f"{self.seq:>7} {self.backend:>10} {self.phase:>6}  {self.note}"
        ratio = (
            f"select {self.select_ms:9.1f} ms = {self.select_ms / self.topk_ms:4.2f}x torch.topk"
            if self.select_ms is not None and self.topk_ms
            else ""
        )
        return (
            f"{self.seq:>7} {self.backend:>10} {self.phase:>6} {self.ms:10.1f} ms  "
            f"peak extra {self.peak_extra_mib:9.1f} MiB  {ratio}"
        )


def import_tree(tree: Path):
    """dsa and dsa_blockwise from the patched tree."""
    sys.path.insert(0, str(tree))
    from megatron.core.transformer.experimental_attention_variant import dsa, dsa_blockwise

    return dsa, dsa_blockwise


def fused_paths_present() -> str:
    found = [name for name in ("tilelang", "cudnn") if importlib.util.find_spec(name)]
    if not found:
        return "upstream's unfused path (no TileLang, no cuDNN frontend: no fused DSA kernels)"
    return f"upstream's path; importable kernel packages: {', '.join(found)}"


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


def make_inputs(args, seq: int, device: torch.device, grad: bool) -> dict:
    generator = torch.Generator(device=device).manual_seed(0)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32

    def rand(*shape, scale=1.0, dtype=dtype, indexer=False):
        tensor = (torch.randn(*shape, generator=generator, device=device) * scale).to(dtype)
        return tensor.requires_grad_(grad and indexer)  # the loss trains the indexer only

    return dict(
        q=rand(seq, 1, args.heads, args.dim, indexer=True),
        k=rand(seq, 1, args.dim, indexer=True),
        weights=rand(seq, 1, args.heads, scale=args.heads**-0.5, dtype=torch.float32, indexer=True),
        query=rand(seq, 1, args.attn_heads, args.attn_dim),
        key=rand(seq, 1, args.attn_heads, args.attn_dim),
        # Causal attention as per-row key bounds (how DSAttention passes packed sequences).
        starts=torch.zeros(seq, dtype=torch.int64, device=device),
        ends=torch.arange(1, seq + 1, dtype=torch.int64, device=device),
    )


def plan_for(dsa_blockwise, backend: str, budget_mib: int):
    from megatron.core.transformer.experimental_attention_variant.dsa_topk import TopkPolicy

    tie_break = 0 if backend == "none" else 1
    policy = TopkPolicy(backend, deterministic=True, tie_break=tie_break)
    return dsa_blockwise.BlockwisePlan(policy, budget_bytes=budget_mib * MIB)


def selection(dsa, dsa_blockwise, args, case: Case, x: dict) -> Callable[[], object]:
    plan = None
    if case.backend != "none":
        plan = plan_for(dsa_blockwise, case.backend, args.budget_mib)

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
            )

    return run


def training_step(dsa, dsa_blockwise, args, case: Case, x: dict) -> Callable[[], object]:
    group = SimpleNamespace(size=lambda: 1, rank=lambda: 0)
    pg = SimpleNamespace(tp=group, cp=group)
    if case.backend == "none":
        loss_function = dsa.FusedDSAIndexerLoss.apply
    else:
        plan = plan_for(dsa_blockwise, case.backend, args.budget_mib)
        loss_function = dsa_blockwise.indexer_loss_function(plan)

    def run():
        for tensor in (x["q"], x["k"], x["weights"]):
            tensor.grad = None
        _, loss = loss_function(
            x["q"],
            x["weights"],
            x["k"],
            x["query"],
            x["key"],
            args.attn_dim**-0.5,
            args.topk,
            1.0,  # loss_coeff
            None,  # mask: the bounds below
            True,  # sparse indexer loss
            pg,
            x["starts"],
            x["ends"],
            None,
            None,
            False,
            True,
        )
        loss.backward()
        return loss

    return run


def selection_against_topk(dsa_blockwise, clock: Clock, run: Callable[[], object]):
    """Run the selection again, timing each block's select_topk and torch.topk on the same
    scores; returns their totals in ms."""
    from megatron.core.transformer.experimental_attention_variant import dsa_topk

    original = dsa_topk.select_topk
    totals = {"select": 0.0, "topk": 0.0}

    def timed(scores, k, **kwargs):
        out = []
        totals["select"] += clock.ms(lambda: out.append(original(scores, k, **kwargs)))
        totals["topk"] += clock.ms(lambda: torch.topk(scores, min(k, scores.size(-1)), dim=-1))
        return out[0]

    dsa_topk.select_topk = timed
    try:
        run()
    finally:
        dsa_topk.select_topk = original
    return totals["select"], totals["topk"]


def measure(dsa, dsa_blockwise, args, case: Case, device: torch.device) -> Result:
    clock, memory = Clock(device), PeakMemory(device)
    build = selection if case.phase == "select" else training_step
    try:
        x = make_inputs(args, case.seq, device, grad=case.phase == "train")
        run = build(dsa, dsa_blockwise, args, case, x)
        memory.start()
        times = [clock.ms(run) for _ in range(args.reps)]
        result = Result(
            case.seq, case.backend, case.phase, statistics.median(times), memory.extra_mib()
        )
    except torch.OutOfMemoryError as error:
        first = str(error).splitlines()[0][:90]
        return Result(case.seq, case.backend, case.phase, None, None, note=f"OOM: {first}")
    if case.phase == "select" and case.backend != "none" and args.against_topk:
        result.select_ms, result.topk_ms = selection_against_topk(dsa_blockwise, clock, run)
    return result


def run_cases_in_process(args, device: torch.device) -> list[Result]:
    dsa, dsa_blockwise = import_tree(args.tree)
    results = []
    for backend in args.backends:  # warm up: FlashInfer's JIT, CUDA/cuBLAS handles
        for phase in ("select", "train"):
            measure(dsa, dsa_blockwise, _warmup_args(args), Case(1024, backend, phase), device)
    for seq in args.seqs:
        for backend in args.backends:
            for phase in ("select", "train"):
                result = measure(dsa, dsa_blockwise, args, Case(seq, backend, phase), device)
                print(result.line(), flush=True)
                results.append(result)
                if device.type == "cuda":
                    torch.cuda.empty_cache()
    return results


def _warmup_args(args):
    return argparse.Namespace(**{**vars(args), "reps": 1, "against_topk": False})


def run_cases_in_children(args) -> list[Result]:
    """CPU: each (seq, backend, phase) in a fresh process, so its peak RSS is its own."""
    results = []
    for seq in args.seqs:
        for backend in args.backends:
            for phase in ("select", "train"):
                child = ["--child", str(seq), backend, phase]
                command = [sys.executable, __file__, *args.argv, *child]
                done = subprocess.run(command, capture_output=True, text=True)
                if done.returncode != 0:
                    sys.exit(f"bench_indexer: case {seq} {backend} {phase} failed:\n{done.stderr}")
                result = Result(**json.loads(done.stdout.strip().splitlines()[-1]))
                print(result.line(), flush=True)
                results.append(result)
    return results


def dense_bytes(args, seq: int) -> int:
    """What upstream's dense scoring holds at once: [sq, heads, sk] float32 twice (product and
    its ReLU/weighted copy), plus [sq, sk] scores."""
    return 4 * seq * seq * (2 * args.heads + 1)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, required=True, help="a tree made by rebaser apply")
    parser.add_argument("--cpu", action="store_true", help="CPU mode (CI): small, peak RSS")
    parser.add_argument("--seqs", type=int, nargs="+")
    parser.add_argument("--backends", nargs="+", choices=["none", "torch", "flashinfer"])
    parser.add_argument("--heads", type=int, help="index heads (GPU 64, CPU 4)")
    parser.add_argument("--dim", type=int, default=128, help="index head dim")
    parser.add_argument("--topk", type=int, default=2048)
    parser.add_argument("--attn-heads", type=int, default=16)
    parser.add_argument("--attn-dim", type=int, default=192)
    parser.add_argument("--budget-mib", type=int, help="block budget (GPU 2048, CPU 64)")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--no-against-topk", dest="against_topk", action="store_false")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.argv = list(argv)
    cpu = args.cpu
    args.seqs = args.seqs or ([8192] if cpu else [8192, 32768, 131072])
    args.backends = args.backends or (["torch"] if cpu else ["none", "torch", "flashinfer"])
    args.heads = args.heads or (4 if cpu else 64)
    args.budget_mib = args.budget_mib or (64 if cpu else 2048)
    return args


def main(argv: Optional[list[str]] = None) -> None:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.child:
        seq, backend, phase = args.child
        dsa, dsa_blockwise = import_tree(args.tree)
        case = Case(int(seq), backend, phase)
        result = measure(dsa, dsa_blockwise, args, case, torch.device("cpu"))
        print(json.dumps(asdict(result)))
        return
    device = torch.device("cpu" if args.cpu else "cuda")
    print(
        f"device: {torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}; torch "
        f"{torch.__version__}; b=1, {args.heads} index heads x {args.dim}, top-k {args.topk}, "
        f"loss: sparse, {args.attn_heads} attention heads x {args.attn_dim}; block budget "
        f"{args.budget_mib} MiB; backend none = {fused_paths_present()}"
    )
    for seq in args.seqs:
        print(f"dense scoring at {seq} tokens would hold {dense_bytes(args, seq) / MIB:.0f} MiB")
    print(f"{'seq':>7} {'backend':>10} {'phase':>6}")
    results = run_cases_in_children(args) if args.cpu else run_cases_in_process(args, device)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2))


if __name__ == "__main__":
    main()
