"""Adder (v1): sum two numbers with an `add` tool (a verifiers v1 Toolset, an MCP server per rollout).

A reply without a tool call is answered with a hint as the user's next turn, until `max_turns`
replies, so every episode is multi-turn whatever the model writes (a 135M model never calls the tool
by itself): its later turns carry user or tool messages that are not the model's, and those must be
masked out of training. Played by verifiers' tool-less chat harness `null`, with the task's tools.
"""

import verifiers.v1 as vf
from pydantic import Field

HINT = 'Call the tool first, like <tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'


class AddToolset(vf.Toolset[vf.ToolsetConfig, vf.State]):
    TOOL_PREFIX = None  # the bare name `add`

    @vf.tool
    async def add(self, a: int, b: int) -> int:
        """Add two integers and return the sum."""
        return a + b


class AddData(vf.TaskData):
    a: int
    b: int


def replies(trace: vf.Trace) -> list[vf.AssistantMessage]:
    messages = trace.branches[-1].messages if trace.branches else []
    return [m for m in messages if isinstance(m, vf.AssistantMessage)]


class AddTask(vf.Task[AddData, vf.State, vf.TaskConfig]):
    @classmethod
    def toolsets(cls, config: vf.TaskConfig) -> list[vf.Toolset]:
        return [AddToolset(vf.ToolsetConfig())]

    @vf.reward(weight=1.0)
    async def answered(self, task: AddData, trace: vf.Trace) -> float:
        """1 when the last reply holds the sum."""
        last = replies(trace)[-1:]
        return float(bool(last) and str(task.a + task.b) in vf.types.content_text(last[0].content or ""))

    @vf.metric
    async def tool_calls(self, trace: vf.Trace) -> float:
        return float(sum(len(m.tool_calls or []) for m in replies(trace)))


class AddTasksetConfig(vf.TasksetConfig):
    num_tasks: int = Field(16, ge=1, description="How many questions")
    seed: int = Field(0, ge=0, description="Offset of the generated numbers")


class AddTaskset(vf.Taskset[AddTask, AddTasksetConfig]):
    def load(self):
        for i in range(self.config.num_tasks):
            a, b = self.config.seed + 11 + i, self.config.seed + 23 + 3 * i
            data = AddData(
                name=f"add-{i}",
                a=a,
                b=b,
                prompt=f"What is {a} + {b}?",
                system_prompt="Use the add tool to add numbers, then reply with the sum alone.",
            )
            yield AddTask(data, self.config.task)


class AdderEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(harness={"id": "null"}, runtime=vf.SubprocessConfig())
    taskset: AddTasksetConfig = AddTasksetConfig()
    max_turns: int = Field(2, ge=1, description="Model replies per episode, each hint answered")


class HintingEnv(vf.Env[AdderEnvConfig]):
    """The single-agent env, except that a reply without a tool call gets a hint instead of ending."""

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        async with agents.agent.interaction(task) as chat:
            segment = await chat.turn()
            for _ in range(self.config.max_turns - 1):
                called = any(isinstance(m, vf.ToolMessage) for m in segment.messages)
                if segment.terminated or called:
                    return
                segment = await chat.turn(HINT)


def load_environment(config: AdderEnvConfig) -> vf.Env:
    """Add two numbers with the `add` tool, scored by whether the last reply holds the sum."""
    return HintingEnv(config.model_copy(update={"taskset": config.taskset.model_copy(update={"id": __name__})}))


__all__ = ["AddTaskset", "HintingEnv"]

if __name__ == "__main__":  # the toolset's MCP server: `python -m adder_tools_v1`
    AddToolset.run()
