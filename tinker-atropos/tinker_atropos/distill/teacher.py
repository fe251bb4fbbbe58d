"""The teacher's sampler in the trainer: what scores every reply token of the student's samples.

`trainer.teacher` (the server resolves a run id to its weights before the start) is one of:
- with `teacher_url`: the model an OpenAI-compatible endpoint serves (vLLM's `prompt_logprobs`);
- on Tinker: a `tinker://` sampler checkpoint, or a base model, through a sampling client's
  compute_logprobs (a self-hosted engine's checkpoint is downloaded and scored here: the engine
  unloads a run's model when the run ends);
- on the local backend: an adapter folder (a finished run's weights), on the student's own sampler
  (the engine, or vLLM as one more LoRA) when it shares the student's base; or a base model. Another
  base model: a second vLLM server of the run's (sampler vllm), else the engine in this process.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tinker_atropos.backends.base import BackendUnavailable, SamplingBackend
from tinker_atropos.backends.sampler_source import SamplerSource
from tinker_atropos.models.paths import model_ref, offline_model_named
from tinker_atropos.trainer.config import RunConfig
from tinker_atropos.vllm_server.process import VllmError
from tinker_atropos.vllm_server.run import VllmSamplers
from tinker_atropos.vllm_server.sampler import VllmClient, VllmSampler

TEACHER_LABEL = "teacher"
PROBE = "A teacher scores 12 tokens: naïve café, f(x) = 3.5 * y\n\tdone."  # words, digits, accents, code


def adapter_base(folder: Path) -> str | None:
    """The base model an adapter folder was trained on (its adapter_config.json), None if not an adapter."""
    try:
        config = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    base = str(config.get("base_model_name_or_path") or "")
    return offline_model_named(base) or base or None


def endpoint_root(url: str) -> str:
    """The server's root: vLLM's routes are /v1/completions and /tokenize."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


async def teacher_sampler(cfg: RunConfig, samplers: SamplerSource, tokenizer: Any, context: int) -> SamplingBackend:
    """The sampler that scores the student's tokens as `trainer.teacher` says; BackendUnavailable names
    a teacher that cannot be loaded or whose tokenizer differs from the student's (`tokenizer`)."""
    t = cfg.trainer
    teacher = str(t.teacher)
    if t.teacher_url:
        client = VllmClient(endpoint_root(t.teacher_url))
        await _check_endpoint_vocabulary(client, teacher, tokenizer)
        return VllmSampler(client, teacher, context)
    if t.backend == "tinker":
        from tinker_atropos.backends.tinker_backend import create_tinker_sampler

        if teacher.startswith("tinker://") and t.self_hosted:
            return await asyncio.to_thread(_engine_checkpoint, cfg, teacher, tokenizer)
        if teacher.startswith("tinker://"):
            return await asyncio.to_thread(create_tinker_sampler, t, teacher)
        return await asyncio.to_thread(create_tinker_sampler, t, None, teacher)
    folder = Path(teacher)
    base = adapter_base(folder) if folder.is_dir() else None
    if base is not None and model_ref(base) == model_ref(t.base_model):
        return await samplers.for_adapter(teacher, TEACHER_LABEL)
    if base is None and model_ref(teacher) == model_ref(t.base_model):
        return await samplers.for_base()
    if isinstance(samplers, VllmSamplers):  # another base model: a second vLLM server of the run's
        other = await samplers.start_other(base or teacher)
        served = await other.for_base()
        await _check_endpoint_vocabulary(other.client, served.model, tokenizer)
        return await other.for_adapter(teacher, TEACHER_LABEL) if base else served
    return await asyncio.to_thread(_other_base, cfg, base or teacher, teacher if base else None, tokenizer)


def _engine_checkpoint(cfg: RunConfig, path: str, tokenizer: Any) -> SamplingBackend:
    """A self-hosted engine unloads a run's model when the run ends, and cannot sample its checkpoints
    after: the checkpoint is downloaded from the engine's archive and scored in this process."""
    from tinker_atropos.backends.local import ModelLoadError, load_base_model
    from tinker_atropos.export.engine_weights import EngineWeightsError, download_engine_weights, untie_output_head

    t = cfg.trainer
    try:
        folder = download_engine_weights(path, Path(t.run_dir) / "teacher_weights", t.tinker_base_url, t.base_model)
        untie_output_head(load_base_model(t.base_model, t.device).model, folder)  # its embedding LoRA, a tied head
    except (EngineWeightsError, ModelLoadError) as exc:
        raise BackendUnavailable(f"trainer.teacher {path}: {exc}") from exc
    return _other_base(cfg, t.base_model, str(folder), tokenizer)


def _other_base(cfg: RunConfig, base_name: str, adapter: str | None, tokenizer: Any) -> SamplingBackend:
    """A teacher loaded in this process: a base model (with `adapter`), its vocabulary the student's."""
    from tinker_atropos.backends.local import ModelLoadError, create_sampler, load_base_model

    t = cfg.trainer
    try:
        base = load_base_model(base_name, t.device)
    except ModelLoadError as exc:
        raise BackendUnavailable(f"trainer.teacher {t.teacher!r}: its base model cannot be loaded: {exc}") from exc
    if base.tokenizer.get_vocab() != tokenizer.get_vocab():
        raise BackendUnavailable(
            f"trainer.teacher {t.teacher!r}: its tokenizer ({base_name}) differs from the student's "
            f"({t.base_model}); a teacher scores the student's own token ids, so it must share the tokenizer"
        )
    return create_sampler(base, adapter, t.local_compute, seed=t.seed)


async def _check_endpoint_vocabulary(client: VllmClient, model: str, tokenizer: Any) -> None:
    """The endpoint tokenizes PROBE as the student does (vLLM's /tokenize), or the teacher is refused."""
    mine = list(tokenizer.encode(PROBE, add_special_tokens=False))
    try:
        response = await client.post("/tokenize", {"model": model, "prompt": PROBE, "add_special_tokens": False})
        theirs = response.json().get("tokens") if response.status_code == 200 else None
        why = f"it answered {response.status_code}"
    except (VllmError, ValueError) as exc:
        theirs, why = None, str(exc)
    if theirs is None:
        raise BackendUnavailable(
            f"trainer.teacher_url {client.url}: its /tokenize did not answer ({why}), so its tokenizer cannot be "
            "checked against the student's; serve the teacher with vLLM or sglang, which have /tokenize"
        )
    if list(theirs) != mine:
        raise BackendUnavailable(
            f"trainer.teacher {model!r} at {client.url} tokenizes a probe into {len(theirs)} tokens where the "
            f"student's tokenizer makes {len(mine)} (or other ids): a teacher must share the student's tokenizer"
        )
