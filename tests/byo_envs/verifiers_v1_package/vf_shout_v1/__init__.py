"""Shout: write a word in capitals (a verifiers-v1 Taskset on the `null` harness, installed as a package)."""

import verifiers.v1 as vf
from pydantic import Field

from .words import WORDS


class ShoutData(vf.TaskData):
    word: str


class ShoutTask(vf.Task[ShoutData, vf.State, vf.TaskConfig]):
    @vf.reward(weight=1.0)
    async def shouted(self, task: ShoutData, trace: vf.Trace) -> float:
        """1 when the last reply holds the word in capitals."""
        messages = trace.branches[-1].messages if trace.branches else []
        replies = [m for m in messages if m.role == "assistant"]
        return float(bool(replies) and task.word.upper() in vf.types.content_text(replies[-1].content or ""))


class ShoutTasksetConfig(vf.TasksetConfig):
    num_tasks: int = Field(8, ge=1, description="How many words")


class ShoutTaskset(vf.Taskset[ShoutTask, ShoutTasksetConfig]):
    def load(self):
        for i in range(self.config.num_tasks):
            word = WORDS[i % len(WORDS)]
            yield ShoutTask(
                ShoutData(name=f"shout-{i}", word=word, prompt=f"Write '{word}' in capitals."), self.config.task
            )


class ShoutEnvConfig(vf.EnvConfig):
    taskset: ShoutTasksetConfig = ShoutTasksetConfig()


def load_environment(config: ShoutEnvConfig) -> vf.Env:
    """Write a word in capitals, scored by whether the reply holds it so."""
    taskset = config.taskset.model_copy(update={"id": __name__})
    agent = vf.AgentConfig(harness={"id": "null"}, runtime=vf.SubprocessConfig())
    return vf.SingleAgentEnv(vf.SingleAgentEnvConfig(taskset=taskset, agent=agent))


__all__ = ["ShoutTaskset"]
