"""atroposlib 0.4 as this product runs it: four fixes applied in every environment process.

Users bring Atropos environments written against atroposlib 0.4 and run them unchanged. Four
things in atroposlib break or slow them here without an error, so `apply()` (called by the
environment launcher, before the environment's file is imported; site-packages is never edited)
fixes them:

1. `tokenize_for_trainer` treats `tokenizer.apply_chat_template(chat)` as a list of ids. Under
   transformers 5 that call returns a `BatchEncoding` (a dict), so tokens and masks come out wrong
   (two "tokens": the dict's keys). The function is given a tokenizer whose chat template returns
   ids, as it did under transformers 4.
2. `ServerManager` treats any server config that is not a list as a baseline and sends requests to
   localhost:9004-9007. An environment whose `config_init` returns one `APIServerConfig` or a
   `ServerBaseline` (as Atropos' gsm8k does) thus ignores the inference server the run's YAML
   names. The CLI's server resolution is made to return a list: a single config becomes a list
   of one, and a baseline the YAML overrides becomes the YAML's server over the baseline's values.
3. `env_manager` ends its rollout loop once the steps taken plus the batches queued pass
   `total_steps`. Once the trainer has taken the last step's batch, nothing is queued, so the loop
   went on rolling out a whole batch that no step takes (sampling that costs time, and money on
   Tinker) before the environment's final evaluation could start. The status it reads is made to
   say so: with the last step's batch taken, a batch counts as queued, and the loop ends at once.
4. `_register_env` gives up after three tries in about 6 s when run-api does not answer. A run
   starts run-api beside the environment, and on a busy machine run-api can take longer to listen:
   the environment then exited before it was ready. It is asked again for REGISTER_PATIENCE_S.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

_APPLIED = "_tinker_atropos_compat"
REGISTER_PATIENCE_S = 60.0
REGISTER_RETRY_S = 0.2
OPENAI_SECTION = "openai"  # the run YAML's server list (atroposlib's OPENAI_NAMESPACE)


class _ChatTemplateIds:
    """A tokenizer whose `apply_chat_template` returns ids (not a BatchEncoding) when it tokenizes."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    def apply_chat_template(self, conversation: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("tokenize", True):
            kwargs["return_dict"] = False
        return self._tokenizer.apply_chat_template(conversation, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)


def _fix_tokenize_for_trainer() -> None:
    import atroposlib.utils.tokenize_for_trainer as module

    original = module.tokenize_for_trainer
    if getattr(original, _APPLIED, False):
        return

    @functools.wraps(original)
    def tokenize_for_trainer(tokenizer: Any, chat: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return original(_ChatTemplateIds(tokenizer), chat, *args, **kwargs)  # type: ignore[no-any-return]

    setattr(tokenize_for_trainer, _APPLIED, True)
    # every module that already bound the name (atroposlib's own helpers) gets the fixed one too
    for loaded in list(sys.modules.values()):
        if getattr(loaded, "tokenize_for_trainer", None) is original:
            loaded.tokenize_for_trainer = tokenize_for_trainer  # type: ignore[attr-defined]


def _fix_server_configs() -> None:
    import atroposlib.envs.base as base
    from atroposlib.envs.server_handling.server_manager import APIServerConfig, ServerBaseline

    original = base.resolve_openai_configs
    if getattr(original, _APPLIED, False):
        return

    @functools.wraps(original)
    def resolve_openai_configs(
        default_server_configs: Any,
        openai_config_dict: dict[str, Any],
        yaml_config: dict[str, Any],
        *args: Any,
        **kw: Any,
    ) -> Any:
        configs = original(default_server_configs, openai_config_dict, yaml_config, *args, **kw)
        if isinstance(configs, APIServerConfig):
            return [configs]
        if isinstance(configs, ServerBaseline) and yaml_config.get(OPENAI_SECTION):  # a baseline the YAML overrides
            return [APIServerConfig(**{**configs.model_dump(), **openai_config_dict})]
        return configs

    setattr(resolve_openai_configs, _APPLIED, True)
    base.resolve_openai_configs = resolve_openai_configs


def _fix_rollouts_past_the_last_step() -> None:
    from atroposlib.envs.base import BaseEnv

    original = BaseEnv.get_status
    if getattr(original, _APPLIED, False):
        return

    @functools.wraps(original)
    async def get_status(self: Any) -> None:
        await original(self)
        status, config = self.status_dict, self.config
        if config.total_steps > 0 and status.get("current_step", 0) >= config.total_steps:
            # env_manager ends when current_step + queue_size * group_size // batch_size > total_steps
            whole_batch = -(-config.batch_size // max(config.group_size, 1))
            status["queue_size"] = max(int(status.get("queue_size") or 0), whole_batch)

    setattr(get_status, _APPLIED, True)
    BaseEnv.get_status = get_status  # type: ignore[method-assign]


def _fix_registration_patience() -> None:
    import asyncio
    import time

    from atroposlib.envs.base import BaseEnv

    original = BaseEnv._register_env
    if getattr(original, _APPLIED, False):
        return

    @functools.wraps(original)
    async def _register_env(self: Any) -> Any:
        deadline = time.monotonic() + REGISTER_PATIENCE_S
        while True:
            try:
                return await original(self)
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(REGISTER_RETRY_S)

    setattr(_register_env, _APPLIED, True)
    BaseEnv._register_env = _register_env  # type: ignore[method-assign]


def apply() -> None:
    """Apply the four fixes (idempotent); before the environment's file is imported."""
    _fix_tokenize_for_trainer()
    _fix_server_configs()
    _fix_rollouts_past_the_last_step()
    _fix_registration_patience()
