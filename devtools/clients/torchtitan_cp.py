"""torchtitan's context parallelism trained through torchtitan's own code:
the llama3 debugmodel with its SDPA attention, ``ParallelDims`` with
``context_parallel_degree``, ``parallelize_llama`` (``apply_cp_to_forward``
wraps each block's attention so that q, k and v enter it as ``Shard(1)``
DTensors made by ``DTensor.from_local`` on the CP mesh, inside the compiled
block; per-block ``torch.compile(fullgraph=True)``; FSDP2 over the CP
ranks), and the trainer's ``prepare_context_parallel_input`` (tokens,
labels and positions sharded along the sequence).

Two attentions (``CPCase.attention``):

- ``ring``, torchtitan's default: SDPA's flash, efficient or cuDNN kernel,
  which the context-parallel dispatcher turns into ring attention, with the
  head-tail load balancer. On a CPU world it fails eagerly
  (``aten._scaled_dot_product_flash_attention_for_cpu.default`` has no
  sharding strategy); it runs in an NCCL world, on GPUs.
- ``math``: SDPA's math backend, which DTensor decomposes into its own
  ops (it all-gathers what it needs); it runs on CPU, inside
  ``implicit_replication()`` (its causal mask is a plain tensor), with no
  load balancer (the mask is built in global sequence order, which the
  head-tail reordering would break).

On a gloo world: the CPU, float32 parameters, FSDP2 reduces with a plain
sum, the loss normalized by the global token count (as the llama3 driver).
"""

from __future__ import annotations

import contextlib

import torch
from torch.distributed.tensor.experimental import implicit_replication
from torch.nn.attention import SDPBackend

from .cases import CPCase
from .torchtitan_common import AVAILABLE, TitanTraining

if AVAILABLE:
    from torchtitan.components.loss import CrossEntropyLoss
    from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
    from torchtitan.distributed.context_parallel import prepare_context_parallel_input
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.llama3 import llama3_configs, parallelize_llama
    from torchtitan.trainer import Trainer

SPMD_BACKEND = "partial_dtensor"  # the backend apply_cp_to_forward is for
LOAD_BALANCER = {"ring": "headtail", "math": None}  # torchtitan's default; see the module's docstring


class CPTraining(TitanTraining):
    """One build of llama3's debugmodel with context parallelism, on this rank."""

    def __init__(self, case: CPCase, compiled: bool, world_size: int, backend: str = "aot_eager") -> None:
        self.case = case
        self.parallelism = ParallelismConfig(context_parallel_degree=case.cp, spmd_backend=SPMD_BACKEND,
                                             context_parallel_load_balancer=LOAD_BALANCER[case.attention])
        training = TrainingConfig(seq_len=case.seq_len, local_batch_size=case.local_batch_size,
                                  mixed_precision_param="float32", mixed_precision_reduce="float32")
        model_config = llama3_configs["debugmodel"](attn_backend="varlen")
        model_config.layers = model_config.layers[: case.n_layers]
        for layer in model_config.layers:
            layer.attention.inner_attention = ScaledDotProductAttention.Config()
        compile_config = CompileConfig(enable=compiled, backend=backend)
        config = Trainer.Config(parallelism=self.parallelism, training=training, compile=compile_config,
                                loss=CrossEntropyLoss.Config(global_vocab_size=model_config.vocab_size),
                                activation_checkpoint=None)
        model = self.build_on_meta(model_config, config, self.parallelism, world_size, SPMD_BACKEND)
        if case.attention == "math":
            for block in model.layers.values():
                block.attention.inner_attention.sdpa_backends = [SDPBackend.MATH]
        model = parallelize_llama(model, parallel_dims=self.dims, training=training, parallelism=self.parallelism,
                                  compile_config=compile_config, ac_config=None, dump_folder="")
        self.adopt(model, config, compile_config)

    def prepare_inputs(self, inputs, labels):
        # As torchtitan's trainer does (post_dataloading_process): positions
        # for RoPE, then everything sharded along the sequence.
        positions = torch.arange(inputs.shape[1], device=self.device).expand(inputs.shape)
        return prepare_context_parallel_input(
            inputs, labels, {"positions": positions}, self.dims.get_mesh("cp"), torch.device(self.device),
            self.parallelism.context_parallel_load_balancer)

    def step_context(self):
        return implicit_replication() if self.case.attention == "math" else contextlib.nullcontext()
