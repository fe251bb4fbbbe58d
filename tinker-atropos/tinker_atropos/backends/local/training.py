"""The local LoRA training client: Tinker's TrainingClient methods on torch + peft.

Gradients accumulate over forward_backward calls until optim_step, as on Tinker. Heavy calls
run in a worker thread so the caller's event loop (HTTP polling, signals) stays responsive.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model, set_peft_model_state_dict
from safetensors.torch import load_file
from tinker import types
from transformers import DynamicCache

from tinker_atropos.losses import loss_named
from tinker_atropos.losses.base import Loss
from tinker_atropos.run_files import CheckpointKind

from ..checkpoints import CheckpointStore
from .engine import BaseModel
from .heap import release_freed_memory
from .lora_merge import ADAPTER_FILE, merge_plain_lora
from .microbatches import activation_bytes, first_trained, plan
from .precision import compute_dtype, emulation_warning, float32_head, for_sampling, mixed
from .sampler import LocalSampler
from .shared_prompt import SharedPrompt
from .target_logprobs import fused_parts, target_logprobs

logger = logging.getLogger(__name__)

LORA_ALPHA = 32
OPTIMIZER_FILE = "optimizer.pt"


def lora_config(rank: int) -> LoraConfig:
    # "all-linear": every attention and MLP projection, never the output head.
    return LoraConfig(r=rank, lora_alpha=LORA_ALPHA, lora_dropout=0.0, target_modules="all-linear")


class LocalTrainingClient:
    """A TrainingBackend on this machine (CPU by default, CUDA when present)."""

    def __init__(
        self, base: BaseModel, rank: int, run_dir: Path, run_name: str, seed: int = 0, compute: str = "float32"
    ) -> None:
        self.base = base
        self.compute = compute
        self.autocast = compute_dtype(compute, base.device)  # None: float32 throughout
        slow = emulation_warning(compute, base.device)
        if slow is not None:
            logger.warning(slow)
        self.base_model = base.name
        self.seed = seed
        self.rank = rank
        self.device = base.device
        self.checkpoints = CheckpointStore(run_dir, run_name)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)  # LoRA A matrices are random: same seed, same start
            model = base.copy_model()
            if self.autocast is not None:
                float32_head(model)
            self.model: PeftModel = get_peft_model(model, lora_config(rank))
        self.model.eval()  # no dropout anywhere: trainer logprobs must match the sampler's
        self._fused = fused_parts(self.model.get_base_model())  # None: the model's own logits
        self._token_bytes = _activation_bytes_on_cpu(self.model.config, self.device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=0.0)
        self.steps = 0
        self._lock = threading.Lock()

    def get_tokenizer(self):
        return self.base.tokenizer

    # -- forward/backward ---------------------------------------------------------------------
    async def forward_backward_async(
        self, data: Sequence[types.Datum], loss_fn: str, loss_fn_config: Mapping[str, float] | None = None
    ) -> types.ForwardBackwardOutput:
        return await asyncio.to_thread(self.forward_backward, data, loss_fn, loss_fn_config)

    def forward_backward(
        self, data: Sequence[types.Datum], loss_fn: str, loss_fn_config: Mapping[str, float] | None = None
    ) -> types.ForwardBackwardOutput:
        loss = loss_named(loss_fn)
        config = loss.config(loss_fn_config)
        needed = [k for k in loss.inputs if k != "weights"]
        for i, d in enumerate(data):  # all checks before any gradient is accumulated
            missing = [k for k in needed if k not in d.loss_fn_inputs]
            if missing:
                raise ValueError(f"datum {i}: loss_fn {loss_fn!r} needs loss_fn_inputs {missing}")
            bad = [k for k, v in d.loss_fn_inputs.items() if (v.shape or [len(v.data)])[0] != d.model_input.length]
            if bad:
                raise ValueError(
                    f"datum {i}: loss_fn_inputs {bad} must have one entry per input token ({d.model_input.length})"
                )
        tokens = [d.model_input.to_ints() for d in data]
        trained_from = [first_trained(_trained(d, loss)) for d in data]
        outputs: list[dict[str, types.TensorData]] = [{} for _ in data]
        total = 0.0
        with self._lock, mixed(self.device, self.autocast):
            for group in plan(tokens, trained_from, self.model.config.vocab_size, self._token_bytes):
                shared = None
                if group.prefix:
                    prompt = torch.tensor([tokens[group.passes[0][0]][: group.prefix]], device=self.device)
                    shared = SharedPrompt.run(self.model, prompt)
                for rows in group.passes:
                    total += self._forward_backward_batch([data[i] for i in rows], rows, shared, loss, config, outputs)
                if shared is not None:
                    shared.backward()
        release_freed_memory()  # the passes' activations, else resident until the process ends
        return types.ForwardBackwardOutput(
            loss_fn_output_type="ArrayRecord",
            loss_fn_outputs=outputs,
            metrics={"loss:sum": total},
        )

    def _forward_backward_batch(
        self,
        data: list[types.Datum],
        indices: list[int],
        shared: SharedPrompt | None,
        loss: Loss,
        config: Mapping[str, float],
        outputs: list[dict[str, types.TensorData]],
    ) -> float:
        n, width = len(data), max(d.model_input.length for d in data)
        input_ids = torch.zeros(n, width, dtype=torch.long)
        mask = torch.zeros(n, width, dtype=torch.bool)
        fields = {k: torch.zeros(n, width) for k in ("logprobs", "advantages", "weights")}
        targets = torch.zeros(n, width, dtype=torch.long)
        present = set.intersection(*(set(d.loss_fn_inputs) for d in data))
        for row, d in enumerate(data):
            ids = d.model_input.to_ints()
            input_ids[row, : len(ids)] = torch.tensor(ids)
            targets[row, : len(ids)] = d.loss_fn_inputs["target_tokens"].to_torch()
            mask[row, : len(ids)] = True
            for k in present & fields.keys():
                fields[k][row, : len(ids)] = d.loss_fn_inputs[k].to_torch().float()
        inputs = {k: v.to(self.device) for k, v in fields.items() if k in present}
        inputs["target_tokens"] = targets.to(self.device)
        real = mask.to(self.device)
        signal = loss.gradient_mask(inputs)
        live = real if signal is None else real & signal  # where the loss can have a gradient
        lp = self._target_logprobs(input_ids.to(self.device), inputs["target_tokens"], live, shared)
        loss_tok = loss.elementwise(lp, inputs, config) * real
        total = loss_tok.sum()
        total.backward()
        lp_cpu, loss_cpu = lp.detach().cpu(), loss_tok.detach().cpu()
        for row, i in enumerate(indices):
            k = int(mask[row].sum())
            outputs[i] = {
                "logprobs": types.TensorData.from_torch(lp_cpu[row, :k].contiguous()),
                "elementwise_loss": types.TensorData.from_torch(loss_cpu[row, :k].contiguous()),
            }
        return float(total.item())

    def _target_logprobs(
        self, input_ids: torch.Tensor, targets: torch.Tensor, live: torch.Tensor, shared: SharedPrompt | None
    ) -> torch.Tensor:
        """Log-probabilities of `targets` [rows, time] (`live`: where the loss can have a
        gradient). With a `shared` prompt, every row continues from its KV cache (gradients
        flowing back through it): the same numbers as running each row whole."""
        if shared is None:
            return self._logprobs_after(input_ids, targets, live, None)
        prefix, rows = shared.length, input_ids.shape[0]
        tail = self._logprobs_after(input_ids[:, prefix:], targets[:, prefix:], live[:, prefix:], shared.cache(rows))
        return torch.cat([shared.target_logprobs(targets[:, :prefix]), tail], dim=1)

    def _logprobs_after(
        self, input_ids: torch.Tensor, targets: torch.Tensor, live: torch.Tensor, cache: DynamicCache | None
    ) -> torch.Tensor:
        """Log-probabilities of `targets` at `input_ids`' positions (after `cache`, when given):
        through the fused head where the model allows it, else from the model's logits."""
        if self._fused is not None:
            body, head = self._fused
            hidden = body(input_ids=input_ids, cache=cache, use_cache=False).last_hidden_state
            return target_logprobs(hidden, head, targets, live)
        logits = self.model(input_ids=input_ids, cache=cache, use_cache=False).logits.float()
        return -torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none")

    # -- optimizer ----------------------------------------------------------------------------
    async def optim_step_async(self, adam_params: types.AdamParams) -> types.OptimStepResponse:
        return await asyncio.to_thread(self.optim_step, adam_params)

    def optim_step(self, adam_params: types.AdamParams) -> types.OptimStepResponse:
        with self._lock:
            for group in self.optimizer.param_groups:
                group["lr"] = adam_params.learning_rate
                group["betas"] = (adam_params.beta1, adam_params.beta2)
                group["eps"] = adam_params.eps
                group["weight_decay"] = adam_params.weight_decay
            clip = adam_params.grad_clip_norm if adam_params.grad_clip_norm > 0 else float("inf")
            norm = torch.nn.utils.clip_grad_norm_(self.params, clip)  # also the norm when not clipping
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.steps += 1
        return types.OptimStepResponse(metrics={"grad_norm": float(norm), "learning_rate": adam_params.learning_rate})

    # -- checkpoints --------------------------------------------------------------------------
    async def save_weights_for_sampler_async(self, name: str) -> str:
        return await asyncio.to_thread(self.save_weights_for_sampler, name)

    def save_weights_for_sampler(self, name: str) -> str:
        with self._lock:
            path = self.checkpoints.save(
                CheckpointKind.SAMPLER_WEIGHTS, name, self.model.save_pretrained, step=self.steps
            )
        return str(path)

    async def save_state_async(self, name: str) -> str:
        return await asyncio.to_thread(self.save_state, name)

    def save_state(self, name: str) -> str:
        def write(folder: Path) -> None:
            self.model.save_pretrained(folder)
            torch.save({"optimizer": self.optimizer.state_dict(), "steps": self.steps}, folder / OPTIMIZER_FILE)

        with self._lock:
            path = self.checkpoints.save(CheckpointKind.WEIGHTS, name, write, step=self.steps)
        return str(path)

    async def load_state_async(self, path: str) -> None:
        await asyncio.to_thread(self.load_state, path)

    def load_state(self, path: str) -> None:
        """Adapter weights and, when saved with save_state, the optimizer state and step count."""
        folder = Path(path)
        with self._lock:
            weights = load_file(folder / ADAPTER_FILE, device=str(self.device))
            result = set_peft_model_state_dict(self.model, weights)
            if result.unexpected_keys:
                raise ValueError(f"{path}: adapter does not fit this model ({result.unexpected_keys[:3]} ...)")
            self.optimizer.zero_grad(set_to_none=True)
            if (folder / OPTIMIZER_FILE).exists():
                state = torch.load(folder / OPTIMIZER_FILE, map_location=self.device, weights_only=True)
                self.optimizer.load_state_dict(state["optimizer"])
                self.steps = int(state["steps"])

    async def delete_state_async(self, path: str) -> None:
        await asyncio.to_thread(self.checkpoints.delete, path)

    # -- samplers -----------------------------------------------------------------------------
    async def create_sampling_client_async(self, path: str) -> LocalSampler:
        # each step's sampler its own stream, fixed by the run's seed and the step
        seed = self.seed * 1_000_003 + self.steps
        return await asyncio.to_thread(create_sampler, self.base, path, self.compute, seed)


def _activation_bytes_on_cpu(config: object, device: torch.device) -> int:
    """A token's activations where they take the machine's memory (0: passes sized by their logits
    alone, as on a GPU or for a model whose sizes the config does not name)."""
    sizes = [getattr(config, k, None) for k in ("hidden_size", "intermediate_size", "num_hidden_layers")]
    if device.type != "cpu" or not all(isinstance(v, int) and v > 0 for v in sizes):
        return 0
    hidden, intermediate, layers = sizes
    return activation_bytes(hidden, intermediate, layers)


def _trained(datum: types.Datum, loss: Loss) -> list[bool]:
    """Where `loss` can have a gradient in `datum` (Loss.gradient_mask; without weights or
    advantages, cross_entropy on every token: everywhere). A prompt is shared only before it."""
    fields = {k: v.to_torch() for k, v in datum.loss_fn_inputs.items() if k in ("weights", "advantages", "logprobs")}
    mask = loss.gradient_mask(fields)
    return [True] if mask is None else mask.tolist()


def create_sampler(
    base: BaseModel, adapter: str | None = None, compute: str = "float32", seed: int | None = None
) -> LocalSampler:
    """A sampler on a private copy of the base model, with the adapter at `adapter` merged in (in
    float32), computing as `compute` says (the trainer's `local_compute`)."""
    model = base.copy_model()
    if adapter is not None and not merge_plain_lora(model, Path(adapter)):
        model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    model.eval()
    dtype = compute_dtype(compute, base.device)
    for_sampling(model, dtype)
    return LocalSampler(
        model, base.tokenizer, base.eos_token_ids, base.max_positions, path=adapter, autocast=dtype, seed=seed
    )
