"""The run YAML (docs/run-files.md) as pydantic models.

Every problem surfaces as one `ConfigError` whose message names the dotted key and the type
expected there, so a person (or an agent) can fix the file without reading this code.
"""

from __future__ import annotations

import logging
import types as pytypes
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types as at
import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator, model_validator

from tinker_atropos.losses import LOSSES
from tinker_atropos.losses import NAMES as LOSS_NAMES
from tinker_atropos.losses import described as described_losses
from tinker_atropos.reply_cap import DEFAULT_MAX_REPLY_TOKENS
from tinker_atropos.run_files import OLD_TRAINER_SECTION, TRAINER_SECTION, with_trainer_section


class ConfigError(ValueError):
    """A missing or invalid run-config value; `key` is the dotted path, `expected` its type."""

    def __init__(self, message: str, key: str | None = None, expected: str | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.expected = expected


LossName = Literal[LOSS_NAMES]  # type: ignore[valid-type]  # the registry's: tinker_atropos/losses/
logger = logging.getLogger(__name__)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TinkerConfig(_Strict):
    """The trainer's own section."""

    backend: Literal["local", "tinker"] = "local"
    base_model: str = Field("tiny-chat", min_length=1)
    lora_rank: int = Field(32, gt=0)
    learning_rate: float = Field(4.0e-5, gt=0)
    lr_schedule: Literal["constant", "linear", "cosine"] = Field(
        "constant",
        description="The learning rate over the run's budget (total_steps, or max_training_minutes where those "
        "run out first): constant, or a linear or cosine decay from learning_rate to lr_floor x learning_rate "
        "after lr_warmup_steps. Each step's rate is in metrics.jsonl (learning_rate).",
    )
    lr_warmup_steps: int = Field(0, ge=0, description="Steps whose rate rises linearly to learning_rate first.")
    lr_floor: float = Field(
        0.1, ge=0, le=1, description="linear / cosine: the rate at the end of the budget, as a share of learning_rate."
    )
    max_training_minutes: float | None = Field(
        None,
        gt=0,
        description="A budget in training minutes (from the first batch, the periodic evaluations not counted): "
        "the run completes when it is spent, if total_steps do not end it first. null: steps only.",
    )
    keep_best: bool = Field(
        True,
        description="Choose the run's best checkpoint by its validation score (never the held-out set's): at the "
        "end the held-out set scores it too, and rl_get_results and rl_export_model use it by default. false: "
        "the last checkpoint is the result.",
    )
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.95, ge=0, lt=1)
    eps: float = Field(1.0e-8, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    grad_clip_norm: float = Field(1.0, ge=0)
    loss_fn: LossName = Field("importance_sampling", description=described_losses())
    loss_aggregation: Literal["sum", "seq_mean", "token_mean", "constant"] = Field(
        "sum",
        description="How a step's token losses add up: sum (Tinker's own: longer replies weigh more), seq_mean "
        "(each reply's mean, then the mean over replies: GRPO), token_mean (divided by the step's reply tokens: "
        "DAPO, TRL's default) or constant (divided by replies x the reply token budget: Dr. GRPO).",
    )
    advantage_scale: Literal["none", "group", "batch"] = Field(
        "none",
        description="Advantages from scores: none (score minus its group's mean), group (also divided by the "
        "group's standard deviation: TRL's default, every group with a signal weighs the same) or batch "
        "(divided by the step's standard deviation of scores).",
    )
    clip_low: float | None = Field(
        None,
        ge=0,
        lt=1,
        description="ppo / cispo: the lowest importance ratio the loss uses (default: ppo 0.8, cispo 0.0).",
    )
    clip_high: float | None = Field(
        None,
        gt=1,
        description="ppo / cispo: the highest importance ratio (default: ppo 1.2, cispo 4.0); above ppo's "
        "1.2 (e.g. 1.28, DAPO's clip-higher) lets unlikely tokens that scored gain faster.",
    )
    dro_beta: float = Field(0.05, gt=0, description="dro: the weight of its quadratic penalty on the logprob change.")
    kl_beta: float = Field(
        0.0,
        ge=0,
        description="A KL penalty to the base model, in the reward: each reply token's advantage less kl_beta x "
        "(its sampler logprob - the base model's). 0: off (default); above it the base model scores every reply.",
    )
    teacher: str | None = Field(
        None,
        min_length=1,
        description="On-policy distillation: a model that scores every token of the student's own replies, "
        "each token's advantage gaining distill_coef x (the teacher's logprob - the student's). A finished "
        "run's id (rl_list_runs: its handed-out weights) or weights folder, a base model the backend loads "
        "(local: tiny-chat, smollm2-135m or a folder; Tinker: a base model or tinker:// sampler path), or with "
        "teacher_url the model that endpoint serves. It must share the student's tokenizer. null: no teacher.",
    )
    teacher_url: str | None = Field(
        None,
        pattern=r"^https?://\S+$",
        description="teacher: an OpenAI-compatible endpoint (vLLM, sglang) that serves it and returns prompt "
        "logprobs, e.g. http://gpu-box:8000/v1; its /tokenize must agree with the student's tokenizer.",
    )
    distill_coef: float = Field(
        1.0,
        ge=0,
        description="teacher: the weight of its signal per reply token (the negative reverse KL to the teacher).",
    )
    reward_coef: float = Field(
        1.0,
        ge=0,
        description="teacher: the weight of the environment's group-relative advantage beside it; 0 is pure "
        "distillation (every group trains, tied scores too), 1 RL with the teacher's KL.",
    )

    @field_validator("advantage_scale", mode="before")
    @classmethod
    def _renamed_scale(cls, v: Any) -> Any:
        return "group" if v == "group_std" else v  # run configs written before the batch scale existed

    local_compute: Literal["float32", "bfloat16", "auto"] = Field(
        "float32",
        description="The local trainer's and sampler's matmul precision: float32; bfloat16 (mixed "
        "precision, the output head in float32: on a CPU with native bfloat16 the trainer's forward/backward "
        "about twice and decoding 1.5x as fast, sampler and trainer logprobs ~0.015 nats a token apart); "
        "auto (bfloat16 where the CPU or GPU has it natively, else float32).",
    )
    sampler: Literal["engine", "vllm"] = Field(
        "engine",
        description="What samples the local backend's rollouts, evaluations and inference tests: engine (the "
        "product's own, in the trainer's process) or vllm (vLLM's OpenAI server, from the vllm runtime: each "
        "step's adapter loaded into it at runtime).",
    )
    vllm_url: str | None = Field(
        None,
        pattern=r"^https?://\S+$",
        description="sampler vllm: a vLLM server the user runs (started with --enable-lora and "
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, the same base model) instead of the run's own; it loads each "
        "adapter by its path, so it must see this machine's files.",
    )
    max_token_trainer_length: int = Field(9000, gt=0)
    final_eval_timeout_s: float = Field(
        600.0,
        gt=0,
        description="How long the final weights (and the best checkpoint's) are served for the environment's "
        "final evaluation (env.eval_at_end) before the run ends without it.",
    )
    max_reply_tokens: int = Field(
        DEFAULT_MAX_REPLY_TOKENS,
        gt=0,
        description="The most tokens the product's inference server generates for one request (one turn) "
        "where the environment asks for more than the model's context holds; a request that asks for less "
        "gets what it asks for. 1024 SmolLM2 tokens take about 90 s on a CPU, inside the 120 s request "
        "timeout; a reply cut here ends with finish_reason 'length'.",
    )
    total_steps: int = Field(gt=0)
    api_url: str = Field(pattern=r"^https?://\S+$")
    inference_host: str = "127.0.0.1"
    inference_port: int = Field(ge=1, le=65535)
    run_dir: Path
    run_name: str = Field("run", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    wandb_project: str = "rl-mcp"
    wandb_group: str | None = None
    use_wandb: bool = False
    resume_from: str | None = None
    """A `weights/<name>` folder (local) or tinker:// state path to resume from."""
    start_step: int = Field(0, ge=0)
    """Steps already done by the state in resume_from: numbering goes on from start_step + 1."""
    save_state_every: int = Field(5, ge=0)
    """Save the full training state (adapter + optimizer) every this many steps; 0: only at the end."""
    keep_states: int = Field(3, gt=0)
    """How many periodic training states to keep (older ones are deleted)."""
    wandb_run_id: str | None = Field(None, pattern=r"^[A-Za-z0-9_-]+$")
    """The W&B run to resume (a resumed run logs into its parent's); null: a new W&B run."""
    tinker_base_url: str | None = Field(None, pattern=r"^https?://\S+$")
    """The Tinker service URL; null means the SDK default ($TINKER_BASE_URL, else production)."""
    self_hosted: bool = False
    """tinker_base_url is a self-hosted Tinker-API engine (SkyRL's): no Tinker key is sent (a
    placeholder, or $TINKER_ENGINE_API_KEY), and weights come from its checkpoint archives."""

    @field_validator("run_dir")
    @classmethod
    def _absolute(cls, v: Path) -> Path:
        return v.expanduser().absolute()

    @model_validator(mode="after")
    def _objective_fits(self) -> TinkerConfig:
        loss = LOSSES[self.loss_fn]
        for field in sorted({f for other in LOSSES.values() for f in other.fields} - set(loss.fields)):
            if field in self.model_fields_set and getattr(self, field) != type(self).model_fields[field].default:
                readers = " and ".join(name for name, other in LOSSES.items() if field in other.fields)
                raise ValueError(f"{field} applies to {readers}, not loss_fn {self.loss_fn!r}: unset it")
        refused = loss.refusal(self)
        if refused:
            raise ValueError(refused)
        return self

    @model_validator(mode="after")
    def _sampler_fits(self) -> TinkerConfig:
        if self.sampler == "vllm" and self.backend != "local":
            raise ValueError("sampler vllm is the local backend's: on the tinker backend Tinker samples; unset it")
        if self.vllm_url and self.sampler != "vllm":
            raise ValueError("vllm_url is used by sampler vllm: set sampler: vllm, or unset vllm_url")
        return self

    @model_validator(mode="after")
    def _teacher_fits(self) -> TinkerConfig:
        if self.teacher is None:
            if self.teacher_url:
                raise ValueError("teacher_url serves a teacher: set teacher to the model name it serves")
            if self.reward_coef != 1.0:
                raise ValueError("reward_coef weighs the reward beside a teacher's signal: set teacher, or leave it 1")
        elif self.distill_coef == 0 and self.reward_coef == 0:
            raise ValueError("distill_coef and reward_coef are both 0: nothing would train; raise one of them")
        return self

    @model_validator(mode="after")
    def _resume_fits(self) -> TinkerConfig:
        if self.start_step and not self.resume_from:
            raise ValueError("start_step > 0 needs resume_from (the state those steps were saved in)")
        if self.start_step >= self.total_steps:
            raise ValueError(f"start_step ({self.start_step}) must be below total_steps ({self.total_steps})")
        return self


class EnvSection(BaseModel):
    """The environment's section: its own config, handed to it as written (`as_written`); typed here
    are the keys the trainer reads too."""

    model_config = ConfigDict(extra="allow")

    batch_size: StrictInt | None = Field(None, gt=0)  # sequences per step
    eval_size: int | None = None  # held-out items; 0: no evaluation
    eval_at_end: bool = False  # the final weights evaluated by the environment, served until it has
    max_batches_offpolicy: int | None = None  # steps a batch may lag behind the weights
    max_completion_tokens: int | None = None  # a reply's token budget, where the environment states one
    max_token_length: int | None = None
    tokenizer_name: str | None = None
    sft: dict[str, Any] | None = None  # the supervised stage's section (sft/settings.py)

    def as_written(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True)

    def reply_budget(self) -> int | None:
        """The environment's completion budget where it states one (`max_completion_tokens`, else
        `max_token_length`)."""
        for value in (self.max_completion_tokens, self.max_token_length):
            if value is not None and value > 0:
                return value
        return None


class RunConfig(_Strict):
    """The whole run config: the environment's sections are its own data (EnvSection types the keys
    the trainer reads)."""

    env: EnvSection = Field(default_factory=EnvSection)
    openai: list[dict[str, Any]] = Field(default_factory=list)
    trainer: TinkerConfig
    request_timeouts: dict[str, float] | None = None  # the environment's (request_timeouts.py)
    slurm: bool | dict[str, Any] = False
    testing: bool | dict[str, Any] = False


def load_run_config(path: str | Path) -> RunConfig:
    """Read and validate a run YAML; raises ConfigError (exit code 2 in launch_training)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
    return parse_run_config(data, source=str(path))


def parse_run_config(data: Any, source: str = "config") -> RunConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping with sections env, openai, trainer, slurm, testing")
    if OLD_TRAINER_SECTION in data and TRAINER_SECTION not in data:
        logger.warning(
            "%s: section %r is now %r (the trainer's settings, on either backend): read as such; rename it",
            source,
            OLD_TRAINER_SECTION,
            TRAINER_SECTION,
        )
        data = with_trainer_section(dict(data))
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise _config_error(exc, source) from None


def _config_error(exc: ValidationError, source: str) -> ConfigError:
    problems: dict[str, tuple[str, str]] = {}  # key -> (line, expected); union branches repeat keys
    for err in exc.errors():
        loc, annotation, field = _typed_loc(tuple(err["loc"]))
        key = ".".join(str(p) for p in loc)
        expected = _expected(annotation, field)
        if err["type"] == "extra_forbidden":
            key = ".".join(str(p) for p in err["loc"])
            expected = f"one of the known keys: {_known_keys(annotation)}"
            line = f"`{key}` is not a known key ({expected})"
        elif err["type"] == "value_error" and len(loc) == len(err["loc"]):  # a cross-field check
            line = f"`{key}`: {err['msg'].removeprefix('Value error, ')}"
        elif err["type"] == "missing":
            line = f"`{key}` is missing: expected {expected}"
        else:
            line = f"`{key}`: expected {expected}, got {err.get('input')!r}"
        problems.setdefault(key, (line, expected))
    key, (_, expected) = next(iter(problems.items()))
    message = f"{source}: invalid config: " + "; ".join(line for line, _ in problems.values())
    return ConfigError(message, key=key, expected=expected)


def _typed_loc(loc: tuple) -> tuple[tuple, Any, Any]:
    """The prefix of `loc` that names config keys, the annotation there and its FieldInfo.

    Pydantic appends union-branch tags and dict internals to locations; those are no key a
    person could write, so they are cut off.
    """
    annotation: Any = RunConfig
    field = None
    kept: list = []
    for part in loc:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel) and part in annotation.model_fields:
            field = annotation.model_fields[part]
            annotation = field.annotation
        elif isinstance(part, int) and get_origin(annotation) is list:
            annotation, field = get_args(annotation)[0], None
        else:
            break
        kept.append(part)
    return tuple(kept), annotation, field


def _known_keys(annotation: Any) -> str:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return ", ".join(annotation.model_fields)
    return "any"


def _expected(annotation: Any, field: Any) -> str:
    words = _type_words(annotation)
    bounds = []
    for m in field.metadata if field is not None else ():
        for attr, op in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            if isinstance(m, getattr(at, attr.capitalize())):
                bounds.append(f"{op} {getattr(m, attr)}")
        if getattr(m, "pattern", None):
            bounds.append(f"matching {m.pattern}")
        if isinstance(m, at.MinLen):
            bounds.append("non-empty")
    return words + (" " + " and ".join(bounds) if bounds else "")


_NAMES = {int: "integer", float: "number", str: "string", bool: "boolean", Path: "path", type(None): "null"}


def _type_words(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (Union, pytypes.UnionType):
        return " or ".join(_type_words(a) for a in get_args(tp))
    if origin is dict or tp is dict:
        return "mapping"
    if origin is list or tp is list:
        return "list of " + _type_words(get_args(tp)[0]) if get_args(tp) else "list"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return f"mapping ({tp.__name__})"
    return _NAMES.get(tp, getattr(tp, "__name__", str(tp)))
