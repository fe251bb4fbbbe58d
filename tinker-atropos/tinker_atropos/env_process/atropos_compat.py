"""atroposlib 0.4 as this product runs it: five fixes applied in every environment process.

Users bring Atropos environments written against atroposlib 0.4 and run them unchanged. Five
things in atroposlib break or slow them here without an error, so `apply()` (called by the
environment launcher before the environment's file is imported, and by `RunEnv`; site-packages is
never edited) fixes them:

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
   the environment then exited before it was ready. It is asked again for REGISTER_PATIENCE_S,
   and while run-api answers that the trainer has not started, every REGISTER_POLL_S (not 1 s).
5. `env_manager` sleeps a fixed 5 s after registering ("wait for other instances to get setup")
   before its first rollout. A run here has one environment: atroposlib.envs.base sees an asyncio
   whose sleep of exactly that length returns at once (the only such sleep there;
   tests/test_environments.py pins it).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

_APPLIED = "_tinker_atropos_compat"
REGISTER_PATIENCE_S = 60.0
REGISTER_RETRY_S = 0.2
REGISTER_POLL_S = 0.1
ATROPOS_START_PAUSE_S = 5
OPENAI_SECTION = "openai"  # the run YAML's server list (atroposlib's OPENAI_NAMESPACE)


def _replace(owner: Any, name: str, fixed_from: Callable[[Any], Any]) -> tuple[Any, Any] | None:
    """`owner.name` becomes `fixed_from(original)`, marked, once; (original, fixed), or None when
    an earlier apply() already replaced it."""
    original = getattr(owner, name)
    if getattr(original, _APPLIED, False):
        return None
    fixed = functools.wraps(original)(fixed_from(original))
    setattr(fixed, _APPLIED, True)
    setattr(owner, name, fixed)
    return original, fixed


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

    def fixed_from(original: Any) -> Any:
        def tokenize_for_trainer(tokenizer: Any, chat: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
            return original(_ChatTemplateIds(tokenizer), chat, *args, **kwargs)  # type: ignore[no-any-return]

        return tokenize_for_trainer

    if (replaced := _replace(module, "tokenize_for_trainer", fixed_from)) is None:
        return
    original, fixed = replaced
    # every module that already bound the name (atroposlib's own helpers) gets the fixed one too
    for loaded in list(sys.modules.values()):
        if getattr(loaded, "tokenize_for_trainer", None) is original:
            loaded.tokenize_for_trainer = fixed  # type: ignore[attr-defined]


def _fix_server_configs() -> None:
    import atroposlib.envs.base as base
    from atroposlib.envs.server_handling.server_manager import APIServerConfig, ServerBaseline

    def fixed_from(original: Any) -> Any:
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

        return resolve_openai_configs

    _replace(base, "resolve_openai_configs", fixed_from)


def _fix_rollouts_past_the_last_step() -> None:
    from atroposlib.envs.base import BaseEnv

    def fixed_from(original: Any) -> Any:
        async def get_status(self: Any) -> None:
            await original(self)
            status, config = self.status_dict, self.config
            if config.total_steps > 0 and status.get("current_step", 0) >= config.total_steps:
                # env_manager ends when current_step + queue_size * group_size // batch_size > total_steps
                whole_batch = -(-config.batch_size // max(config.group_size, 1))
                status["queue_size"] = max(int(status.get("queue_size") or 0), whole_batch)

        return get_status

    _replace(BaseEnv, "get_status", fixed_from)


def _fix_registration_patience() -> None:
    from atroposlib.envs.base import BaseEnv

    def fixed_from(original: Any) -> Any:
        async def _register_env(self: Any) -> Any:
            deadline, waiting_logged = time.monotonic() + REGISTER_PATIENCE_S, False
            while True:
                try:
                    data = await original(self)
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(REGISTER_RETRY_S)
                    continue
                if data.get("status") == "success":
                    return data
                if not waiting_logged:
                    logger.info("run-api answered %r; asking again every %.1f s", data.get("status"), REGISTER_POLL_S)
                    waiting_logged = True
                await asyncio.sleep(REGISTER_POLL_S)

        return _register_env

    _replace(BaseEnv, "_register_env", fixed_from)


class _AsyncioWithoutStartPause:
    """asyncio as atroposlib.envs.base uses it, less the start pause."""

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    @staticmethod
    async def sleep(delay: float, result: Any = None) -> Any:
        return await asyncio.sleep(0 if delay == ATROPOS_START_PAUSE_S else delay, result)


def _fix_start_pause() -> None:
    import atroposlib.envs.base as base

    if not isinstance(base.asyncio, _AsyncioWithoutStartPause):
        base.asyncio = _AsyncioWithoutStartPause()  # type: ignore[assignment]


def apply() -> None:
    """Apply the five fixes (idempotent); before the environment's file is imported."""
    _fix_tokenize_for_trainer()
    _fix_server_configs()
    _fix_rollouts_past_the_last_step()
    _fix_registration_patience()
    _fix_start_pause()
