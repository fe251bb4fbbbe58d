"""The introspection child: import FILE, call CLASS.config_init(), print every field as JSON.

`python -m rl_mcp.children.introspect FILE CLASS`; the answer follows RESULT_MARKER on stdout
(anything the environment prints on import comes before it). A format whose files cannot be imported
(verifiers) names the class that hosts them instead (rl_mcp/formats/). Imports nothing of rl_mcp.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

# Training fields (TinkerConfig) an agent may edit; the rest are set per run or by the profile.
TRAINING_FIELDS = (
    "lora_rank",
    "learning_rate",
    "lr_schedule",
    "lr_warmup_steps",
    "lr_floor",
    "max_training_minutes",
    "keep_best",
    "beta1",
    "beta2",
    "eps",
    "weight_decay",
    "grad_clip_norm",
    "loss_fn",
    "loss_aggregation",
    "advantage_scale",
    "clip_low",
    "clip_high",
    "dro_beta",
    "kl_beta",
    "teacher",
    "teacher_url",
    "distill_coef",
    "reward_coef",
    "local_compute",
    "max_token_trainer_length",
    "max_reply_tokens",
    "seed",
    "wandb_project",
    "wandb_group",
    "save_state_every",
    "keep_states",
)
RESULT_MARKER = "\n@@RL_MCP_INTROSPECTION@@"


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = text or repr(annotation)
    return text.replace("typing.", "").replace("NoneType", "None")


def _model_fields(
    model: Any, values: dict[str, Any], section: str, only: tuple[str, ...] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each field of pydantic `model`: type, value, description and its JSON schema."""
    schema = model.model_json_schema(mode="validation")
    props = schema.get("properties", {})
    out = {}
    for name, info in model.model_fields.items():
        if only is not None and name not in only:
            continue
        out[name] = {
            "section": section,
            "type": _type_name(info.annotation),
            "default": values.get(name),
            "description": info.description,
            "json_schema": {k: v for k, v in props.get(name, {}).items() if k not in ("title", "description")},
        }
    return out, schema.get("$defs", {})


def _env_config(argv: list[str]) -> Any:
    """CLASS.config_init()'s config after importing FILE."""
    import importlib.util

    file, class_name = Path(argv[0]).resolve(), argv[1]
    sys.path.insert(0, str(file.parent))
    spec = importlib.util.spec_from_file_location(f"_rl_mcp_env_{file.stem}", file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    env_config, _servers = getattr(module, class_name).config_init()
    return env_config


def _child_main(argv: list[str]) -> int:
    """Print the config's fields and the training fields as JSON after a marker."""
    env_config = _env_config(argv)
    fields, defs = _model_fields(type(env_config), env_config.model_dump(mode="json"), "env")
    training_error = None
    try:
        from tinker_atropos.trainer.config import TinkerConfig

        defaults = {
            name: info.get_default(call_default_factory=True)
            for name, info in TinkerConfig.model_fields.items()
            if not info.is_required()
        }
        trainer_fields, trainer_defs = _model_fields(TinkerConfig, defaults, "trainer", TRAINING_FIELDS)
        for name, spec_ in trainer_fields.items():
            fields.setdefault(name, spec_)
        defs.update(trainer_defs)
    except Exception as exc:  # the trainer side is optional for discovery; say why it is missing
        training_error = f"training fields unavailable: {type(exc).__name__}: {exc}"
    result = {
        "config_class": type(env_config).__name__,
        "fields": fields,
        "defs": defs,
        "training_error": training_error,
    }
    sys.stdout.write(RESULT_MARKER + json.dumps(result, default=str))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
