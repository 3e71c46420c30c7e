#!/usr/bin/env bash
# The payload's GPU suite on megatron-core's fused kernels (TileLang) with FlashInfer, on a
# machine that reaches no package index: the working set travels as wheels.
#
#   ci/gpu_suite.sh fetch DIR             (here, with pip and an index) download the working
#                                         set into DIR/part1 and DIR/part2, each under one
#                                         64 MiB carry: tilelang 45 MB and z3-solver 29 MB
#                                         cannot travel together
#   ci/gpu_suite.sh pack DIR ARCHIVE      (here, after fetch) every wheel of DIR/part1 and
#                                         DIR/part2 laid out as pip --target would, in one
#                                         xz archive (ci/pack_site.py): 51 MiB, one carry
#   ci/gpu_suite.sh unpack ARCHIVE [SITE] (there) the packed working set into SITE: the
#                                         same folder as install's two calls, in one
#   ci/gpu_suite.sh install WHEELS [SITE] (there) install every wheel of the folder WHEELS
#                                         into SITE (default /tmp/site), without
#                                         dependencies; run it once per part, back to back
#                                         on the same machine (SITE must survive between)
#   ci/gpu_suite.sh flashinfer-aot OUT    (here, optional: pip, nvcc 13 on PATH, no GPU)
#                                         build FlashInfer's top-k module for sm_90a into
#                                         OUT/topk/topk.so, in a scratch virtual environment
#   ci/gpu_suite.sh aot DIR [SITE]        (there, optional) copy prebuilt FlashInfer modules
#                                         (DIR/NAME/NAME.so) where FlashInfer loads them
#                                         without its JIT compile (3-5 minutes for top-k)
#   ci/gpu_suite.sh check [SITE]          (there) versions of the working set; fails unless
#                                         megatron-core's TileLang indexer kernels import
#   ci/gpu_suite.sh suite TREE [SITE] [PYTEST ARGS]
#                                         (there) the overlay's GPU suite in the patched TREE
#                                         (made by `rebaser apply --test none`), TileLang and
#                                         FlashInfer present
#   ci/gpu_suite.sh bench TREE OUT [SITE] (there) ci/bench_topk.py and ci/bench_indexer.py,
#                                         their JSON records in OUT (docs/gpu-results form)
#
# The working set (checked on an H200 with torch 2.11+cu130): tilelang 0.1.14 and
# flashinfer-python 0.6.18 share apache-tvm-ffi 0.1.12 (FlashInfer takes >=0.1.6,<0.2,
# tilelang <0.1.13); z3-solver is tilelang's; nccl4py and cuda-tile are imported by FlashInfer.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PART1=(tilelang==0.1.14 apache-tvm-ffi==0.1.12 cuda-tile==1.7.0 nccl4py==0.6.0)
PART2=('z3-solver==4.15.4.0' flashinfer-python==0.6.18)
OVERLAY_TESTS=tests/unit_tests/transformer/experimental_attention_variant

site_env() {
    local site="$1"
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    export PATH="$site/bin:$PATH"
}

case "${1:-}" in
fetch)
    dir="${2:?usage: ci/gpu_suite.sh fetch DIR}"
    platforms=()
    for p in manylinux_2_35_x86_64 manylinux_2_34_x86_64 manylinux_2_31_x86_64 \
        manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 \
        manylinux_2_17_x86_64 manylinux2014_x86_64; do
        platforms+=(--platform "$p")
    done
    for part in part1 part2; do
        if [[ $part == part1 ]]; then wheels=("${PART1[@]}"); else wheels=("${PART2[@]}"); fi
        python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
            --implementation cp "${platforms[@]}" -d "$dir/$part" "${wheels[@]}"
        du -sh "$dir/$part"
    done
    ;;
pack)
    dir="${2:?usage: ci/gpu_suite.sh pack DIR ARCHIVE}"
    archive="${3:?usage: ci/gpu_suite.sh pack DIR ARCHIVE}"
    python3 "$HERE/pack_site.py" "$archive" "$dir"/part1/*.whl "$dir"/part2/*.whl
    ;;
unpack)
    archive="${2:?usage: ci/gpu_suite.sh unpack ARCHIVE [SITE]}"
    site="${3:-/tmp/site}"
    mkdir -p "$site" && tar -xJf "$archive" -C "$site"
    echo "gpu_suite: unpacked $archive into $site"
    ;;
install)
    wheels="${2:?usage: ci/gpu_suite.sh install WHEELS [SITE]}"
    site="${3:-/tmp/site}"
    shopt -s nullglob
    found=("$wheels"/*.whl)
    ((${#found[@]})) || { echo "gpu_suite: no wheels in $wheels" >&2; exit 1; }
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" "${found[@]}"
    echo "gpu_suite: installed ${#found[@]} wheels into $site"
    ;;
flashinfer-aot)
    out="${2:?usage: ci/gpu_suite.sh flashinfer-aot OUT}"
    out="$(mkdir -p "$out" && cd "$out" && pwd)"
    python="${PYTHON:-python3}"  # any Python with torch (a CPU build will do)
    work="$(mktemp -d)"
    "$python" -m pip install -q --no-deps --target "$work/site" flashinfer-python==0.6.18 \
        apache-tvm-ffi==0.1.12 ninja tabulate einops nvidia-ml-py click tqdm requests \
        packaging filelock numpy
    # topk.cu includes curand.h (cu13 headers from the wheel); the module calls no driver
    # API, so an empty libcuda stub (soname libcuda.so.1) satisfies the link.
    "$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --platform manylinux_2_27_x86_64 -d "$work" 'nvidia-curand>=10.4,<10.5'
    "$python" -m zipfile -e "$work"/nvidia_curand-*.whl "$work/curand"
    mkdir -p "$work/stubs"
    echo 'int forkkit_libcuda_stub;' | cc -shared -x c - -Wl,-soname,libcuda.so.1 \
        -o "$work/stubs/libcuda.so"
    PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}" PATH="$work/site/bin:$PATH" \
        CPATH="$work/curand/nvidia/cu13/include" \
        LIBRARY_PATH="$work/stubs:${CUDA_HOME:-/usr/local/cuda}/lib64" \
        FLASHINFER_CUDA_ARCH_LIST=9.0a FLASHINFER_WORKSPACE_BASE="$work" "$python" -c "
import shutil, sys
from flashinfer.jit.topk import gen_topk_module
spec = gen_topk_module()
spec.build(verbose=False)
shutil.copy(spec.jit_library_path, sys.argv[1])" "$work/topk.so"
    mkdir -p "$out/topk" && cp "$work/topk.so" "$out/topk/topk.so"
    rm -rf "$work"
    echo "gpu_suite: $out/topk/topk.so"
    ;;
aot)
    dir="${2:?usage: ci/gpu_suite.sh aot DIR [SITE]}"
    site="${3:-/tmp/site}"
    aot="$site/flashinfer/data/aot"
    for module in "$dir"/*/; do
        name="$(basename "$module")"
        mkdir -p "$aot/$name"
        cp "$module/$name.so" "$aot/$name/$name.so"
        echo "gpu_suite: FlashInfer module $name from $module"
    done
    ;;
check)
    site="${2:-/tmp/site}"
    site_env "$site"
    python3 - <<'EOF'
import importlib, subprocess
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())
smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                     capture_output=True, text=True)
print("driver", smi.stdout.strip())
for name in ("tilelang", "tvm_ffi", "flashinfer", "triton", "z3"):
    try:
        module = importlib.import_module(name)
        print(name, getattr(module, "__version__", "?"))
    except Exception as error:  # report every missing piece, then fail below
        print(name, "NOT IMPORTABLE:", repr(error)[:200])
EOF
    ;;
suite)
    tree="${2:?usage: ci/gpu_suite.sh suite TREE [SITE] [PYTEST ARGS]}"
    site="${3:-/tmp/site}"
    shift $(($# < 3 ? $# : 3))
    site_env "$site"
    cd "$tree"
    python3 -c "
from megatron.core.transformer.experimental_attention_variant.ops import indexer
assert indexer.HAVE_TILELANG_INDEXER_FWD, 'megatron-core TileLang indexer kernels unavailable'
print('HAVE_TILELANG_INDEXER_FWD', indexer.HAVE_TILELANG_INDEXER_FWD)"
    python3 -m pytest -p no:cacheprovider -q -rs "$@" \
        "$OVERLAY_TESTS/test_dsa_topk_gpu.py" "$OVERLAY_TESTS/test_dsa_blockwise_gpu.py"
    ;;
bench)
    tree="${2:?usage: ci/gpu_suite.sh bench TREE OUT [SITE]}"
    out="${3:?usage: ci/gpu_suite.sh bench TREE OUT [SITE]}"
    site="${4:-/tmp/site}"
    site_env "$site"
    mkdir -p "$out"
    python3 "$HERE/bench_topk.py" --reps 10 --json "$out/topk-h200.json"
    python3 "$HERE/bench_indexer.py" --tree "$tree" --json "$out/indexer-h200.json"
    ;;
*)
    sed -n '2,34p' "$0" >&2
    exit 2
    ;;
esac
