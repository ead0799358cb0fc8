"""torchtitan's mixture-of-experts with expert parallelism, trained on CPU
ranks with gloo through torchtitan's own code: the deepseek_v3 debugmodel
config and model, ``ParallelDims`` with ``expert_parallel_degree``
(the EP mesh borrowed from the FSDP ranks), ``parallelize_deepseekv3``
(``model.parallelize``: the routed experts a ``Shard(0)`` DTensor on the EP
mesh and the token dispatcher wired to it; per-block
``torch.compile(fullgraph=True)``; FSDP2 over the dense and the
expert-data-parallel meshes). Each MoE block exchanges its token counts and
tokens with ``all_to_all_single`` on the EP group (the split sizes are
data-dependent: torchtitan sets ``capture_scalar_outputs``).

As in the llama3 driver: the device is the CPU, the attention is
torchtitan's SDPA module, the parameters stay float32 (the grouped experts
compute in bfloat16 by design, the same in every mode), FSDP2 reduces with a
plain sum and the loss is normalized by the global token count.
"""

from __future__ import annotations


from .cases import MoECase
from .torchtitan_common import AVAILABLE, TitanTraining

if AVAILABLE:
    from torchtitan.components.loss import CrossEntropyLoss
    from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.deepseek_v3 import deepseekv3_configs, parallelize_deepseekv3
    from torchtitan.trainer import Trainer

SPMD_BACKEND = "partial_dtensor"  # torchtitan's EP token dispatch on DTensor-parallelized experts


class MoETraining(TitanTraining):
    """One build of deepseek_v3's debugmodel with expert parallelism, on this rank."""

    def __init__(self, case: MoECase, compiled: bool, world_size: int, backend: str = "aot_eager") -> None:
        self.case = case
        parallelism = ParallelismConfig(expert_parallel_degree=case.ep, data_parallel_shard_degree=world_size,
                                        spmd_backend=SPMD_BACKEND)
        training = TrainingConfig(seq_len=case.seq_len, local_batch_size=case.local_batch_size,
                                  mixed_precision_param="float32", mixed_precision_reduce="float32")
        model_config = deepseekv3_configs["debugmodel"](attn_backend="flex", moe_comm_backend="standard")
        model_config.layers = model_config.layers[: case.n_layers]
        for layer in model_config.layers:
            layer.attention.inner_attention = ScaledDotProductAttention.Config()
        compile_config = CompileConfig(enable=compiled, backend=backend)
        config = Trainer.Config(parallelism=parallelism, training=training, compile=compile_config,
                                loss=CrossEntropyLoss.Config(global_vocab_size=model_config.vocab_size),
                                activation_checkpoint=None)
        model = self.build_on_meta(model_config, config, parallelism, world_size, SPMD_BACKEND)
        model = parallelize_deepseekv3(model, parallel_dims=self.dims, training=training, parallelism=parallelism,
                                       compile_config=compile_config, ac_config=None, dump_folder="")
        self.adopt(model, config, compile_config)
