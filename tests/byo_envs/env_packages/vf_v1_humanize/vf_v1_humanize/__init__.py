"""Separators: write a number with commas between its thousands (a verifiers-v1 Taskset on the `null`
harness, whose answers come from `humanize`)."""

import humanize
import verifiers.v1 as vf
from pydantic import Field

NUMBERS = [1200, 45000, 987654, 1000000, 31415, 2718]


class SeparatedData(vf.TaskData):
    answer: str


class SeparatedTask(vf.Task[SeparatedData, vf.State, vf.TaskConfig]):
    @vf.reward(weight=1.0)
    async def separated(self, task: SeparatedData, trace: vf.Trace) -> float:
        """1 when the last reply holds the number with its commas."""
        messages = trace.branches[-1].messages if trace.branches else []
        replies = [m for m in messages if m.role == "assistant"]
        return float(bool(replies) and task.answer in vf.types.content_text(replies[-1].content or ""))


class SeparatedTasksetConfig(vf.TasksetConfig):
    num_tasks: int = Field(6, ge=1, description="How many numbers")


class SeparatedTaskset(vf.Taskset[SeparatedTask, SeparatedTasksetConfig]):
    def load(self):
        for i in range(self.config.num_tasks):
            number = NUMBERS[i % len(NUMBERS)]
            data = SeparatedData(
                name=f"separated-{i}", answer=humanize.intcomma(number), prompt=f"Write {number} with commas."
            )
            yield SeparatedTask(data, self.config.task)


class SeparatedEnvConfig(vf.EnvConfig):
    taskset: SeparatedTasksetConfig = SeparatedTasksetConfig()


def load_environment(config: SeparatedEnvConfig) -> vf.Env:
    """Write a number with commas between its thousands, scored by whether the reply holds it so."""
    taskset = config.taskset.model_copy(update={"id": __name__})
    agent = vf.AgentConfig(harness={"id": "null"}, runtime=vf.SubprocessConfig())
    return vf.SingleAgentEnv(vf.SingleAgentEnvConfig(taskset=taskset, agent=agent))


__all__ = ["SeparatedTaskset"]
