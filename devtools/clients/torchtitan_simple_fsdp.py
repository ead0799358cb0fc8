"""torchtitan's SimpleFSDP (``experiments/graph_trainer``) trained on CPU
ranks with gloo, through graph_trainer's own code: its llama3 model
registry and model class, its ``parallelize_llama`` (tensor parallelism
when enabled, then ``data_parallel``: every parameter a ``Shard(0)`` DTensor
on the FSDP mesh, or a 2-D DTensor over FSDP x TP, all-gathered by
``redistribute`` inside the model's forward), and its ``jit`` compile mode
(``model.compile(fullgraph=True)`` on the whole model, with the backend
from ``get_compile_backend_with_passes``).

As in the llama3 driver: torchtitan's device is the CPU (graph_trainer's
own SimpleFSDP test patches ``parallel_dims.device_type`` the same way),
the attention is its SDPA module, the parameters and reductions stay
float32 (SimpleFSDP would cast them to bfloat16 in the redistribute), and
the loss (compiled too) is normalized by the global token count.
"""

from __future__ import annotations

import warnings


from .cases import PARALLELISMS, SimpleFSDPCase
from .torchtitan_common import AVAILABLE, TitanTraining

if AVAILABLE:
    from torchtitan.components.loss import CrossEntropyLoss
    from torchtitan.config import ParallelismConfig, TrainingConfig
    from torchtitan.experiments.graph_trainer.configs import GraphTrainerCompileConfig
    from torchtitan.experiments.graph_trainer.llama3 import model_registry
    from torchtitan.experiments.graph_trainer.llama3.parallelize import parallelize_llama
    from torchtitan.trainer import Trainer

SPMD_BACKEND = "partial_dtensor"  # what graph_trainer sets (to_graph_trainer_config)


class SimpleFSDPTraining(TitanTraining):
    """One build of graph_trainer's llama3 with SimpleFSDP, on this rank."""

    def __init__(self, case: SimpleFSDPCase, compiled: bool, world_size: int, backend: str = "aot_eager") -> None:
        fsdp, tp = PARALLELISMS[case.parallelism]
        self.case = case
        parallelism = ParallelismConfig(tensor_parallel_degree=tp, data_parallel_shard_degree=fsdp,
                                        spmd_backend=SPMD_BACKEND)
        training = TrainingConfig(seq_len=case.seq_len, local_batch_size=case.local_batch_size,
                                  mixed_precision_param="float32", mixed_precision_reduce="float32")
        model_config = model_registry("debugmodel", attn_backend="sdpa").model
        model_config.layers = model_config.layers[: case.n_layers]
        compile_config = GraphTrainerCompileConfig(enable=compiled, mode="jit", backend=backend)
        config = Trainer.Config(parallelism=parallelism, training=training,
                                loss=CrossEntropyLoss.Config(global_vocab_size=model_config.vocab_size))
        model = self.build_on_meta(model_config, config, parallelism, world_size, SPMD_BACKEND)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # graph_trainer deprecates jit (Dynamo) for make_fx tracing
            model = parallelize_llama(model, parallel_dims=self.dims, training=training, parallelism=parallelism,
                                      compile_config=compile_config, ac_config=None, dump_folder="")
        self.adopt(model, config, compile_config, reduce_by_sum=False)
