"""Four items that every reply solves: each group ties at the top reward (atroposlib drops it), so
the product's draw retires each item after its window of groups and the run ends as completed."""

from __future__ import annotations

from tinker_atropos.environments.common import ChatTaskConfig, ChatTaskEnv, Score, Task, local_server_defaults

ITEMS = [Task(f"Say anything, number {i}.", "") for i in range(4)]


class SolvedItemsEnv(ChatTaskEnv):
    name = "solved_items"

    @classmethod
    def config_init(cls):
        servers = local_server_defaults()
        config = ChatTaskConfig(
            wandb_name=cls.name,
            tokenizer_name=servers[0].tokenizer_name,
            group_size=4,
            batch_size=8,
            max_completion_tokens=4,
            eval_size=0,
            use_wandb=False,
        )
        return config, servers

    def load_tasks(self) -> tuple[list[Task], list[Task]]:
        return ITEMS, []

    def messages(self, task: Task) -> list[dict[str, str]]:
        return [{"role": "user", "content": task.prompt}]

    def score(self, task: Task, reply: str) -> Score:
        return Score(1.0, True)


if __name__ == "__main__":
    SolvedItemsEnv.cli()
