"""``with sdpa_kernel(...)`` in a compiled region (torchtitan's attention):
with the plugin the AOTAutograd cache stores and serves the graph, keyed by
the backends it names, so a changed backend list or priority flag misses;
stock bypasses it (``dynamo_dist/caching/sdpa.py`` says why caching it is sound).

One process, inductor: the first compile builds the C++ kernels into a fresh
cache dir (about 15 s on 2 cores); the others reuse them."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import dynamo_dist
from dynamo_dist._compat.caches import outcome_counts

MATH, FLASH = SDPBackend.MATH, SDPBackend.FLASH_ATTENTION


def attention_in(backends: list, set_priority: bool = True):
    def attend(q, k, v):
        with sdpa_kernel(backends, set_priority=set_priority):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    return attend


def aot_outcome(fn, inputs) -> tuple[str, torch.Tensor]:
    """Compile ``fn`` afresh (Dynamo reset), run forward and backward; the
    AOTAutograd cache's one outcome and the output."""
    torch._dynamo.reset()
    before = outcome_counts()["aot_autograd"]
    out = torch.compile(fn, backend="inductor", fullgraph=True)(*inputs)
    out.sum().backward()
    after = outcome_counts()["aot_autograd"]
    [outcome] = [o for o in after if after[o] != before[o]]
    return outcome, out.detach()


@pytest.fixture
def inputs():
    torch.manual_seed(0)
    return [torch.randn(1, 2, 8, 4, requires_grad=True) for _ in range(3)]


@pytest.mark.slow
def test_sdpa_kernel_region_caches_keyed_by_its_backends(tmp_path, monkeypatch, inputs):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    dynamo_dist.install()
    try:
        assert aot_outcome(attention_in([MATH]), inputs)[0] == "miss"  # stored, not bypassed
        outcome, out = aot_outcome(attention_in([MATH]), inputs)
        assert outcome == "hit"
        with sdpa_kernel([MATH], set_priority=True):
            assert torch.allclose(out, F.scaled_dot_product_attention(*inputs, is_causal=True), atol=1e-6)
        # What the key must tell apart: the backends listed, and whether they set the priority.
        assert aot_outcome(attention_in([FLASH, MATH]), inputs)[0] == "miss"
        assert aot_outcome(attention_in([MATH], set_priority=False), inputs)[0] == "miss"
    finally:
        dynamo_dist.uninstall()
    assert aot_outcome(attention_in([MATH]), inputs)[0] == "bypass"  # stock
