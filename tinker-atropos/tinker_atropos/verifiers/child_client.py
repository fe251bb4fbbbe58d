"""The host's side of the verifiers child (classic_child.py): start it in its venv, send group
requests, match the answers by id. One child per environment process, for its whole life: loading
an environment (its dataset, its rubric) is paid once."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
from collections import deque
from pathlib import Path
from typing import Any

from tinker_atropos.venvs import Generation
from tinker_atropos.verifiers.child_lines import KEY_VAR

STDERR_LINES = 40  # the child's last lines of stderr, quoted when it fails


class VerifiersChildError(RuntimeError):
    """The child could not load the environment, died, or the environment raised in a group."""


class VerifiersChild:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.train_rows = self.eval_rows = 0
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[list[dict[str, Any]]]] = {}
        self._stderr: deque[str] = deque(maxlen=STDERR_LINES)
        self._relay = asyncio.create_task(self._relay_stderr())
        self._reader: asyncio.Task[None] | None = None

    @classmethod
    async def start(
        cls,
        generation: Generation,
        source: dict[str, str],
        args: dict[str, Any],
        api_key: str,
        timeout_s: float,
        options: list[str],
        venv: str | None = None,
    ) -> VerifiersChild:
        """The child of `generation`, its environment loaded; `source`: {"file": path} or {"module":
        name}; `options`: more of the child's command-line options; `venv`: an environment folder's
        own venv (layered on the generation's), else the generation's."""
        ((kind, where),) = source.items()
        python = Path(venv) / "bin" / "python" if venv else generation.python(os.environ)
        proc = await asyncio.create_subprocess_exec(
            str(python),
            str(generation.child_file),
            f"--{kind}",
            where,
            "--args",
            json.dumps(args),
            *options,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, KEY_VAR: api_key, "PYTHONUNBUFFERED": "1"},
            limit=1 << 26,
        )
        child = cls(proc)
        assert proc.stdout is not None
        try:
            head = await asyncio.wait_for(proc.stdout.readline(), timeout_s)
        except TimeoutError:
            await child.close()
            raise VerifiersChildError(f"the verifiers environment did not load within {timeout_s:.0f} s") from None
        ready = json.loads(head) if head.strip() else {"error": "the verifiers child exited while loading"}
        if not ready.get("ready"):
            await proc.wait()
            await asyncio.wait([child._relay], timeout=5)  # the relay reads its stderr to the end
            await child.close()
            raise VerifiersChildError(f"{ready.get('error')} (exit code {proc.returncode}); {child._tail()}")
        child.train_rows, child.eval_rows = int(ready["train"]), int(ready["eval"])
        child._reader = asyncio.create_task(child._read())
        return child

    async def group(self, split: str, index: int, n: int, model: str, base_url: str, sampling: dict[str, Any]) -> Any:
        """n rollouts of one row (see classic_child.py for their fields)."""
        if self.proc.returncode is not None:
            raise VerifiersChildError(self._died())
        request_id = next(self._ids)
        future: asyncio.Future[list[dict[str, Any]]] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        request = dict(id=request_id, split=split, index=index, n=n, model=model, base_url=base_url, sampling=sampling)
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        await self.proc.stdin.drain()
        try:
            return await future
        finally:
            self._waiting.pop(request_id, None)

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            reply = json.loads(raw)
            future = self._waiting.get(reply.get("id"))
            if future is None or future.done():
                continue
            if "error" in reply:
                future.set_exception(VerifiersChildError(f"the verifiers environment raised {reply['error']}"))
            else:
                future.set_result(reply["rollouts"])
        await self.proc.wait()
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(VerifiersChildError(self._died()))

    async def _relay_stderr(self) -> None:
        assert self.proc.stderr is not None
        async for raw in self.proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            self._stderr.append(line)
            print(f"[verifiers] {line}", file=sys.stderr, flush=True)

    def _tail(self) -> str:
        return "its last lines:\n" + "\n".join(self._stderr)

    def _died(self) -> str:
        return f"the verifiers child exited (code {self.proc.returncode}); {self._tail()}"

    async def close(self) -> None:
        if self.proc.returncode is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                await asyncio.wait_for(self.proc.wait(), 5)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        for task in (self._reader, self._relay):
            if task is not None:
                task.cancel()
