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
``case.world_size`` ranks and returns one :class:`~.runs.RunResult` per mode;
it also runs the other torchtitan drivers' cases (:data:`TRAININGS`:
SimpleFSDP, expert parallelism, context parallelism), so one world can
train all of them.
"""

from __future__ import annotations

from typing import Sequence

import torch.distributed as dist

from .cases import CPCase, MoECase, PARALLELISMS, SimpleFSDPCase, TitanCase
from .runs import MODES, RunResult, run_modes
from .torchtitan_common import AVAILABLE, TitanTraining, require, use_cpu, world_device
from .torchtitan_cp import CPTraining
from .torchtitan_moe import MoETraining
from .torchtitan_simple_fsdp import SimpleFSDPTraining

if AVAILABLE:
    from torchtitan.components.loss import CrossEntropyLoss
    from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
    from torchtitan.distributed import full_dtensor
    from torchtitan.distributed import utils as titan_dist
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
    from torchtitan.distributed.spmd_types import annotate_input_spmd_types
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.llama3 import llama3_configs, parallelize_llama
    from torchtitan.trainer import Trainer


class Llama3Training(TitanTraining):
    """One build of llama3's debugmodel for a case, on this rank."""

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
        model = self.build_on_meta(model_config, config, self.parallelism, world_size, case.spmd_backend)
        model = parallelize_llama(model, parallel_dims=self.dims, training=training, parallelism=self.parallelism,
                                  compile_config=compile_config, ac_config=config.activation_checkpoint,
                                  dump_folder="")
        self.adopt(model, config, compile_config, init="init_weights")
        self.context = titan_dist.get_spmd_context(parallel_dims=self.dims, spmd_typechecking=case.spmd_typechecking)

    def prepare_inputs(self, inputs, labels):
        # As torchtitan's trainer prepares inputs for each backend (post_dataloading_process).
        extra: dict = {}
        if self.case.spmd_backend == "full_dtensor":
            return full_dtensor.parallelize_inputs(self.dims, inputs, labels, extra)
        if self.case.spmd_backend == "spmd_types":
            return annotate_input_spmd_types(self.dims, inputs, labels, extra)
        return inputs, labels, extra

    def step_context(self):
        return self.context()


def _ac_config(ac: str):
    return {"selective": lambda: SelectiveAC.Config(), "full": lambda: FullAC.Config(), "none": lambda: None}[ac]()


# The training each kind of case builds.
TRAININGS = {TitanCase: Llama3Training, SimpleFSDPCase: SimpleFSDPTraining, MoECase: MoETraining,
             CPCase: CPTraining}


def run_case(case, steps: int = 3, modes: Sequence[str] = MODES, backend: str = "aot_eager",
             explain: bool = True) -> list[RunResult]:
    """Train ``case`` (a key of :data:`TRAININGS`) ``steps`` steps in each
    mode on this rank (call on every rank of a world of
    ``case.world_size``; gloo on CPUs, or NCCL on GPUs for a ``CPCase``);
    ``explain``: see :func:`~.runs.run_modes`."""
    require()
    if world_device() == "cpu":
        use_cpu()
    world_size = dist.get_world_size()
    training = TRAININGS[type(case)]
    return run_modes(case.id, lambda compiled, backend: training(case, compiled, world_size, backend),
                     steps, modes, backend, explain)


def run_cases(cases: Sequence, steps: int = 3, modes: Sequence[str] = MODES,
              backend: str = "aot_eager", explain: bool = True) -> list[RunResult]:
    """Several cases in one world (spawning and importing are the slow part)."""
    return [r for case in cases for r in run_case(case, steps, modes, backend, explain)]
