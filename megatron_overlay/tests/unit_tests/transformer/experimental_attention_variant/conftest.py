# Carried by dsa-forkkit (overlay file, not part of upstream Megatron-LM).

"""Fixtures for the DSA top-k tests: small DSA configs and modules that run on the CPU, a
brute-force top-k reference, and the unpatched upstream dsa.py for regression checks.

The fixtures work on every upstream generation the series is carried to (megatron-core
0.16, 0.17-0.18, 0.19, NVIDIA dev); where the generations differ, they read what the base
has from its code. Nothing here is autouse, so upstream's tests in this folder are
unaffected; on Python < 3.12 `typing.override` is provided, so upstream's plain
`python -m pytest <this folder>` runs it.
"""

import dataclasses
import importlib.util
import itertools
import struct
import subprocess
import typing
from pathlib import Path
from types import ModuleType, SimpleNamespace

if not hasattr(typing, "override"):
    # megatron.training (the CLI tests) uses Python 3.12's typing.override; megatron-core
    # supports 3.10+, so plain `pytest` on 3.11 gets the same no-op decorator.
    typing.override = lambda method: method

import pytest
import torch
from packaging.version import Version

from megatron.core import utils as core_utils
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.experimental_attention_variant import dsa
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.transformer.torch_norm import WrappedTorchNorm
from megatron.core.transformer.transformer_config import MLATransformerConfig

if importlib.util.find_spec("transformer_engine") is None and core_utils.get_te_version() is None:
    # Without Transformer Engine megatron-core 0.17+ says TE 0.0.0; 0.16 and the fork's v1
    # branch say None, and their git trees' tests/unit_tests/conftest.py (is_te_min_version
    # in an autouse fixture) would then fail every test here on a CPU machine.
    core_utils._te_version = Version("0.0.0")


def pytest_configure(config):
    # Tests that run a Triton kernel on the CPU (TRITON_INTERPRET): minutes, not seconds.
    # `-m "not triton_interpreter"` leaves them out where the kernels were already checked.
    config.addinivalue_line(
        "markers", "triton_interpreter: runs a Triton kernel under Triton's CPU interpreter"
    )


DSA_PATH = "megatron/core/transformer/experimental_attention_variant/dsa.py"
OVERLAY_SUBJECT = "forkkit: overlay"


class DuplicatedLinear(torch.nn.Linear):
    """A CPU stand-in for TELinear(parallel_mode="duplicated"): returns (output, bias)."""

    def __init__(self, in_features, out_features, *, config, bias, **_unused):
        super().__init__(in_features, out_features, bias=bias, dtype=config.params_dtype)

    def forward(self, x):
        return super().forward(x), None


class SingleRankGroup:
    """A process group of one rank (DSAttention only asks size() and rank())."""

    def __init__(self, size=1, rank=0):
        self._size, self._rank = size, rank

    def size(self):
        return self._size

    def rank(self):
        return self._rank


def order_key(value: float) -> int:
    """The float's bit pattern as an integer that orders like FlashInfer (-0.0 < +0.0)."""
    bits = struct.unpack("<q", struct.pack("<d", value))[0]
    return bits ^ ((bits >> 63) & 0x7FFFFFFFFFFFFFFF)


def _reference_topk(scores: torch.Tensor, k: int, tie_break: int) -> torch.Tensor:
    """Brute force: rank every column by (score bits, tie-broken column); int32, -1 padding last."""
    rows = scores.double().reshape(-1, scores.size(-1)).tolist()
    width = min(k, scores.size(-1))
    out = []
    for row in rows:
        prefer_large = tie_break == 2
        ranked = sorted(
            range(len(row)),
            key=lambda c: (-order_key(row[c]), -c if prefer_large else c),
        )[:width]
        visible = sorted(c for c in ranked if row[c] != float("-inf"))
        out.append(visible + [-1] * (width - len(visible)))
    return torch.tensor(out, dtype=torch.int32).reshape(*scores.shape[:-1], width)


@pytest.fixture
def reference_topk():
    """Brute-force top-k: (scores, k, tie_break) -> int32 indices, -1 padding last."""
    return _reference_topk


def has_config_field(name: str) -> bool:
    return name in {field.name for field in dataclasses.fields(MLATransformerConfig)}


@pytest.fixture
def make_config():
    def _make(**overrides):
        params = dict(
            num_layers=2,
            hidden_size=64,
            num_attention_heads=4,
            use_cpu_initialization=True,
            params_dtype=torch.float32,
            q_lora_rank=32,
            kv_lora_rank=32,
            qk_head_dim=16,
            qk_pos_emb_head_dim=8,
            v_head_dim=16,
            rope_type="rope",
            rotary_base=10000,
            rotary_percent=1.0,
            add_bias_linear=False,
            experimental_attention_variant="dsa",
            dsa_indexer_n_heads=4,
            dsa_indexer_head_dim=16,
            dsa_indexer_topk=8,
        )
        # The Hadamard rotation needs CUDA bf16; v1 DSA always rotates (see build_attention).
        if has_config_field("dsa_indexer_rotate_activation"):
            params["dsa_indexer_rotate_activation"] = False
        params.update(overrides)
        return MLATransformerConfig(**params)

    return _make


@pytest.fixture
def build_attention(monkeypatch):
    """DSAttention (with a real DSAIndexer) built from a config, on the CPU or on CUDA."""
    from megatron.core.models.common.embeddings import rotary_pos_embedding

    def _build(config, layer_number=1, module=dsa, seed=1234, device="cpu"):
        torch.manual_seed(seed)
        linear = ModuleSpec(module=DuplicatedLinear)
        indexer = ModuleSpec(
            module=module.DSAIndexer,
            submodules=module.DSAIndexerSubmodules(
                linear_wq_b=linear,
                linear_wk=linear,
                k_norm=ModuleSpec(module=WrappedTorchNorm),
                linear_weights_proj=linear,
            ),
        )
        if device == "cpu":
            # RotaryEmbedding asks torch.cuda.current_device() (building and running): the CPU.
            monkeypatch.setattr(
                rotary_pos_embedding.torch.cuda, "current_device", lambda: torch.device("cpu")
            )
        if not hasattr(config, "dsa_indexer_rotate_activation"):
            # v1 DSA always applies the Hadamard rotation (CUDA bf16 only): off, as 0.19's
            # dsa_indexer_rotate_activation=False turns it off.
            monkeypatch.setattr(module, "rotate_activation", lambda x: x)
        attention = module.DSAttention(
            config=config,
            submodules=module.DSAttentionSubmodules(indexer=indexer),
            layer_number=layer_number,
            attn_mask_type=AttnMaskType.causal,
            attention_type="self",
            pg_collection=SimpleNamespace(tp=SingleRankGroup(), cp=SingleRankGroup()),
        )
        return attention.to(device)

    return _build


@pytest.fixture
def attention_inputs():
    """Random inputs for DSAttention.forward (non-absorbed layout) for a config."""

    def _inputs(config, seq_len=12, batch=2, seed=7, requires_grad=False):
        generator = torch.Generator().manual_seed(seed)
        heads = config.num_attention_heads
        qk_dim = config.qk_head_dim + config.qk_pos_emb_head_dim

        def rand(*shape):
            return torch.randn(*shape, generator=generator).requires_grad_(requires_grad)

        return dict(
            query=rand(seq_len, batch, heads, qk_dim),
            key=rand(seq_len, batch, heads, qk_dim),
            value=rand(seq_len, batch, heads, config.v_head_dim),
            x=rand(seq_len, batch, config.hidden_size),
            qr=rand(seq_len, batch, config.q_lora_rank),
            attention_mask=None,
            attn_mask_type=AttnMaskType.causal,
        )

    return _inputs


@pytest.fixture
def captured_topk(monkeypatch):
    """Record the top-k indices each DSAttention forward hands to sparse attention."""
    seen = []
    if hasattr(dsa, "_run_sparse_attention"):  # 0.19+
        original = dsa._run_sparse_attention

        def _record(**kwargs):
            seen.append(kwargs["topk_indices"].detach().clone())
            return original(**kwargs)

        monkeypatch.setattr(dsa, "_run_sparse_attention", _record)
        return seen
    original = dsa.unfused_dsa_fn  # v1 DSA: (query, key, value, topk_indices, softmax_scale)

    def _record_v1(query, key, value, topk_indices, *args, **kwargs):
        seen.append(topk_indices.detach().clone())
        return original(query, key, value, topk_indices, *args, **kwargs)

    monkeypatch.setattr(dsa, "unfused_dsa_fn", _record_v1)
    return seen


@pytest.fixture
def feed_indexer(monkeypatch):
    """Make a DSAIndexer score with the given q [sq, b, h, d], k [sk, b, d] and weights."""

    def _feed(indexer, q, k, weights):
        if hasattr(indexer, "forward_before_topk"):  # 0.17+
            monkeypatch.setattr(indexer, "forward_before_topk", lambda *_: (q, k, weights))
            return
        # 0.16 computes them inside forward_with_scores: its rotation hands out q, then k,
        # and its weight projection the weights before upstream's scaling, which must undo
        # exactly (powers of two, as make_config's 4 heads of 16 dims give).
        rotated = itertools.cycle([q, k])
        monkeypatch.setattr(dsa, "rotate_activation", lambda _x: next(rotated))
        scale = indexer.index_n_heads**-0.5 * indexer.softmax_scale
        raw = weights / scale
        assert torch.equal(raw * (indexer.index_n_heads**-0.5) * indexer.softmax_scale, weights)
        monkeypatch.setattr(indexer.linear_weights_proj, "forward", lambda _x: (raw, None))

    return _feed


@pytest.fixture
def fused_kernels_that_raise(monkeypatch):
    """Every upstream path that selects its own top-k, replaced by a raising function.

    0.19+: the fused DSA kernels, pretended configured. v1 DSA has none; there upstream's
    dense top-k-and-loss path (FusedDSAIndexerLoss's naive forward and backward, and the
    dense compute_dsa_indexer_loss) stands in for them.
    """

    def _raise(name):
        def kernel(*_args, **_kwargs):
            raise AssertionError(f"internal top-k kernel {name} must not run")

        return kernel

    try:
        from megatron.core.transformer.experimental_attention_variant import dsa_kernels
    except ImportError:  # v1 DSA
        for name in ("fwd_fused_indexer_loss_naive", "bwd_fused_indexer_loss_naive"):
            monkeypatch.setattr(dsa, name, _raise(name), raising=False)
        monkeypatch.setattr(dsa, "compute_dsa_indexer_loss", _raise("compute_dsa_indexer_loss"))
        return
    monkeypatch.setattr(dsa_kernels, "use_fused_dsa_kernels", lambda config: True)
    for name in ("run_fused_dsa_attention", "run_fused_qk_topk", "run_fused_qk_topk_with_loss"):
        monkeypatch.setattr(dsa_kernels, name, _raise(name))
    # Sparse attention itself may stay fused; here it declines, so the PyTorch path runs.
    monkeypatch.setattr(dsa_kernels, "run_fused_absorbed_sparse_attention", lambda *a, **k: None)


@pytest.fixture(scope="session")
def upstream_dsa() -> ModuleType:
    """Upstream's unpatched dsa.py, loaded from the base commit of this patched tree.

    The base is the parent of the commit that laid the dsa-forkkit overlay.
    """
    tree = Path(dsa.__file__).resolve().parents[4]
    log = subprocess.run(
        ["git", "-C", str(tree), "log", "--format=%H %s", "HEAD"],
        capture_output=True,
        text=True,
    )
    overlay = [line.split()[0] for line in log.stdout.splitlines() if OVERLAY_SUBJECT in line]
    if log.returncode != 0 or not overlay:
        pytest.skip("not a tree made by `rebaser apply`: no unpatched upstream to compare with")
    source = subprocess.run(
        ["git", "-C", str(tree), "show", f"{overlay[0]}^:{DSA_PATH}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "dsa_topk" not in source, "the base commit is already patched"
    spec = importlib.util.spec_from_loader("upstream_unpatched_dsa", loader=None)
    module = importlib.util.module_from_spec(spec)
    exec(compile(source, f"upstream:{DSA_PATH}", "exec"), module.__dict__)
    return module
