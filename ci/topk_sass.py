"""Instructions per score of the top-k's collecting loop, from the SASS, on a machine with
no GPU.

Compiles dsa_topk_triton.segmented_select for the H200 (sm_90) with Triton's own ptxas, as
the torch backend launches it on 4096 x 131072 rows (k = 2048, contiguous rows, no bounds),
disassembles it with Triton's cuobjdump, and prints each loop of the kernel (the backward
branches' bodies) with its instruction count and most frequent opcodes. The collecting
loops (the first pass and the retry, each for raw and for transformed keys) load scores and
store 64-bit candidates with no shared memory, one predicated store a score; a loop's count
over its stores (an unrolled loop's body holds several steps) is its instructions per score.

    python ci/topk_sass.py [--bits 32|16] [--geometry RUNS,SLOTS,VECTOR,PACK[,REGISTERS]]
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "megatron_overlay"))
from megatron.core.transformer.experimental_attention_variant import (  # noqa: E402
    dsa_topk_triton as T,
)

WIDTH = 2048
# Arguments Triton specializes as divisible by 16 at launch (allocations, the row stride).
DIVISIBLE = ("rows_ptr", "row_stride", "starts_ptr", "ends_ptr", "runs_ptr", "packed_ptr")
DIVISIBLE += ("out_ptr", "out_values_ptr")


def compile_cubin(bits: int, geometry: T.Geometry) -> bytes:
    dtype = "fp32" if bits == 32 else "bf16"
    names = T.segmented_select.arg_names
    constants = dict(
        HAS_BOUNDS=False, CAPACITY=T.capacity_for(WIDTH), SAMPLE_CHUNKS=T.SEGMENT_SAMPLE_CHUNKS,
        SAMPLE_CHUNK=T.SAMPLE_CHUNK, SEGMENTS=geometry.segments, SLOTS=geometry.slots,
        VECTOR=geometry.vector, PACK=geometry.pack, ROW_BLOCK=T.ROW_BLOCK, KEY_BITS=bits,
        FROM_END=False, SORT_BLOCK=WIDTH, CONTIGUOUS=T.PAIRED.value if bits == 16 else True,
        PERSISTENT=False,
        STAGES=T.SEGMENT_STAGES, RAW_HITS=T.SEGMENT_RAW_HITS,
        PREFETCH=T.SEGMENT_PREFETCH[bits],
        PIPELINE=T.SEGMENT_PIPELINE, RETRY=T.SEGMENT_RETRY,
    )  # fmt: skip
    pointers = dict(rows_ptr=dtype, out_values_ptr=dtype, runs_ptr="i64")
    signature = {
        name: "constexpr" if name in constants
        else f"*{pointers.get(name, 'i32')}" if name.endswith("_ptr") else "i32"
        for name in names
    }  # fmt: skip
    source = ASTSource(
        fn=T.segmented_select,
        signature=signature,
        constexprs={(names.index(name),): value for name, value in constants.items()},
        attrs={(names.index(name),): [["tt.divisibility", 16]] for name in DIVISIBLE},
    )
    options = dict(num_warps=T.SEGMENT_WARPS)
    if geometry.registers:  # ptxas's cap, as _select_segmented launches it
        options["maxnreg"] = geometry.registers
    kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
    return kernel.asm["cubin"]


def instructions(cubin: bytes) -> list[tuple[int, str]]:
    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as handle:
        handle.write(cubin)
        handle.flush()
        sass = subprocess.run(
            [str(cuobjdump), "-sass", handle.name], capture_output=True, text=True, check=True
        ).stdout
    found = []
    for line in sass.splitlines():
        match = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if match:
            found.append((int(match.group(1), 16), match.group(2)))
    return found


def loops(code: list[tuple[int, str]], shortest: int = 40):
    """(start, end, body) of each loop: the code from a backward branch's target to it."""
    index = {address: i for i, (address, _) in enumerate(code)}
    for i, (address, text) in enumerate(code):
        match = re.search(r"BRA (?:\S+, )?0x([0-9a-f]+)", text)
        if match and int(match.group(1), 16) < address:
            body = code[index[int(match.group(1), 16)] : i + 1]
            if len(body) >= shortest:
                yield body[0][0], address, [text for _, text in body]


def opcode(text: str) -> str:
    return re.sub(r"^@!?U?P\w+\s+", "", text).split()[0].split(".")[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bits", type=int, choices=(32, 16), default=32)
    parser.add_argument(
        "--geometry", help="runs,slots,vector,pack[,registers] (default: GEOMETRY_OF's)"
    )
    args = parser.parse_args()
    geometry = T.GEOMETRY_OF[args.bits]
    if args.geometry:
        geometry = T.Geometry(*map(int, args.geometry.split(",")))
    per_step = geometry.segments * geometry.vector / (32 * T.SEGMENT_WARPS)
    print(f"{args.bits}-bit keys, {geometry}: {per_step:g} scores a thread a step")
    for start, end, body in loops(instructions(compile_cubin(args.bits, geometry))):
        counts = collections.Counter(map(opcode, body))
        # The collecting passes' loops store 64-bit candidates and touch no shared memory.
        shared = counts["STS"] or counts["LDS"] or counts["BAR"]
        collecting = any("STG.E.64" in text for text in body) and counts["LDG"] and not shared
        # One predicated store a score read: the loop's body may hold several steps.
        scores = counts["STG"]
        tail = f"  {len(body) / scores:.1f} a score (collecting)" if collecting else ""
        common = ", ".join(f"{name} {count}" for name, count in counts.most_common(8))
        print(f"loop {start:#06x}-{end:#06x}: {len(body):4} instructions{tail}; {common}")


if __name__ == "__main__":
    main()
