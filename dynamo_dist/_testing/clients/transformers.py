"""Hugging Face transformers tensor parallelism on CPU ranks with gloo,
through transformers' own code: a tiny ``LlamaConfig`` model is saved once,
then every build loads it with ``from_pretrained(path,
distributed_config=DistributedConfig(tp_size=...))`` (transformers shards it
with its ``base_model_tp_plan`` onto DTensors) and, when compiled, the whole
model is ``torch.compile``d as users do; the loss is the model's own
(``labels=``).

``run_case(case)`` runs on every rank of an initialised world of
``case.tp_size`` ranks and returns one :class:`~.runs.RunResult` per mode.
"""

from __future__ import annotations

import shutil
import tempfile
from typing import Sequence

import torch
import torch.distributed as dist

from .cases import HFCase, missing
from .runs import MODES, RunResult, local, run_modes

AVAILABLE = not missing("transformers")

if AVAILABLE:
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.distributed import DistributedConfig

def require() -> None:
    if not AVAILABLE:
        raise ModuleNotFoundError(f"not installed: {', '.join(missing('transformers'))} (transformers' tensor "
                                  "parallelism needs accelerate): pip install 'dynamo-dist[clients]'")


class HFTraining:
    """One ``from_pretrained`` of the saved model, sharded, on this rank."""

    def __init__(self, case: HFCase, path: str, compiled: bool, backend: str = "aot_eager") -> None:
        self.case = case
        self.model = LlamaForCausalLM.from_pretrained(path, distributed_config=DistributedConfig(tp_size=case.tp_size),
                                                      dtype=torch.float32)
        self.model.train()
        self.forward = torch.compile(self.model, backend=backend) if compiled else self.model
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3, foreach=False)

    def state(self) -> list[torch.Tensor]:
        return [local(t) for t in (*self.model.parameters(), *self.model.buffers())]

    def load(self, state: Sequence[torch.Tensor]) -> None:
        with torch.no_grad():
            for mine, theirs in zip(self.state(), state, strict=True):
                mine.copy_(theirs)

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


def llama_config(case: HFCase) -> "LlamaConfig":
    return LlamaConfig(vocab_size=case.vocab, hidden_size=case.hidden, intermediate_size=case.intermediate,
                       num_hidden_layers=case.layers, num_attention_heads=case.heads,
                       num_key_value_heads=case.kv_heads, max_position_embeddings=4 * case.seq_len)


def save_model(case: HFCase, path: str) -> None:
    """The model's weights and config, written by rank 0 for every rank to load."""
    if dist.get_rank() == 0:
        torch.manual_seed(0)
        LlamaForCausalLM(llama_config(case)).save_pretrained(path)
    dist.barrier()


def run_case(case: HFCase, steps: int = 3, modes: Sequence[str] = MODES, backend: str = "aot_eager",
             path: str | None = None, explain: bool = True) -> list[RunResult]:
    """Train ``case`` ``steps`` steps in each mode on this rank (call on every
    rank of a world of ``case.world_size``). ``path``: a directory every rank
    sees, for the saved model (by default a temporary one, which assumes the
    ranks share a file system, as on one machine); ``explain``: see
    :func:`~.runs.run_modes`."""
    require()
    own = path is None
    if own:
        made = [tempfile.mkdtemp(prefix="dynamo_dist_hf_") if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(made, src=0)
        path = made[0]
    try:
        save_model(case, path)
        return run_modes(case.id, lambda compiled, backend: HFTraining(case, path, compiled, backend),
                         steps, modes, backend, explain)
    finally:
        dist.barrier()
        if own and dist.get_rank() == 0:
            shutil.rmtree(path, ignore_errors=True)
