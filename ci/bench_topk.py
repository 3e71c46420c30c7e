"""Benchmark (GPU): top-k selection for DSA shapes.

For each shape: torch.topk, the overlay's torch backend per tie policy (its CUDA path: the
fused segmented Triton select for k <= 4096 on rows up to 256K scores), the split select
under several geometries, each select stopped after a stage, and
FlashInfer's top_k per mode (raw) and through the overlay's wrapper. Prints milliseconds
(median of CUDA-event timings), the ratio to torch.topk, and the ratio to the
memory-bandwidth bound: the bytes of the score matrix read once over the device's measured
copy bandwidth (read + write counted).

Target on an H200: the torch backend at most 3x the bandwidth bound on 4096 x 131072,
k = 2048, fp32 and bf16.

    python ci/bench_topk.py [--reps 20] [--json FILE] [--no-variants] [--relu-only] [--only TEXT]

--json writes {"environment": {...}, "bandwidth_tb_s", "records": [{"shape", "dtype",
"method", "ms", "x_bound", "x_topk"}]}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Callable

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "megatron_overlay"))
from megatron.core.transformer.experimental_attention_variant import (  # noqa: E402
    dsa_topk_triton,
)
from megatron.core.transformer.experimental_attention_variant.dsa_topk import (  # noqa: E402
    select_topk,
)

G = dsa_topk_triton.Geometry
# The fused segmented select (the CUDA path: one launch, a program per row) under other
# geometries (GEOMETRY_OF by key bits: runs, slots, scores a run reads a step, pack), and
# the split select (SPLIT: thresholds, collecting and select as three launches).
VARIANTS = {
    "segmented, fp32 at Triton's registers (two programs an SM)": dict(
        GEOMETRY_OF={**dsa_topk_triton.GEOMETRY_OF, 32: G(32, 256, 64, 32)}
    ),
    "segmented, fp32 16 runs x 128 at 64 registers": dict(
        GEOMETRY_OF={**dsa_topk_triton.GEOMETRY_OF, 32: G(16, 512, 128, 64, registers=64)}
    ),
    # bf16's geometry until 2026-12-05: a run a thread, its prefix sums inside the thread,
    # 14 instructions a score against 19 (ci/topk_sass.py), but 113-128 registers (two
    # programs an SM) and each warp's load touching 32 runs' lines.
    "segmented, bf16 256 one-thread runs x 8 at Triton's registers": dict(
        GEOMETRY_OF={**dsa_topk_triton.GEOMETRY_OF, 16: G(256, 32, 8, 8)}
    ),
    "segmented, bf16 8 runs x 256 at 64 registers": dict(
        GEOMETRY_OF={**dsa_topk_triton.GEOMETRY_OF, 16: G(8, 1024, 256, 128, registers=64)}
    ),
    "segmented, bf16 32 runs x 64 at 64 registers": dict(
        GEOMETRY_OF={**dsa_topk_triton.GEOMETRY_OF, 16: G(32, 256, 64, 32, registers=64)}
    ),
    # 18.0 instructions a score in the collecting loop against the default's 19.8, and 32
    # runs x 64's 18.9 (ci/topk_sass.py, sm_90 at 64 registers)
    "segmented, bf16 64 runs x 32 at 64 registers": dict(
        GEOMETRY_OF={**dsa_topk_triton.GEOMETRY_OF, 16: G(64, 128, 32, 16, registers=64)}
    ),
    "segmented, bf16 read one score at a time": dict(SEGMENT_PAIRED=False),
    "segmented, prefetch 1": dict(SEGMENT_PREFETCH={32: 1, 16: 1}),
    "segmented, sample 8 chunks": dict(SEGMENT_SAMPLE_CHUNKS=8),
    "segmented, 4 warps a program": dict(SEGMENT_WARPS=4),
    "split, 4 warps, 4x128 / 4x256, chunk 8192": dict(SPLIT=True),
}
# Variants also timed on the plateau shapes (rows with ties at the k-th score).
PLATEAU_VARIANTS = (
    "segmented, fp32 at Triton's registers (two programs an SM)",
    "segmented, fp32 16 runs x 128 at 64 registers",
    "segmented, bf16 256 one-thread runs x 8 at Triton's registers",
)
# The selects stopped after a stage (their output is not the selection): the time of the
# sampled threshold, and of the threshold and the collecting pass.
STAGES = {
    "fused stage: threshold only": dict(SEGMENT_STAGES=1),
    "fused stage: threshold + collecting pass": dict(SEGMENT_STAGES=2),
}
# rows, keys, k, dtype, scores: "relu" (half exact 0.0, a unique k-th score: the usual case)
# or "plateau" (small integers: ties at the k-th score in every row, the torch backend's worst case)
SHAPES = [
    (4096, 131072, 2048, torch.float32, "relu"),
    (4096, 131072, 2048, torch.bfloat16, "relu"),
    (16, 1 << 20, 2048, torch.float32, "relu"),
    (4096, 131072, 2048, torch.float32, "plateau"),
    (4096, 131072, 2048, torch.bfloat16, "plateau"),
]


def time_ms(fn: Callable[[], object], reps: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def copy_bandwidth(reps: int) -> float:
    """Bytes per millisecond of a large device-to-device copy (read + write counted)."""
    source = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").random_()
    target = torch.empty_like(source)
    ms = time_ms(lambda: target.copy_(source), reps)
    return 2 * source.numel() / ms


def scores_like(rows: int, cols: int, dtype: torch.dtype, kind: str) -> torch.Tensor:
    generator = torch.Generator(device="cuda").manual_seed(0)
    if kind == "plateau":
        scores = torch.randint(-64, 64, (rows, cols), device="cuda", generator=generator).float()
        return scores.clamp_min_(0.0).to(dtype)
    return torch.randn(rows, cols, device="cuda", generator=generator).relu_().to(dtype)


def with_settings(settings: dict, fn: Callable[[], object]):
    """fn with dsa_topk_triton's module settings changed for the call."""

    def run():
        saved = {name: getattr(dsa_topk_triton, name) for name in settings}
        for name, value in settings.items():
            setattr(dsa_topk_triton, name, value)
        try:
            return fn()
        finally:
            for name, value in saved.items():
                setattr(dsa_topk_triton, name, value)

    return run


def bench_shape(
    rows, cols, k, dtype, kind, *, flashinfer, bandwidth: float, reps: int, variants: bool,
    only: list[str],
) -> list[dict]:
    """Time every method on one score matrix (with ``only``, the variants and stages whose
    names contain one of its strings); print a line per method."""
    scores = scores_like(rows, cols, dtype, kind)
    bound_ms = scores.numel() * scores.element_size() / bandwidth
    methods: dict[str, Callable[[], object]] = {
        "torch.topk": lambda: torch.topk(scores, k, dim=-1, sorted=False),
        "torch backend, tie 1": lambda: select_topk(scores, k, backend="torch", tie_break=1),
        "torch backend, tie 2": lambda: select_topk(scores, k, backend="torch", tie_break=2),
    }
    if variants and rows >= 4096:
        for label, settings in VARIANTS.items():
            if only and not any(part in label for part in only):
                continue
            if kind == "relu" or label in PLATEAU_VARIANTS:
                methods[f"torch backend, tie 1, {label}"] = with_settings(
                    settings, lambda: dsa_topk_triton.select_rows_filtered(scores, k, False)
                )
    if variants and kind == "relu" and rows >= 4096:
        for label, settings in STAGES.items():
            if only and not any(part in label for part in only):
                continue
            methods[label] = with_settings(
                settings, lambda: dsa_topk_triton.select_rows_filtered(scores, k, False)
            )
    if flashinfer is not None:
        for label, det, tie in (
            ("default", False, 0),
            ("deterministic", True, 0),
            ("det, tie 1", True, 1),
            ("det, tie 2", True, 2),
        ):
            methods[f"flashinfer {label}"] = lambda det=det, tie=tie: flashinfer.top_k(
                scores, k, sorted=False, deterministic=det, tie_break=tie, dsa_graph_safe=True
            )
        methods["flashinfer via select_topk, det, tie 1"] = lambda: select_topk(
            scores, k, backend="flashinfer", deterministic=True, tie_break=1
        )
    dtype_name = str(dtype).removeprefix("torch.")
    label = f"{rows}x{cols} {kind} k={k}"
    results, reference = [], None
    # Every tie-1 method must select the backend's keys.
    expected = select_topk(scores, k, backend="torch", tie_break=1)[1]
    for name, fn in methods.items():
        try:
            if "tie 1" in name and "flashinfer" not in name:
                got = fn()
                got = got[1] if isinstance(got, tuple) else got
                assert torch.equal(got, expected), f"{name} selected other keys than the backend"
            ms = time_ms(fn, reps)
        except Exception as error:  # a variant that fails to compile or differs: say so, go on
            print(f"{label:30} {dtype_name:8} {name:52} FAILED: {error!r}"[:2000], flush=True)
            results.append(
                dict(shape=label, dtype=dtype_name, method=name, error=repr(error)[:500])
            )
            continue
        reference = reference or ms
        results.append(
            dict(
                shape=label,
                dtype=dtype_name,
                method=name,
                ms=round(ms, 4),
                x_bound=round(ms / bound_ms, 2),
                x_topk=round(ms / reference, 2),
            )
        )
        print(
            f"{label:30} {dtype_name:8} {name:52} {ms:9.3f} ms  {ms / reference:5.2f}x topk  "
            f"{ms / bound_ms:6.2f}x bound ({bound_ms:.3f} ms)",
            flush=True,
        )
    return results


def stage_times(rows, cols, dtype, reps: int, bandwidth: float) -> list[dict]:
    """The striped select's three launches timed apart (and the filter at other stripe
    sizes and steps), on fp32/bf16 relu scores: where the time goes."""
    scores = scores_like(rows, cols, dtype, "relu")
    bound_ms = scores.numel() * scores.element_size() / bandwidth
    T = dsa_topk_triton
    k = 2048
    found = []
    for stripe_scores, chunk in ((16384, 512), (16384, 256), (16384, 128), (4096, 256)):
        capacity = T.capacity_for(k)
        stripes = max(1, min(T.MAX_STRIPES, -(-cols // stripe_scores)))
        slots = T.stripe_slots(capacity, stripes)
        target = max(1, int((k * capacity) ** 0.5))
        key = T._negative_infinity_key(dtype)
        thresholds = torch.empty(rows, dtype=torch.int32, device="cuda")
        counts = torch.empty(rows, stripes, dtype=torch.int32, device="cuda")
        scratch = torch.empty(rows, 2, stripes * slots, dtype=torch.int32, device="cuda")
        out = torch.empty(rows, k, dtype=torch.int32, device="cuda")
        values = torch.empty(rows, k, dtype=dtype, device="cuda")
        row_args = (scores, scores.stride(0), scores.stride(1), cols, out, out)
        common = dict(HAS_BOUNDS=False, KEY_BITS=T.KEY_BITS_OF[dtype], CONTIGUOUS=True)
        launches = {
            "row_thresholds": lambda: T.row_thresholds[(rows,)](
                *row_args, thresholds, target, key, CAPACITY=capacity,
                SAMPLE_CHUNKS=T.SAMPLE_CHUNKS, SAMPLE_CHUNK=T.SAMPLE_CHUNK,
                num_warps=T.FILTER_WARPS, **common,
            ),
            "filter_stripes": lambda: T.filter_stripes[(rows, stripes)](
                *row_args, thresholds, counts, scratch, key, stripes, slots, CHUNK=chunk,
                num_warps=1, **common,
            ),
            "select_from_stripes": lambda: T.select_from_stripes[(rows,)](
                *row_args, 0, thresholds, counts, scratch, out, values, k, key, stripes, slots,
                MAX_STRIPES=triton.next_power_of_2(T.MAX_STRIPES), PACK=T.PACK_SLOTS,
                CAPACITY=capacity, ROW_BLOCK=T.ROW_BLOCK, FROM_END=False, SORT_BLOCK=k,
                num_warps=T.FILTER_WARPS, **common,
            ),
        }  # fmt: skip
        for name, launch in launches.items():
            launch()  # in order: each stage's inputs come from the one before
        torch.cuda.synchronize()
        assert torch.equal(out, select_topk(scores, k, backend="torch", tie_break=1)[1])
        for name, launch in launches.items():
            ms = time_ms(launch, reps)
            label = f"{name} (stripes of {stripe_scores}, {chunk}/step)"
            found.append(dict(shape=f"{rows}x{cols} relu k={k}", dtype=str(dtype)[6:],
                              method=label, ms=round(ms, 4), x_bound=round(ms / bound_ms, 2)))  # fmt: skip
            print(f"{rows}x{cols} {str(dtype)[6:]:8} {label:52} {ms:8.3f} ms "
                  f"{ms / bound_ms:6.2f}x bound", flush=True)  # fmt: skip
    return found


def kernel_resources(kernel) -> list[str]:
    """Registers, spills and shared memory of each compiled version of a Triton kernel (from
    Triton's cache; an empty list where this Triton keeps them elsewhere)."""
    found = []
    for caches in getattr(kernel, "device_caches", {}).values():
        for compiled in caches[0].values():
            try:
                meta = compiled.metadata
                found.append(
                    f"{compiled.name}: {compiled.n_regs} registers, {compiled.n_spills} "
                    f"spills, {meta.shared} B shared, {meta.num_warps} warps"
                )
            except AttributeError:  # not loaded yet, or another Triton's fields
                continue
    return found


def environment(flashinfer) -> dict:
    """Driver, torch, Triton, TileLang, tvm-ffi and FlashInfer versions of this run."""
    import importlib
    import subprocess

    found = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--no-variants", dest="variants", action="store_false")
    parser.add_argument("--stages", action="store_true", help="only the stage timings")
    parser.add_argument(
        "--relu-only", action="store_true", help="only the 4096 x 131072 relu shapes"
    )
    parser.add_argument(
        "--shape", action="append", default=[], metavar="TEXT",
        help="only the shapes whose label (e.g. '16x1048576 relu float32') contains TEXT "
        "(repeatable)",
    )
    parser.add_argument(
        "--only", action="append", default=[], metavar="TEXT",
        help="only the variants and stages whose names contain TEXT (repeatable)",
    )  # fmt: skip
    args = parser.parse_args()
    try:
        import flashinfer
    except ImportError:
        flashinfer = None
    bandwidth = copy_bandwidth(args.reps)
    device = torch.cuda.get_device_name()
    print(
        f"device: {device}; measured copy bandwidth {bandwidth / 1e9:.2f} TB/s; torch {torch.__version__}; "
        f"flashinfer {getattr(flashinfer, '__version__', 'not installed')}"
    )
    rows_out = []
    if args.stages:
        for dtype in (torch.float32, torch.bfloat16):
            rows_out += stage_times(4096, 131072, dtype, args.reps, bandwidth)
        if args.json:
            args.json.write_text(json.dumps(dict(records=rows_out), indent=2))
        return
    for shape in SHAPES:
        if args.relu_only and (shape[0], shape[4]) != (4096, "relu"):
            continue
        label = f"{shape[0]}x{shape[1]} {shape[4]} {str(shape[3]).removeprefix('torch.')}"
        if args.shape and not any(part in label for part in args.shape):
            continue
        rows_out += bench_shape(
            *shape,
            flashinfer=flashinfer,
            bandwidth=bandwidth,
            reps=args.reps,
            variants=args.variants,
            only=args.only,
        )
        torch.cuda.empty_cache()
        T = dsa_topk_triton
        for kernel in (T.segmented_select, T.row_thresholds, T.split_collect, T.split_select):
            for line in kernel_resources(kernel):
                print(line, flush=True)
        if args.json:  # after every shape, so a stopped run keeps what it measured
            args.json.write_text(
                json.dumps(
                    dict(
                        environment=environment(flashinfer),
                        bandwidth_tb_s=round(bandwidth / 1e9, 3),
                        records=rows_out,
                    ),
                    indent=2,
                )
            )


if __name__ == "__main__":
    main()
