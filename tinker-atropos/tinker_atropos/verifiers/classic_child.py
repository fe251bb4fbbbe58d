"""Runs in the classic verifiers venv (verifiers 0.1.14), never in the product's: stdlib and verifiers only.

    python classic_child.py --file ENV.py --args '{"num_examples": 8}'

Loads the environment with `load_environment(**args)` (a file's, or an installed package's with
`--module`), then answers JSON lines on stdin, one request each, concurrently:

    {"id": 3, "split": "train", "index": 5, "n": 8, "model": "...", "base_url": ".../v1",
     "sampling": {"temperature": 1.0, "max_tokens": 256}}

with one JSON line on stdout: `{"id": 3, "rollouts": [...]}` or `{"id": 3, "error": "..."}`. A
rollout is the rubric's reward and metrics, the error and stop condition, the messages, and per
model turn the exact token ids and sampling logprobs the server returned (None where it returned
none). The first line is `{"ready": true, "train": N, "eval": M}`, or `{"error": ...}` before an
exit. Everything else the environment prints goes to stderr: stdout carries only these lines.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

from child_lines import KEY_VAR, load_failed, private_stdout, serve  # a sibling: this runs as a script


def _load(file: str | None, module: str | None, args: dict[str, Any]) -> Any:
    if module is not None:
        import verifiers as vf

        return vf.load_environment(module, **args)
    assert file is not None
    path = Path(file).resolve()
    sys.path.insert(0, str(path.parent))  # sibling imports, as `python <file>` has them
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod
    spec.loader.exec_module(mod)
    return mod.load_environment(**args)


def _message(msg: Any) -> dict[str, Any]:
    """A chat message as plain JSON (verifiers 0.1.14 has pydantic messages; older ones dicts)."""
    data = msg.model_dump(exclude_none=True) if hasattr(msg, "model_dump") else dict(msg)
    data["content"] = data.get("content") or ""  # atroposlib's messages always have one
    return json.loads(json.dumps(data, default=str))


def _turn(step: dict[str, Any]) -> dict[str, Any] | None:
    tokens = step.get("tokens")
    if not tokens or not tokens.get("completion_ids"):
        return None
    return {
        "prompt_ids": list(tokens["prompt_ids"]),
        "completion_ids": list(tokens["completion_ids"]),
        "completion_logprobs": [float(x) for x in tokens.get("completion_logprobs") or []] or None,
    }


def _rollout(output: dict[str, Any]) -> dict[str, Any]:
    error = output.get("error")
    metrics = {k: float(v) for k, v in (output.get("metrics") or {}).items() if isinstance(v, (int, float))}
    return {
        "reward": float(output.get("reward") or 0.0),
        "metrics": metrics,
        "error": None if not error else str(error.get("error") if isinstance(error, dict) else error),
        "truncated": bool(output.get("is_truncated")),
        "stop": output.get("stop_condition"),
        "prompt": [_message(m) for m in output.get("prompt") or []],
        "completion": [_message(m) for m in output.get("completion") or []],
        "turns": [_turn(step) for step in output.get("trajectory") or []],
    }


class Child:
    """The loaded environment, answering group requests."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.splits = {"train": env.get_dataset(), "eval": env.get_eval_dataset()}
        self.clients: dict[str, Any] = {}

    def _client(self, base_url: str) -> Any:
        from verifiers.types import ClientConfig

        if base_url not in self.clients:
            os.environ.setdefault(KEY_VAR, "local")
            self.clients[base_url] = ClientConfig(
                client_type="openai_chat_completions", api_base_url=base_url, api_key_var=KEY_VAR, max_retries=0
            )
        return self.clients[base_url]

    def _sampling(self, asked: dict[str, Any]) -> dict[str, Any]:
        """The environment's sampling args, ours over them, and the token ids and logprobs to train on."""
        own = dict(self.env.sampling_args or {})
        extra = {**(own.pop("extra_body", None) or {}), "return_token_ids": True}
        own.pop("n", None)  # one reply per rollout: the group is n rollouts
        return {**own, **asked, "logprobs": True, "extra_body": extra}

    async def group(self, req: dict[str, Any]) -> list[dict[str, Any]]:
        row = dict(self.splits[req["split"]][int(req["index"])])
        outputs = await self.env.run_group(
            [dict(row) for _ in range(int(req["n"]))],
            self._client(req["base_url"]),
            req["model"],
            self._sampling(req.get("sampling") or {}),
            state_columns=["trajectory"],
        )
        return [_rollout(o) for o in outputs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--file")
    where.add_argument("--module")
    parser.add_argument("--args", default="{}", help="load_environment's keyword arguments, as JSON")
    opts = parser.parse_args()
    out = private_stdout()
    try:
        child = Child(_load(opts.file, opts.module, json.loads(opts.args)))
    except Exception as exc:
        load_failed(out, exc)
    asyncio.run(serve(child.group, out, len(child.splits["train"]), len(child.splits["eval"])))


if __name__ == "__main__":
    main()
