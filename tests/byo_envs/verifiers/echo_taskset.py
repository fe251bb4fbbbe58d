"""Echo: repeat a word back (a verifiers v1 Taskset, never imported by the tests).

Played by verifiers' tool-less chat harness `null`: the default `bash` would hand a 135M model
shell tools it cannot call, run on this machine under the subprocess runtime.
"""

from typing import Literal

import verifiers.v1 as vf
from pydantic import Field

WORDS = ("amber", "basil", "cedar", "delta", "ember")


class EchoTasksetConfig(vf.TasksetConfig):
    repeats: int = 1
    style: Literal["plain", "shout"] = "plain"


class EchoEnvConfig(vf.EnvConfig):
    num_tasks: int = Field(20, ge=1, le=1000, description="Tasks in the train split")
    case_sensitive: bool = False
    taskset: EchoTasksetConfig = EchoTasksetConfig(repeats=2)


class EchoRunConfig(EchoTasksetConfig):
    """What the taskset reads: a Taskset gets only its own config, so the env's knobs ride along."""

    num_tasks: int = 20
    case_sensitive: bool = False


class EchoData(vf.TaskData):
    word: str
    case_sensitive: bool = False


class EchoTask(vf.Task[EchoData, vf.State, vf.TaskConfig]):
    @vf.reward(weight=1.0)
    async def echoed(self, task: EchoData, trace: vf.Trace) -> float:
        replies = [m for m in (trace.branches[-1].messages if trace.branches else []) if m.role == "assistant"]
        reply = vf.types.content_text(replies[-1].content) if replies and replies[-1].content else ""
        if task.case_sensitive:
            return float(task.word in reply)
        return float(task.word.lower() in reply.lower())


class EchoTaskset(vf.Taskset[EchoTask, EchoRunConfig]):
    def load(self):
        times = self.config.repeats
        for i in range(self.config.num_tasks):
            word = WORDS[i % len(WORDS)]
            word = word.upper() if self.config.style == "shout" else word
            data = EchoData(
                name=f"echo-{i}",
                word=word,
                case_sensitive=self.config.case_sensitive,
                prompt=f"Say '{word}' {times} time(s), nothing else.",
            )
            yield EchoTask(data, self.config.task)


def load_environment(config: EchoEnvConfig) -> vf.Env:
    """Echo a word back, scored by whether the reply contains it."""
    knobs = {"id": __name__, "num_tasks": config.num_tasks, "case_sensitive": config.case_sensitive}
    taskset = EchoRunConfig(**{**config.taskset.model_dump(), **knobs})
    agent = vf.AgentConfig(harness={"id": "null"}, runtime=vf.SubprocessConfig())
    return vf.SingleAgentEnv(vf.SingleAgentEnvConfig(taskset=taskset, agent=agent))


__all__ = ["EchoTaskset"]
