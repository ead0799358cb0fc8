"""Hugging Face transformers tensor parallelism on CPU ranks with gloo,
through transformers' own code: a tiny model of the case's family (Llama,
or the mixture-of-experts Qwen3-MoE and Mixtral) is saved once, then every
build loads it with ``from_pretrained(path,
distributed_config=DistributedConfig(tp_size=...))`` (transformers shards it
with its ``base_model_tp_plan`` onto DTensors; the experts with its
``moe_tp_experts`` style: each rank holds a slice of every expert and the
partial outputs are all-reduced) and, when compiled, the whole model is
``torch.compile``d as users do; the loss is the model's own (``labels=``).

``run_case(case)`` runs on every rank of an initialised world of
``case.tp_size`` ranks and returns one :class:`~.runs.RunResult` per mode;
``run_cases`` runs several in one world. ``precompile``: a directory under
which each rank keeps its own compile caches, whose Dynamo entries (torch's
precompile, on in a process started with ``TORCH_CACHING_PRECOMPILE=1``)
are saved there after the run: a later world given the same directory
restarts from them.
"""

from __future__ import annotations

import shutil
import tempfile
from typing import Sequence

import torch
import torch.distributed as dist

from .cases import HFCase, missing
from .runs import MODES, ModelState, RunResult, local, rank_caches, run_modes

AVAILABLE = not missing("transformers")

if AVAILABLE:
    from transformers import (LlamaConfig, LlamaForCausalLM, MixtralConfig, MixtralForCausalLM, Qwen3MoeConfig,
                              Qwen3MoeForCausalLM)
    from transformers.distributed import DistributedConfig

def require() -> None:
    if not AVAILABLE:
        raise ModuleNotFoundError(f"not installed: {', '.join(missing('transformers'))} (transformers' tensor "
                                  "parallelism needs accelerate): pip install 'dynamo-dist[clients]'")


class HFTraining(ModelState):
    """One ``from_pretrained`` of the saved model, sharded, on this rank."""

    def __init__(self, case: HFCase, path: str, compiled: bool, backend: str = "aot_eager") -> None:
        self.case = case
        model_class = model_classes(case.family)[1]
        self.model = model_class.from_pretrained(path, distributed_config=DistributedConfig(tp_size=case.tp_size),
                                                 dtype=torch.float32)
        self.model.train()
        self.forward = torch.compile(self.model, backend=backend) if compiled else self.model
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3, foreach=False)

    def step(self, index: int) -> tuple[float, list[torch.Tensor]]:
        # Every TP rank sees the same tokens.
        generator = torch.Generator().manual_seed(1000 + index)
        ids = torch.randint(0, self.case.vocab, (self.case.batch, self.case.seq_len), generator=generator)
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.forward(input_ids=ids, labels=ids).loss
        loss.backward()
        grads = [local(p.grad).detach().clone() if p.grad is not None else torch.zeros(0)
                 for p in self.model.parameters()]
        self.optimizer.step()
        return float(loss.detach()), grads


def model_classes(family: str) -> tuple[type, type]:
    """The config and causal-LM classes of a family of :data:`~.cases.HF_FAMILIES`."""
    return {"llama": (LlamaConfig, LlamaForCausalLM), "qwen3_moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM),
            "mixtral": (MixtralConfig, MixtralForCausalLM)}[family]


def model_config(case: HFCase):
    common = dict(vocab_size=case.vocab, hidden_size=case.hidden, num_hidden_layers=case.layers,
                  num_attention_heads=case.heads, num_key_value_heads=case.kv_heads,
                  head_dim=case.hidden // case.heads, max_position_embeddings=4 * case.seq_len)
    experts = dict(num_experts_per_tok=case.experts_per_token)
    family = {
        "llama": dict(intermediate_size=case.intermediate),
        # Qwen3-MoE: every layer sparse; its dense MLP width is unused then.
        "qwen3_moe": dict(experts, intermediate_size=case.intermediate, num_experts=case.experts,
                          moe_intermediate_size=case.expert_intermediate),
        # Mixtral: intermediate_size is each expert's width.
        "mixtral": dict(experts, intermediate_size=case.expert_intermediate, num_local_experts=case.experts),
    }[case.family]
    return model_classes(case.family)[0](**common, **family)


def save_model(case: HFCase, path: str) -> None:
    """The model's weights and config, written by rank 0 for every rank to load."""
    if dist.get_rank() == 0:
        torch.manual_seed(0)
        model_classes(case.family)[1](model_config(case)).save_pretrained(path)
    dist.barrier()


def run_case(case: HFCase, steps: int = 3, modes: Sequence[str] = MODES, backend: str = "aot_eager",
             path: str | None = None, explain: bool = True, precompile: str | None = None) -> list[RunResult]:
    """Train ``case`` ``steps`` steps in each mode on this rank (call on every
    rank of a world of ``case.world_size``). ``path``: a directory every rank
    sees, for the saved model (by default a temporary one, which assumes the
    ranks share a file system, as on one machine); ``explain``: see
    :func:`~.runs.run_modes`; ``precompile``: see the module's doc."""
    require()
    own = path is None
    if own:
        made = [tempfile.mkdtemp(prefix="dynamo_dist_hf_") if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(made, src=0)
        path = made[0]
    try:
        save_model(case, path)
        with rank_caches(precompile):
            return run_modes(case.id, lambda compiled, backend: HFTraining(case, path, compiled, backend),
                             steps, modes, backend, explain)
    finally:
        dist.barrier()
        if own and dist.get_rank() == 0:
            shutil.rmtree(path, ignore_errors=True)


def run_cases(cases: Sequence[HFCase], steps: int = 3, modes: Sequence[str] = MODES,
              backend: str = "aot_eager", explain: bool = True, precompile: str | None = None) -> list[RunResult]:
    """Several cases in one world (spawning and importing are the slow part)."""
    return [r for case in cases for r in run_case(case, steps, modes, backend, explain=explain, precompile=precompile)]
