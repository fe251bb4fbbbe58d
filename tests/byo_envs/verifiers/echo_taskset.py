"""Echo: repeat a word back (a verifiers v1 Taskset with its default harness, never imported by the tests)."""

from typing import Literal

import verifiers as vf
from pydantic import Field

WORDS = ("amber", "basil", "cedar", "delta", "ember")


class EchoTasksetConfig(vf.TasksetConfig):
    repeats: int = 1
    style: Literal["plain", "shout"] = "plain"


class EchoEnvConfig(vf.EnvConfig):
    num_tasks: int = Field(20, ge=1, le=1000, description="Tasks in the train split")
    case_sensitive: bool = False
    taskset: EchoTasksetConfig = EchoTasksetConfig(repeats=2)


class EchoTask(vf.Task):
    word: str


class EchoTaskset(vf.Taskset[EchoTasksetConfig]):
    task_type = EchoTask

    def __init__(self, config: EchoTasksetConfig, num_tasks: int) -> None:
        super().__init__(config=config)
        self.num_tasks = num_tasks

    def load_tasks(self, split: vf.TaskSplit = "train") -> vf.Tasks:
        words = [WORDS[i % len(WORDS)] for i in range(self.num_tasks)]
        times = self.config.repeats
        return [
            {"word": w, "prompt": [{"role": "user", "content": f"Say '{w}' {times} time(s), nothing else."}]}
            for w in words
        ]

    @vf.reward(weight=1.0)
    async def echoed(self, task: EchoTask, state: vf.State) -> float:
        messages = vf.get_messages(state.completion or [], role="assistant")
        reply = str(messages[-1].content or "") if messages else ""
        return float(task.word.lower() in reply.lower())


def load_environment(config: EchoEnvConfig) -> vf.Env:
    """Echo a word back, scored by whether the reply contains it."""
    return vf.Env(
        taskset=EchoTaskset(config=config.taskset, num_tasks=config.num_tasks),
        harness=vf.Harness(config=config.harness),
    )
