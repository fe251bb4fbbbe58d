"""A toy environment format from outside the product: a Python file with a top-level
`QA_PAIRS = [(question, answer), ...]` is an environment `qa:<file stem>`, run by `QaPairsEnv` below
with `qa_file` set to it. The server imports this file for its format; atroposlib is imported only
where the environment runs (the class is made on first use), so the server stays light."""

from __future__ import annotations

import ast
import dataclasses
import functools
import string
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rl_mcp.environments.packages.folder import PackageFolder
from rl_mcp.environments.records import ConfigSchema, EnvironmentInfo
from rl_mcp.formats.base import EnvironmentFormat, FieldPlaces

NAME = "qa-pairs"
VARIABLE = "QA_PAIRS"
HOST_CLASS = "QaPairsEnv"
HOST_FILE = Path(__file__).resolve()


def _pairs(tree: ast.Module) -> tuple[int, list[tuple[str, str]]] | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [VARIABLE]:
            try:
                return node.lineno, [(str(q), str(a)) for q, a in ast.literal_eval(node.value)]
            except (ValueError, TypeError):
                return None
    return None


def read_pairs(path: Path) -> list[tuple[str, str]]:
    found = _pairs(ast.parse(path.read_text()))
    if found is None:
        raise ValueError(f"{path} has no {VARIABLE} list of (question, answer) pairs")
    return found[1]


class QaPairsFormat(EnvironmentFormat):
    name = NAME
    summary = "a file of QA_PAIRS (a plugin's)"
    note = " It is a file of question-answer pairs, run by the qa-pairs plugin."

    def read_module(self, tree: ast.Module) -> tuple[int, list[tuple[str, str]]] | None:
        return _pairs(tree)

    def file_environment(
        self, found: tuple[int, list[tuple[str, str]]], path: Path, env_dir: Path, package: PackageFolder | None
    ) -> EnvironmentInfo:
        line, pairs = found
        return EnvironmentInfo(
            name=f"qa:{path.stem}",
            class_name=HOST_CLASS,
            file=path,
            env_dir=env_dir,
            line=line,
            description=f"{len(pairs)} question-answer pairs",
            config_class="QaPairsConfig",
            format=NAME,
        )

    def fields_of(self, info: EnvironmentInfo) -> EnvironmentInfo:
        return dataclasses.replace(info, file=HOST_FILE)

    def schema(self, info: EnvironmentInfo, read: ConfigSchema, places: FieldPlaces) -> ConfigSchema:
        return read.without(("qa_file",), environment=info.name, run_source={"qa_file": str(info.file)})

    def process_file(self, env_file: Path) -> Path | None:
        return HOST_FILE if _pairs(ast.parse(env_file.read_text())) is not None else None

    def runs(self, env: Mapping[str, Any]) -> bool:
        return bool(env.get("qa_file"))


@functools.cache
def _host() -> type:
    """The environment class, made where it runs (atroposlib imported then)."""
    from pydantic import Field

    from tinker_atropos.environments.common import ChatTaskConfig, ChatTaskEnv, Score, Task, local_server_defaults
    from tinker_atropos.environments.letter_repeat import letter_reward

    class QaPairsConfig(ChatTaskConfig):
        qa_file: str = Field(default="", description="The file of QA_PAIRS (set by the server)")

    class QaPairsEnv(ChatTaskEnv):
        name = "qa_pairs"
        env_config_cls = QaPairsConfig

        @classmethod
        def config_init(cls) -> tuple[QaPairsConfig, list[Any]]:
            servers = local_server_defaults()
            config = QaPairsConfig(
                tokenizer_name=servers[0].tokenizer_name,
                group_size=4,
                batch_size=8,
                max_token_length=128,
                max_completion_tokens=8,
                eval_size=4,
                steps_per_eval=10,
                use_wandb=False,
            )
            return config, servers

        def load_tasks(self) -> tuple[list[Task], list[Task]]:
            tasks = [Task(q, a) for q, a in read_pairs(Path(self.config.qa_file))]
            return tasks, tasks[: self.config.eval_size]

        def messages(self, task: Task) -> list[dict[str, str]]:
            return [{"role": "user", "content": task.prompt}]

        def score(self, task: Task, reply: str) -> Score:
            # credit per character (dense, so a tiny random model's groups differ)
            reward = letter_reward(reply, task.answer[0], len(task.answer), string.ascii_lowercase, 0.25, 0.05)
            return Score(reward, reply.strip() == task.answer)

    return QaPairsEnv


def __getattr__(name: str) -> Any:  # the introspection child asks the module for the class by name
    if name == HOST_CLASS:
        return _host()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    sys.exit(_host().cli())
