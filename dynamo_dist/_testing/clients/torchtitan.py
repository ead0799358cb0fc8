"""torchtitan's llama3 trained on CPU ranks with gloo, through torchtitan's
own code: its model config and model, ``ParallelDims`` and meshes,
``parallelize_llama`` (tensor parallelism, activation checkpointing,
per-block ``torch.compile(fullgraph=True)``, FSDP2), its loss and its
input preparation for each ``parallelism.spmd_backend``.

What is changed for a CPU gloo world, and why:

- ``device_type`` is ``"cpu"`` (torchtitan picks ``"cuda"`` when no
  accelerator is found, and builds its meshes on it);
- the attention is torchtitan's SDPA module (its language-model configs use
  flex attention, which has no CPU backward);
- the debugmodel is cut to ``n_layers`` blocks and parameters stay float32,
  so compiled and eager runs can be compared closely;
- FSDP2 reduces gradients with a plain sum (after torchtitan's
  ``disable_fsdp_gradient_division`` it would use PREMUL_SUM, which gloo
  lacks); the loss is normalized by the global token count, as torchtitan's
  trainer does.

``run_case(case)`` runs on every rank of an initialised world of
``case.world_size`` ranks and returns one :class:`~.runs.RunResult` per mode.
"""

from __future__ import annotations

import sys
from typing import Sequence

import torch
from torch.distributed.fsdp import FSDPModule

from .cases import PARALLELISMS, TitanCase, missing
from .runs import MODES, RunResult, local, run_modes

AVAILABLE = not missing("torchtitan")

if AVAILABLE:
    import torchtitan.tools.utils as titan_utils
    from torchtitan.components.loss import CrossEntropyLoss
    from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
    from torchtitan.distributed import ParallelDims, full_dtensor
    from torchtitan.distributed import utils as titan_dist
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
    from torchtitan.distributed.fsdp import disable_fsdp_gradient_division
    from torchtitan.distributed.spmd_types import annotate_input_spmd_types
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.llama3 import llama3_configs, parallelize_llama
    from torchtitan.trainer import Trainer

def require() -> None:
    if not AVAILABLE:
        raise ModuleNotFoundError("torchtitan is not installed: pip install 'dynamo-dist[clients]'")


def use_cpu() -> None:
    """Point torchtitan's device choice (made when it was imported) at the CPU."""
    for name, module in list(sys.modules.items()):
        if name.startswith("torchtitan") and getattr(module, "device_type", None) == "cuda":
            module.device_type = "cpu"
            module.device_module = torch.cpu
    titan_utils.device_type, titan_utils.device_module = "cpu", torch.cpu


class TitanTraining:
    """One build of the model for a case, on this rank."""

    def __init__(self, case: TitanCase, compiled: bool, world_size: int, backend: str = "aot_eager") -> None:
        fsdp, tp = PARALLELISMS[case.parallelism]
        self.case = case
        self.parallelism = ParallelismConfig(tensor_parallel_degree=tp, data_parallel_shard_degree=fsdp,
                                             spmd_backend=case.spmd_backend)
        training = TrainingConfig(seq_len=case.seq_len, local_batch_size=case.local_batch_size,
                                  mixed_precision_param="float32")
        model_config = llama3_configs["debugmodel"](attn_backend="varlen")
        model_config.layers = model_config.layers[: case.n_layers]
        for layer in model_config.layers:
            layer.attention.inner_attention = ScaledDotProductAttention.Config()
        components = ["model", "loss"] if case.compile_loss else ["model"]
        compile_config = CompileConfig(enable=compiled, backend=backend, components=components)
        loss = CrossEntropyLoss.Config(global_vocab_size=model_config.vocab_size)  # spmd_types' TP loss needs it
        config = Trainer.Config(parallelism=self.parallelism, training=training, compile=compile_config,
                                loss=loss, activation_checkpoint=_ac_config(case.ac))
        self.dims = ParallelDims.from_config(self.parallelism, world_size)
        self.dims.build_mesh()
        titan_dist.set_spmd_backend(case.spmd_backend)
        model_config.update_from_config(config=config)
        self.vocab_size = model_config.vocab_size
        with torch.device("meta"):
            model = model_config.build()
        model = parallelize_llama(model, parallel_dims=self.dims, training=training, parallelism=self.parallelism,
                                  compile_config=compile_config, ac_config=config.activation_checkpoint,
                                  dump_folder="")
        disable_fsdp_gradient_division(model)
        _sum_reductions(model)
        model.to_empty(device="cpu")
        with torch.no_grad():
            model.init_weights(buffer_device=None)
        model.train()
        self.model = model
        self.loss_fn = config.loss.build(compile_config=compile_config)
        self.context = titan_dist.get_spmd_context(parallel_dims=self.dims)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)

    def state(self) -> list[torch.Tensor]:
        return [local(t) for t in (*self.model.parameters(), *self.model.buffers())]

    def load(self, state: Sequence[torch.Tensor]) -> None:
        with torch.no_grad():
            for mine, theirs in zip(self.state(), state, strict=True):
                mine.copy_(theirs)

    def _batch(self, index: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Tokens for this rank's data-parallel slice: equal on the TP ranks of
        a slice, different between slices and steps."""
        dp_degree, dp_rank = 1, 0
        if self.dims.dp_enabled:
            batch_mesh = self.dims.get_mesh("batch")
            dp_degree, dp_rank = batch_mesh.size(), batch_mesh.get_local_rank()
        generator = torch.Generator().manual_seed(1000 * index + dp_rank)
        tokens = torch.randint(0, self.vocab_size, (self.case.local_batch_size, self.case.seq_len + 1),
                               generator=generator)
        return tokens[:, :-1], tokens[:, 1:], dp_degree

    def step(self, index: int) -> tuple[float, list[torch.Tensor]]:
        inputs, labels, dp_degree = self._batch(index)
        global_tokens = torch.tensor(labels.numel() * dp_degree)
        extra: dict = {}
        # As torchtitan's trainer prepares inputs for each backend (post_dataloading_process).
        if self.case.spmd_backend == "full_dtensor":
            inputs, labels, extra = full_dtensor.parallelize_inputs(self.dims, inputs, labels, extra)
        elif self.case.spmd_backend == "spmd_types":
            inputs, labels, extra = annotate_input_spmd_types(self.dims, inputs, labels, extra)
        self.optimizer.zero_grad(set_to_none=True)
        with self.context():
            pred = self.model(inputs, **extra)
            loss, _ = self.loss_fn(pred, labels, global_tokens)
            del pred
            loss.backward()
        grads = [local(p.grad).detach().clone() if p.grad is not None else torch.zeros(0)
                 for p in self.model.parameters()]
        self.optimizer.step()
        full = loss.full_tensor() if hasattr(loss, "full_tensor") else loss
        return float(full.detach()), grads


def _sum_reductions(model: torch.nn.Module) -> None:
    """FSDP2 reduces with a plain SUM (its default with a divide factor of 1
    is PREMUL_SUM, which gloo lacks); torchtitan scales the loss instead."""
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_force_sum_reduction_for_comms(True)


def _ac_config(ac: str):
    return {"selective": lambda: SelectiveAC.Config(), "full": lambda: FullAC.Config(), "none": lambda: None}[ac]()


def run_case(case: TitanCase, steps: int = 3, modes: Sequence[str] = MODES, backend: str = "aot_eager",
             explain: bool = True) -> list[RunResult]:
    """Train ``case`` ``steps`` steps in each mode on this rank (call on
    every rank of a world of ``case.world_size``); ``explain``: see
    :func:`~.runs.run_modes`."""
    require()
    import torch.distributed as dist

    use_cpu()
    world_size = dist.get_world_size()
    return run_modes(case.id, lambda compiled, backend: TitanTraining(case, compiled, world_size, backend),
                     steps, modes, backend, explain)


def run_cases(cases: Sequence[TitanCase], steps: int = 3, modes: Sequence[str] = MODES,
              backend: str = "aot_eager", explain: bool = True) -> list[RunResult]:
    """Several cases in one world (spawning and importing are the slow part)."""
    return [r for case in cases for r in run_case(case, steps, modes, backend, explain)]
