"""OpenEnv environments the tests build with OpenEnv's public API (`openenv init`, `Environment`,
`MCPEnvironment`, `create_app`), served from the openenv runtime (`make openenv`: `mcp-server-rl setup openenv`)."""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tinker_atropos.venvs import OPENENV

ROOT = Path(__file__).resolve().parents[1]
OPENENV_VENV = OPENENV.python(os.environ).parent

REVERSE_MODELS = '''
from openenv.core.env_server.types import Action, Observation
from pydantic import Field


class WordReverseAction(Action):
    """Answer with the word spelled backwards."""

    answer: str = Field(..., description="The word, reversed")


class WordReverseObservation(Observation):
    task: str = Field(default="", description="What to do")
'''

REVERSE_ENVIRONMENT = '''
from typing import Any, Optional
from uuid import uuid4

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import State

from models import WordReverseAction, WordReverseObservation


class WordReverseEnvironment(Environment):
    """Reverse the word reset() was given: reward 1 for the exact reversal, else 0; one step."""

    SUPPORTS_CONCURRENT_SESSIONS: bool = True

    def __init__(self):
        self._state = State(episode_id=str(uuid4()), step_count=0)
        self._word = ""

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, word: str = "stressed", **kw: Any):
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        self._word = word
        return WordReverseObservation(task=f"Reverse the word {word!r}.", done=False, reward=0.0)

    def step(self, action: WordReverseAction):  # type: ignore[override]
        self._state.step_count += 1
        right = action.answer.strip() == self._word[::-1]
        return WordReverseObservation(task="", done=True, reward=1.0 if right else 0.0)

    @property
    def state(self) -> State:
        return self._state
'''


@functools.cache
def _initialised(name: str) -> Path:
    """`openenv init name` run once a test process (4.5 CPU s each), in a folder removed at its exit."""
    root = Path(tempfile.mkdtemp(prefix="openenv-init-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    subprocess.run([str(OPENENV_VENV / "openenv"), "init", name, "-o", str(root)], check=True, capture_output=True)
    return root / name


def typed_env(root: Path, environment: str = REVERSE_ENVIRONMENT) -> Path:
    """`openenv init`'s template, given a real task: reverse a word, paid 1 for the exact reversal."""
    name = "word_reverse"
    root.mkdir(parents=True, exist_ok=True)
    folder = root / name
    shutil.copytree(_initialised(name), folder)
    (folder / "models.py").write_text(REVERSE_MODELS)
    (folder / "server" / f"{name}_environment.py").write_text(environment)
    app = (folder / "server" / "app.py").read_text()
    assert "WordReverseAction" in app and "WordReverseEnvironment" in app, app  # the template's own names
    return folder


def template_env(root: Path) -> Path:
    """`openenv init`'s template as it comes: its action's one required field a string, `message`,
    echoed back, each step paid 0.1 a character up to 1, never `done`."""
    folder = root / "template"
    shutil.copytree(_initialised("word_reverse"), folder)
    return folder


# the same environment, its server killed by its first step (exit code 3)
CRASHING_ENVIRONMENT = REVERSE_ENVIRONMENT.replace(
    "        self._state.step_count += 1\n",
    "        self._state.step_count += 1\n        import os\n        os._exit(3)\n",
)
# the same environment, not safe to share a server between sessions
SERIAL_ENVIRONMENT = REVERSE_ENVIRONMENT.replace(
    "SUPPORTS_CONCURRENT_SESSIONS: bool = True", "SUPPORTS_CONCURRENT_SESSIONS: bool = False"
)


MCP_ENVIRONMENT = '''
from typing import Any, Optional
from uuid import uuid4

from fastmcp import FastMCP
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.env_server.types import Observation, State


class ProductEnvironment(MCPEnvironment):
    """Multiply two numbers with the `multiply` tool, then `submit` the product: 1 if right, the episode ends."""

    SUPPORTS_CONCURRENT_SESSIONS: bool = True

    def __init__(self):
        mcp = FastMCP("product")
        self._a, self._b, self._paid = 0, 0, 0.0

        @mcp.tool
        def multiply(a: int, b: int) -> int:
            """The product of a and b."""
            return a * b

        @mcp.tool
        def submit(answer: int) -> str:
            """Submit the final answer."""
            self._paid = 1.0 if answer == self._a * self._b else 0.0
            return "correct" if self._paid else "wrong"

        super().__init__(mcp)
        self._state = State(episode_id=str(uuid4()), step_count=0)

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, a: int = 6, b: int = 7, **kw: Any):
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        self._a, self._b, self._paid = a, b, 0.0
        return Observation(done=False, reward=0.0, metadata={"task": f"What is {a} times {b}? Submit the product."})

    async def step_async(self, action, timeout_s=None, **kwargs):
        observation = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        if isinstance(action, CallToolAction) and action.tool_name == "submit":
            observation.reward, observation.done = self._paid, True
        return observation

    def _step_impl(self, action, timeout_s=None, **kwargs):
        return Observation(done=False, reward=0.0, metadata={"error": "call a tool"})

    @property
    def state(self) -> State:
        return self._state
'''

MCP_APP = """
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation

from server.product_environment import ProductEnvironment

app = create_app(ProductEnvironment, CallToolAction, CallToolObservation, env_name="product")
"""


def server_folder(root: Path, name: str, files: dict[str, str], dependencies: list[str]) -> Path:
    """An OpenEnv folder written by hand: `server/` with `files`, its openenv.yaml and pyproject."""
    folder = root / name
    (folder / "server").mkdir(parents=True)
    (folder / "server" / "__init__.py").write_text("")
    for file, text in files.items():
        (folder / "server" / file).write_text(text)
    (folder / "openenv.yaml").write_text(f"spec_version: 1\nname: {name}\nruntime: fastapi\napp: server.app:app\n")
    project = {"name": f"openenv-{name}", "version": "0.1.0", "dependencies": dependencies}
    lines = [f"{k} = {json.dumps(v)}" for k, v in project.items()]
    (folder / "pyproject.toml").write_text(
        "\n".join(["[project]", *lines, "[tool.setuptools]", 'packages = ["server"]', ""])
    )
    return folder


def mcp_env(root: Path) -> Path:
    """An MCPEnvironment: a `multiply` tool and a `submit` tool that pays."""
    files = {"product_environment.py": MCP_ENVIRONMENT, "app.py": MCP_APP}
    return server_folder(root, "product", files, ["openenv>=0.10"])


GYM_ENVIRONMENT = '''
from typing import Any, Optional
from uuid import uuid4

import reasoning_gym
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

TASK = "leg_counting"


class AnswerAction(Action):
    answer: str = Field(..., description="Your final answer")


class QuestionObservation(Observation):
    question: str = Field(default="")


class LegCountingEnvironment(Environment):
    """reasoning-gym's leg_counting: a problem per seed, its own score_answer the reward; one step.
    Its Task API lists the seeds of each split."""

    SUPPORTS_CONCURRENT_SESSIONS: bool = True

    def __init__(self):
        self._state = State(episode_id=str(uuid4()), step_count=0)
        self._data, self._entry = None, None

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kw: Any):
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        self._data = reasoning_gym.create_dataset(TASK, seed=seed or 0, size=1)
        self._entry = self._data[0]
        return QuestionObservation(question=self._entry["question"], done=False, reward=0.0)

    def step(self, action: AnswerAction):  # type: ignore[override]
        self._state.step_count += 1
        score = float(self._data.score_answer(action.answer, self._entry))
        return QuestionObservation(done=True, reward=score)

    @property
    def state(self) -> State:
        return self._state

    def list_splits(self):
        return [{"name": "train", "type": "train"}, {"name": "eval", "type": "validation"}]

    def list_tasks(self, split: str):
        return [{"seed": s} for s in (range(1, 7) if split == "train" else range(100, 102))]


app = create_app(LegCountingEnvironment, AnswerAction, QuestionObservation, env_name="leg_counting")
'''


def reasoning_gym_env(root: Path) -> Path:
    """An environment whose tasks and scores are reasoning-gym's, declared as its dependency."""
    return server_folder(root, "leg_counting", {"app.py": GYM_ENVIRONMENT}, ["openenv>=0.10", "reasoning-gym==0.1.25"])


def items_file(path: Path, *items: dict) -> Path:
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    return path
