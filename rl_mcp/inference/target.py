"""Where rl_test_inference sends requests, and the per-model config and environment of its children.

Targets: an OpenAI-compatible `base_url` (with `models` and the name of the env var holding its
key); OpenRouter when OPENROUTER_API_KEY is set; else the local backend's inference server,
started for the test on a free port (sglang type: real tokens and logprobs).

Keys travel only by environment variable: the YAML names no key (`api_key: null`), and the child
gets the key as OPENAI_API_KEY, which the openai client reads when `api_key` is None.
"""

from __future__ import annotations

import copy
import re
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx

from rl_mcp.environments.missing_module import ModuleHome
from rl_mcp.errors import UserError
from rl_mcp.settings import EnvLimits, without_secrets
from tinker_atropos.http_tls import shared_tls

OPENROUTER_BASE_URL = "https://openrouter.ai/api/v1"
OPENROUTER_KEY_ENV = "OPENROUTER_API_KEY"
OPENROUTER_MODELS = ("qwen/qwen3-8b", "z-ai/glm-4.7-flash", "minimax/minimax-m2.5")
TINY_CHAT = "tiny-chat"  # the local server's model when the profile trains on Tinker
# Keys the children never need: the one key a test uses reaches them as OPENAI_API_KEY only.
_NO_KEY = "none"  # the openai client insists on some key; servers without auth ignore it
_ENV_VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class InferenceTestError(UserError):
    """Bad arguments or a missing key: nothing was started. The message says what to do."""


@dataclass(frozen=True)
class LocalWeights:
    """What this machine's inference server loads for one model of a local target."""

    base_model: str
    adapter: str | None = None  # a run's sampler checkpoint (a folder, or tinker://)
    backend: str = "local"  # where the weights are sampled: local, or tinker (needs TINKER_API_KEY)
    engine_url: str | None = None  # the self-hosted engine `adapter` (tinker://) is downloaded from


@dataclass(frozen=True)
class Target:
    """Where the models are served. `base_url` is None for the local server (one per model)."""

    kind: Literal["openrouter", "openai_compatible", "local"]
    models: tuple[str, ...]
    base_url: str | None
    key_env: str | None
    server_type: Literal["openai", "sglang"]
    weights: Mapping[str, LocalWeights] = field(default_factory=dict)  # local: per model, else its base

    def local_weights(self, model: str) -> LocalWeights:
        return self.weights.get(model) or LocalWeights(model)


@dataclass(frozen=True)
class InferenceRequest:
    """What to test: the environment, its run config (no secrets), and how much."""

    env_name: str
    env_file: Path
    base_config: Mapping[str, Any]
    num_steps: int
    group_size: int
    timeout_s: float
    out_dir: Path
    env_limits: EnvLimits = field(
        default_factory=lambda: EnvLimits.model_validate({})
    )  # when an environment that only discards is stopped
    env_python: str | None = None  # the environment process's interpreter (an Atropos folder's own venv)
    module_home: ModuleHome | None = None  # where the environment's code imports from: named with a missing module


def resolve_target(
    *,
    models: Sequence[str] | None,
    base_url: str | None,
    api_key_env: str | None,
    environ: Mapping[str, str],
    local_model: str,
    target: Literal["local", "openrouter", "base_url"] | None = None,
    local_default: bool = True,
) -> Target:
    """Pick the inference target from the arguments and the keys present (never their values).

    `target` names one explicitly; without it: base_url, else OpenRouter when its key is set, else
    the local server when `local_default` (the local profile), else an error naming the three ways."""
    if target == "base_url" and not base_url:
        raise InferenceTestError("target='base_url' needs base_url (and models): the endpoint to test")
    if target in ("local", "openrouter") and base_url:
        raise InferenceTestError(f"target={target!r} takes no base_url: drop one of the two")
    names = tuple(dict.fromkeys(m.strip() for m in models or () if m and m.strip()))
    # never echoed unless it is set: a mistaken value may be the key itself
    if api_key_env is not None and (not _ENV_VAR_NAME.match(api_key_env) or not environ.get(api_key_env)):
        raise InferenceTestError(
            "api_key_env must be the NAME of an environment variable that is set in the MCP server's "
            "environment (e.g. MY_API_KEY), never the key itself: set the variable there and pass its name"
        )
    if base_url:
        if "@" in urlsplit(base_url).netloc:  # checked first: this message never echoes the URL
            raise InferenceTestError(
                "base_url must not carry credentials (user:key@host): put the key in an "
                "environment variable and pass its name as api_key_env"
            )
        if not re.match(r"^https?://[^/\s]+", base_url):
            raise InferenceTestError(f"base_url must be an http(s) URL such as http://host:8000/v1, got {base_url!r}")
        if not names:
            raise InferenceTestError("base_url needs models: the model names that server serves")
        return Target("openai_compatible", names, base_url.rstrip("/"), api_key_env, "openai")
    if target == "local":
        return Target("local", names or (local_model,), None, None, "sglang")
    key_env = api_key_env or (OPENROUTER_KEY_ENV if environ.get(OPENROUTER_KEY_ENV) else None)
    if key_env:
        return Target("openrouter", names or OPENROUTER_MODELS, OPENROUTER_BASE_URL, key_env, "openai")
    if target == "openrouter" or not local_default:
        why = "target='openrouter' needs" if target == "openrouter" else "this profile trains remotely, and there is"
        raise InferenceTestError(
            f"{why} no OPENROUTER_API_KEY in the server's environment, so there is nothing remote to test "
            "against. Three ways forward: set OPENROUTER_API_KEY for the server (OpenRouter's models); "
            "pass base_url (with models and api_key_env) for any OpenAI-compatible endpoint; or pass "
            "target='local' to test against this machine's own small model (not the model you will train)."
        )
    return Target("local", names or (local_model,), None, None, "sglang")


def child_env(environ: Mapping[str, str], target: Target, pass_env: Sequence[str] = ()) -> dict[str, str]:
    """The children's environment: no inherited keys but those the operator passes to environments
    (`pass_env`); the target's key as OPENAI_API_KEY only."""
    env = {k: v for k, v in without_secrets(environ, allow=pass_env).items() if not k.startswith("OPENAI_")}
    if target.key_env:
        env.pop(target.key_env, None)
    if any(w.backend == "tinker" for w in target.weights.values()) and environ.get("TINKER_API_KEY"):
        env["TINKER_API_KEY"] = environ["TINKER_API_KEY"]  # a Tinker run's weights are sampled there
    env["OPENAI_API_KEY"] = environ[target.key_env] if target.key_env else _NO_KEY
    if environ.get("WANDB_API_KEY"):
        env["WANDB_API_KEY"] = environ["WANDB_API_KEY"]
    else:
        env["WANDB_MODE"] = "disabled"
    if target.server_type == "openai":
        env["ATROPOS_ALLOW_DUMMY_MANAGED_SERVER"] = "1"  # managed-server envs on plain chat APIs
    env["PYTHONUNBUFFERED"] = "1"
    return env


def model_slug(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", model).strip("._") or "model"


def new_test_dir(root: Path, env_name: str) -> Path:
    """A fresh folder per test call: never reuse one (atroposlib appends `_1` to old files)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    path = root / f"{model_slug(env_name)}-{stamp}-{secrets.token_hex(3)}"
    path.mkdir(parents=True, exist_ok=False)
    return path


def process_config(
    req: InferenceRequest,
    target: Target,
    model: str,
    *,
    run_dir: Path,
    inference_port: int | None,
    use_wandb: bool,
) -> dict[str, Any]:
    """The per-model run YAML: the base config, this model as the one server, no key in it.

    With `inference_port`, the server is a local one started for the test on that port."""
    weights = target.local_weights(model)
    if inference_port is None:
        base_url, tokenizer = str(target.base_url), None
    else:
        from tinker_atropos.models.paths import model_ref  # torch-free by contract

        base_url, tokenizer = f"http://127.0.0.1:{inference_port}/v1", model_ref(weights.base_model)
    cfg = copy.deepcopy(dict(req.base_config))
    env = cfg.setdefault("env", {})
    env.pop("rollout_server_url", None)  # process mode talks to no run-api
    env["use_wandb"] = use_wandb
    env["wandb_name"] = f"{req.env_name}-inference-{model_slug(model)}"
    env["data_dir_to_save_evals"] = str(run_dir)
    # What process mode sets for itself, unless the YAML says otherwise (the run config does):
    # keep all-equal groups (they are what a test must show) and the messages (for samples).
    env["ensure_scores_are_not_same"] = False
    env["include_messages"] = True
    if "demonstrations_per_group" in env:  # an agent environment's expert turns: a test scores the model alone
        env["demonstrations_per_group"] = 0
    tokenizer = tokenizer or env.get("tokenizer_name") or model
    env["tokenizer_name"] = tokenizer
    cfg["openai"] = [
        {
            "model_name": model,
            "base_url": base_url,
            "api_key": None,  # the openai client then reads OPENAI_API_KEY from the environment
            "server_type": target.server_type,
            "tokenizer_name": tokenizer,
            "timeout": int(max(10, req.timeout_s)),
            "health_check": False,  # its 1 s ping is a paid request on OpenRouter; we probe ourselves
        }
    ]
    if inference_port is None:
        cfg.pop("trainer", None)  # read by the local server only; the environment ignores it
        cfg.pop("request_timeouts", None)  # another server: its timeout is the test's
    else:
        cfg["trainer"] = served_trainer(cfg.get("trainer") or {}, weights, inference_port, run_dir)
    return cfg


def served_trainer(trainer: Mapping[str, Any], weights: LocalWeights, port: int, run_dir: Path) -> dict[str, Any]:
    """A config's trainer section as the standalone inference server reads it: `weights` sampled where
    they were trained (or here, for a self-hosted engine's), served on 127.0.0.1:`port` (rl_test_inference,
    rl_serve_model)."""
    out = {
        **trainer,
        "backend": weights.backend,
        "base_model": weights.base_model,
        "inference_host": "127.0.0.1",
        "inference_port": port,
        "run_dir": str(run_dir),
        "use_wandb": False,
    }
    if weights.engine_url:  # the server downloads the checkpoint from there, then samples it itself
        out.update(self_hosted=True, tinker_base_url=weights.engine_url)
    return out


async def probe_reachable(base_url: str, timeout_s: float = 10.0) -> str | None:
    """Why nothing can answer at `base_url` (refused, unknown host), else None. Sends no key.

    Only a failed connection counts: a slow or erroring server is left to the test to judge."""
    try:
        async with httpx.AsyncClient(timeout=timeout_s, verify=shared_tls()) as client:
            await client.get(f"{base_url}/models")
    except (httpx.ConnectError, httpx.UnsupportedProtocol) as exc:
        return f"cannot connect to {base_url} ({exc or type(exc).__name__}): check the URL and that the server is up"
    except httpx.HTTPError:
        pass
    return None
