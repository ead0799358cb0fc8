"""What every torchtitan driver shares: pointing torchtitan at the CPU, the
batches of a step and the step itself (torchtitan's loss, normalized by the
global token count as its trainer does), and FSDP2's reductions on gloo.

A driver's training subclasses :class:`TitanTraining` and builds
``self.model``, ``self.loss_fn``, ``self.optimizer`` and ``self.dims``
through torchtitan's own code; it may override :meth:`prepare_inputs` (what
torchtitan's trainer does to a batch before the forward) and
:meth:`step_context` (what it wraps the forward and backward in).
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, ContextManager

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule

from .cases import missing
from .runs import ModelState, local

AVAILABLE = not missing("torchtitan")

if AVAILABLE:
    import torchtitan.tools.utils as titan_utils
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed import utils as titan_dist
    from torchtitan.distributed.fsdp import disable_fsdp_gradient_division


def require() -> None:
    if not AVAILABLE:
        raise ModuleNotFoundError("torchtitan is not installed: pip install 'dynamo-dist[clients]'")


def world_device() -> str:
    """Where this world's tensors live: its ranks' GPUs in an NCCL world,
    else the CPU."""
    return "cuda" if dist.get_backend() == "nccl" else "cpu"


def use_cpu() -> None:
    """Point torchtitan's device choice (made when each of its modules was
    imported) at the CPU."""
    for name, module in list(sys.modules.items()):
        if name.startswith("torchtitan") and getattr(module, "device_type", None) == "cuda":
            module.device_type = "cpu"
            module.device_module = torch.cpu
    titan_utils.device_type, titan_utils.device_module = "cpu", torch.cpu


def sum_reductions(model: torch.nn.Module) -> None:
    """FSDP2 reduces with a plain SUM (its default with a divide factor of 1
    is PREMUL_SUM, which gloo lacks); torchtitan scales the loss instead."""
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_force_sum_reduction_for_comms(True)


class TitanTraining(ModelState):
    """One build of a torchtitan model on this rank (``self.model``,
    ``self.loss_fn``, ``self.optimizer``, ``self.dims``, ``self.vocab_size``,
    ``self.case`` with ``local_batch_size`` and ``seq_len``), trained one
    batch per step."""

    model: torch.nn.Module
    loss_fn: Any
    optimizer: torch.optim.Optimizer
    dims: Any  # torchtitan's ParallelDims
    vocab_size: int
    case: Any

    @property
    def device(self) -> str:
        return world_device()

    def build_on_meta(self, model_config: Any, config: Any, parallelism: Any, world_size: int,
                      spmd_backend: str) -> torch.nn.Module:
        """Build this rank's mesh (``self.dims``) and ``model_config``'s model on
        the meta device, as torchtitan's trainer does before parallelizing."""
        self.dims = ParallelDims.from_config(parallelism, world_size)
        self.dims.build_mesh()
        titan_dist.set_spmd_backend(spmd_backend)
        model_config.update_from_config(config=config)
        self.vocab_size = model_config.vocab_size
        with torch.device("meta"):
            return model_config.build()

    def adopt(self, model: torch.nn.Module, config: Any, compile_config: Any, init: str = "init_states",
              reduce_by_sum: bool = True) -> None:
        """Make ``model`` (parallelized on the meta device) this build's: its
        gradients reduced by a plain sum (``reduce_by_sum``; gloo lacks
        FSDP's PREMUL_SUM), materialized on this rank's device and initialized
        (torchtitan's ``init``), then its loss and optimizer."""
        if reduce_by_sum:
            disable_fsdp_gradient_division(model)
            sum_reductions(model)
        model.to_empty(device=self.device)
        with torch.no_grad():
            getattr(model, init)(buffer_device=None)
        model.train()
        self.model = model
        self.loss_fn = config.loss.build(compile_config=compile_config)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)

    def batch(self, index: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Tokens for this rank's data-parallel slice: equal on the ranks of a
        slice (TP, CP, EP borrowed from them), different between slices and
        steps; and the data-parallel degree."""
        dp_degree, dp_rank = 1, 0
        if self.dims.dp_enabled:
            batch_mesh = self.dims.get_mesh("batch")
            dp_degree, dp_rank = batch_mesh.size(), batch_mesh.get_local_rank()
        generator = torch.Generator().manual_seed(1000 * index + dp_rank)
        tokens = torch.randint(0, self.vocab_size, (self.case.local_batch_size, self.case.seq_len + 1),
                               generator=generator)
        return tokens[:, :-1], tokens[:, 1:], dp_degree

    def prepare_inputs(self, inputs: torch.Tensor, labels: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
        """The model's inputs, labels and keyword arguments for a batch."""
        return inputs, labels, {}

    def step_context(self) -> ContextManager[Any]:
        return contextlib.nullcontext()

    def step(self, index: int) -> tuple[float, list[torch.Tensor]]:
        inputs, labels, dp_degree = self.batch(index)
        inputs, labels = inputs.to(self.device), labels.to(self.device)
        global_tokens = torch.tensor(labels.numel() * dp_degree, device=self.device)
        inputs, labels, extra = self.prepare_inputs(inputs, labels)
        self.optimizer.zero_grad(set_to_none=True)
        with self.step_context():
            pred = self.model(inputs, **extra)
            loss, _ = self.loss_fn(pred, labels, global_tokens)
            del pred
            loss.backward()
        grads = [local(p.grad).detach().clone() if p.grad is not None else torch.zeros(0)
                 for p in self.model.parameters()]
        self.optimizer.step()
        full = loss.full_tensor() if hasattr(loss, "full_tensor") else loss
        return float(full.detach()), grads
