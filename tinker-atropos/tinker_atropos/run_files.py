"""The run-directory contract between `rl_mcp` and `tinker_atropos` (docs/run-files.md).

Both sides of the process boundary read and write a run only through this module: its paths,
the trainer's exit codes, result.json, the checkpoint index and the JSONL files. Stdlib only, so
the MCP server can import it without pulling in torch or atroposlib.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from enum import IntEnum, StrEnum
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

HERMES_CONFIG = "config.yaml"  # Hermes' own config file in a HERMES_HOME (served models, episodes)


class ProcessName(StrEnum):
    """The three processes of a run; each logs to `logs/<name>.log`."""

    API = "api"
    """atroposlib's run-api: the rollout queue between environment and trainer."""
    TRAINER = "trainer"
    """launch_training.py: the trainer and the inference server in one process."""
    ENV = "env"
    """The environment's `serve`: rollouts, rewards, evaluations."""


ENV_HEALTH_VAR = "TINKER_ATROPOS_ENV_HEALTH"  # where an environment process keeps env_health.json
# An environment-process log line a user must read (e.g. its tools run unsandboxed): rl_test_inference
# answers with every line that carries it
WARNING_MARK = "[rl-mcp warning]"
MODEL_BUILD = "model"  # the offline model build before a run's processes start: logs/model.log
SFT_STAGE = "sft"  # the supervised stage before RL (tinker_atropos.sft.stage): logs/sft.log
# config.yaml's section of the trainer's settings (either backend's), and its name before 2026-12
# (`tinker`, though it held the local backend's too): a config written then is read as if renamed.
TRAINER_SECTION = "trainer"
OLD_TRAINER_SECTION = "tinker"


class ExitCode(IntEnum):
    """The trainer's exit codes; `meaning` is what a user reads when a run fails."""

    OK = 0
    ERROR = 1
    CONFIG = 2
    BACKEND = 3
    RUN_API = 4
    PORT = 5

    @property
    def meaning(self) -> str:
        return _EXIT_MEANINGS[self]


_EXIT_MEANINGS = {
    ExitCode.OK: "ran total_steps, or stopped by SIGTERM after saving",
    ExitCode.ERROR: "error during training (traceback in the trainer log)",
    ExitCode.CONFIG: "the config file is missing or invalid",
    ExitCode.BACKEND: (
        "backend unavailable (TINKER_API_KEY missing/malformed, Tinker unreachable, or model not loadable)"
    ),
    ExitCode.RUN_API: "run-api unreachable or rejected the registration",
    ExitCode.PORT: "the inference server could not bind its port",
}
_SIGNAL_MEANINGS = {-9: "killed (SIGKILL)", -15: "terminated (SIGTERM)"}


def exit_meaning(code: int) -> str:
    """What a trainer exit code (or a negative signal number) means."""
    if code in _SIGNAL_MEANINGS:
        return _SIGNAL_MEANINGS[code]
    try:
        return ExitCode(code).meaning
    except ValueError:
        return "see the trainer log"


class Outcome(StrEnum):
    """result.json `status`: how the trainer ended."""

    COMPLETED = "completed"
    """Ran total_steps."""
    STOPPED = "stopped"
    """Stopped by SIGTERM; state and weights saved."""
    FAILED = "failed"
    """An error ended it; `error` says which."""


class CheckpointKind(StrEnum):
    """The two kinds of checkpoint folders."""

    SAMPLER_WEIGHTS = "sampler_weights"
    """Adapter only: what the inference server loads."""
    WEIGHTS = "weights"
    """Adapter and optimizer state: what a run resumes from."""


FINAL_CHECKPOINT_MARK = "FINAL_CHECKPOINT"  # the trainer's last stdout line on success


@dataclass(frozen=True)
class RunFiles:
    """Every path of one run directory."""

    run_dir: Path

    @property
    def config(self) -> Path:
        return self.run_dir / "config.yaml"

    @property
    def logs_dir(self) -> Path:
        return self.run_dir / "logs"

    def log(self, process: str) -> Path:
        """A process's log, or the model build's (`model`) or the supervised stage's (`sft`), which run
        before the processes."""
        name = process if process in (MODEL_BUILD, SFT_STAGE) else ProcessName(process)
        return self.logs_dir / f"{name}.log"

    @property
    def metrics(self) -> Path:
        return self.run_dir / "metrics.jsonl"

    @property
    def edits(self) -> Path:
        """The session's edits the run started with: where its config departs from the profile."""
        return self.run_dir / "edits.json"

    @property
    def exports_dir(self) -> Path:
        """rl_export_model's default output: one folder per export."""
        return self.run_dir / "exports"

    @property
    def latest_replies(self) -> Path:
        """The newest step's best-scored replies, decoded: what the reward pays for."""
        return self.run_dir / "latest_replies.json"

    @property
    def first_batch(self) -> Path:
        """The first batch the trainer took, as it took it (tokens, masks, scores): what it trains on."""
        return self.run_dir / "first_batch.json"

    @property
    def env_health(self) -> Path:
        """The environment's rollouts: groups scored, exceptions, the latest one (tinker_atropos.env_process.health)."""
        return self.run_dir / "env_health.json"

    @property
    def evals(self) -> Path:
        """The held-out set's evaluations: before the first step and at the end (and of the best checkpoint)."""
        return self.run_dir / "eval.jsonl"

    @property
    def validation(self) -> Path:
        """The validation set's evaluations: before the first step, every steps_per_eval steps, at the end."""
        return self.run_dir / "validation.jsonl"

    @property
    def teacher(self) -> Path:
        """trainer.teacher as the server resolved it at the start: what it is, and its held-out score where known."""
        return self.run_dir / "teacher.json"

    @property
    def items(self) -> Path:
        """The draw's counts: items active, retired, deferred; the groups that tied (tinker_atropos.item_draw)."""
        return self.run_dir / "items.json"

    @property
    def verdicts(self) -> Path:
        """An `mcp` environment's reward verdicts, a line per group: each rollout's score and one-line reason."""
        return self.run_dir / "verdicts.jsonl"

    @property
    def findings_sent(self) -> Path:
        """The diagnosis findings (by code) already sent to subscribed clients: never sent twice."""
        return self.run_dir / "findings_sent.json"

    @property
    def result(self) -> Path:
        return self.run_dir / "result.json"

    @property
    def sft_dir(self) -> Path:
        """The supervised stage (tinker_atropos.sft): its examples, what the agent is shown of them,
        its steps, and where it ended."""
        return self.run_dir / "sft"

    @property
    def sft_examples(self) -> Path:
        """One supervised example a line: tokens, masks, source, origin."""
        return self.sft_dir / "examples.jsonl"

    @property
    def sft_summary(self) -> Path:
        """Counts per source, the refused candidates with why, one example rendered with its mask."""
        return self.sft_dir / "set.json"

    @property
    def sft_steps(self) -> Path:
        """One line per supervised step: step, total, loss, trained tokens, seconds."""
        return self.sft_dir / "steps.jsonl"

    @property
    def sft_result(self) -> Path:
        """Written once the stage ends: its steps, why it ended, its training state and sampler weights."""
        return self.sft_dir / "result.json"

    @property
    def checkpoints_dir(self) -> Path:
        return self.run_dir / "checkpoints"

    def checkpoint_root(self, run_name: str) -> Path:
        return self.checkpoints_dir / run_name

    def checkpoint_index(self, run_name: str) -> Path:
        return self.checkpoint_root(run_name) / "checkpoints.jsonl"

    @property
    def wandb_dir(self) -> Path:
        return self.run_dir / "wandb"

    @property
    def tmp_link(self) -> Path:
        """A link to the TMPDIR of the run's processes, while the run lives (rl_mcp/tmpdirs.py)."""
        return self.run_dir / "tmp"

    @property
    def training_states(self) -> Path:
        """The index of full training states (adapter + optimizer) a run can resume from."""
        return self.run_dir / "training_states.jsonl"

    def env_positions_dir(self, env_wandb_name: str) -> Path:
        """atroposlib's env checkpoints (`save_checkpoint`): `step-<n>.json` with the data position.

        atroposlib names the folder `<checkpoint_dir>/env_checkpoints/<wandb_name>_<k>`, k being
        the number of same-named environments registered before it (0 for a run's one env).
        """
        return self.checkpoints_dir / "env_checkpoints" / f"{env_wandb_name}_0"

    def env_position(self, env_wandb_name: str, step: int) -> Path:
        return self.env_positions_dir(env_wandb_name) / f"step-{step}.json"


@dataclass(frozen=True)
class InferenceTestFiles:
    """The files of one model's folder in an rl_test_inference call."""

    folder: Path

    @property
    def config(self) -> Path:
        return self.folder / "config.yaml"

    @property
    def groups(self) -> Path:
        return self.folder / "groups.jsonl"

    @property
    def groups_html(self) -> Path:
        return self.folder / "groups.html"

    @property
    def process_log(self) -> Path:
        return self.folder / "process.log"

    @property
    def server_log(self) -> Path:
        return self.folder / "server.log"

    @property
    def env_health(self) -> Path:
        return self.folder / "env_health.json"


@dataclass(frozen=True)
class ServedModelFiles:
    """The files of one served model's folder (rl_serve_model: `RL_MCP_HOME/served/<run_id>@<checkpoint>/`)."""

    folder: Path

    @property
    def config(self) -> Path:
        """What the standalone inference server reads: the run's config, served on its own port."""
        return self.folder / "config.yaml"

    @property
    def server_log(self) -> Path:
        return self.folder / "server.log"

    @property
    def record(self) -> Path:
        """The server's record of the process (pid, start time, port, weights), while it serves."""
        return self.folder / "served.json"

    @property
    def hermes_home(self) -> Path:
        """A HERMES_HOME whose config points Hermes at this model."""
        return self.folder / "hermes"

    @property
    def hermes_config(self) -> Path:
        return self.hermes_home / HERMES_CONFIG


# --- writing -----------------------------------------------------------------------------------


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temporary sibling + rename: readers see the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def append_jsonl(path: Path, row: dict[str, Any], *, fsync: bool = False) -> None:
    """Append one JSON line (whole, newline-terminated: readers skip only a half-written tail)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")
        fh.flush()
        if fsync:
            os.fsync(fh.fileno())


class JsonlWriter:
    """An open JSONL file for a writer that appends often (the trainer's metrics)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()

    def write(self, row: dict[str, Any]) -> None:
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


# --- reading -----------------------------------------------------------------------------------


@dataclass
class JsonlReader:
    """Incremental, tolerant reader: each refresh parses only the bytes appended since the last.

    A half-written last line is left for the next refresh, a line that is not a JSON object is
    skipped, and a truncated or replaced file is read again from the start.
    """

    path: Path
    rows: list[dict[str, Any]] = field(default_factory=list)
    _offset: int = 0
    _inode: int | None = None

    def refresh(self) -> list[dict[str, Any]]:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self.rows, self._offset, self._inode = [], 0, None
            return self.rows
        if st.st_ino != self._inode or st.st_size < self._offset:
            self.rows, self._offset, self._inode = [], 0, st.st_ino
        if st.st_size == self._offset:
            return self.rows
        with open(self.path, "rb") as fh:
            fh.seek(self._offset)
            data = fh.read()
        end = data.rfind(b"\n") + 1
        for line in data[:end].splitlines():
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                log.warning("%s: skipping a line that is not JSON", self.path)
                continue
            if isinstance(row, dict):
                self.rows.append(row)
        self._offset += end
        return self.rows


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every complete JSON-object line of `path` ([] when it does not exist)."""
    return JsonlReader(path).refresh()


# --- result.json -------------------------------------------------------------------------------


@dataclass
class RunResult:
    """result.json, written once by the trainer when it ends."""

    status: str  # an Outcome
    steps: int
    final_checkpoint: str | None
    final_state: str | None
    backend: str
    wandb_url: str | None = None
    error: str | None = None
    reason: str | None = None  # why a run completed before total_steps (items solved, minutes spent)
    best_checkpoint: str | None = None  # keep_best: the sampler weights of the best validation score
    best_step: int | None = None

    def write(self, run_dir: Path) -> Path:
        path = RunFiles(run_dir).result
        atomic_write_text(path, json.dumps(asdict(self), indent=1) + "\n")
        return path


def read_result(run_dir: Path) -> dict[str, Any] | None:
    """result.json, or None while the trainer has not written it (or wrote garbage)."""
    return read_json_object(RunFiles(run_dir).result)


def read_sft_result(run_dir: Path) -> dict[str, Any] | None:
    """sft/result.json (the supervised stage's end: steps, why, its state and sampler weights), or None."""
    return read_json_object(RunFiles(run_dir).sft_result)


SFT_STOPPED = "stopped"  # sft/result.json's `ended` for a stage stopped before its end


def finished_sft_state(run_dir: Path) -> str | None:
    """The state a supervised stage left once it ended (RL starts there); None without a stage that ended."""
    done = read_sft_result(run_dir)
    return str(done["state"]) if done and done.get("state") and done.get("ended") != SFT_STOPPED else None


def stopped_sft(run_dir: Path) -> tuple[int, str] | None:
    """(steps done, state) of a supervised stage stopped before its end: a resumed run goes on from there."""
    done = read_sft_result(run_dir)
    if not done or done.get("ended") != SFT_STOPPED or not done.get("state"):
        return None
    return int(done.get("steps") or 0), str(done["state"])


def read_json_object(path: Path) -> dict[str, Any] | None:
    """A JSON file holding an object, or None (missing, unreadable, half-written, not an object)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# --- the checkpoint index ----------------------------------------------------------------------


def record_checkpoint(
    run_dir: Path, run_name: str, kind: CheckpointKind, name: str, path: str, **extra: object
) -> None:
    """Append one entry to the index (local folders and tinker:// paths alike)."""
    entry = {"kind": str(kind), "name": name, "path": path, "time": time.time(), **extra}
    append_jsonl(RunFiles(run_dir).checkpoint_index(run_name), entry)


def read_checkpoints(run_dir: Path, run_name: str) -> list[dict[str, Any]]:
    """The index entries, oldest first."""
    return read_jsonl(RunFiles(run_dir).checkpoint_index(run_name))


# --- the training-state index ------------------------------------------------------------------


@dataclass
class TrainingState:
    """One full training state (adapter + optimizer), saved after `step` steps.

    The index (`training_states.jsonl`) is rewritten atomically after the state itself is
    complete (a local folder renamed into place, a Tinker save that answered), so an entry never
    names a half-written state; older entries are pruned from it before their files are deleted.
    """

    step: int
    path: str  # a weights/<name> folder (local) or a tinker:// path
    name: str
    backend: str
    base_model: str
    lora_rank: int
    time: float = 0.0
    wandb_run_id: str | None = None

    @property
    def is_remote(self) -> bool:
        return self.path.startswith("tinker://")

    def exists(self) -> bool:
        """A remote state is assumed present; a local one must be a folder."""
        return self.is_remote or Path(self.path).is_dir()


def read_training_states(run_dir: Path) -> list[TrainingState]:
    """The states a run can resume from, oldest step first (entries whose folder is gone: skipped)."""
    states = []
    for row in read_jsonl(RunFiles(run_dir).training_states):
        try:
            state = TrainingState(**{k: row[k] for k in row if k in TrainingState.__dataclass_fields__})
            state.step, state.lora_rank = int(state.step), int(state.lora_rank)
        except (TypeError, ValueError, KeyError):
            log.warning("%s: skipping a malformed training-state entry", run_dir)
            continue
        if state.exists():
            states.append(state)
    return sorted(states, key=lambda s: (s.step, s.time))


def write_training_states(run_dir: Path, states: list[TrainingState]) -> None:
    """Replace the index atomically (readers see the old list or the new one)."""
    text = "".join(json.dumps(asdict(s)) + "\n" for s in states)
    atomic_write_text(RunFiles(run_dir).training_states, text)


def latest_env_position(run_dir: Path, env_wandb_name: str, step: int) -> tuple[int, dict[str, Any]] | None:
    """The newest readable env checkpoint at or before `step` (its step and its data)."""
    folder = RunFiles(run_dir).env_positions_dir(env_wandb_name)
    found: list[tuple[int, Path]] = []
    for path in folder.glob("step-*.json") if folder.is_dir() else ():
        try:
            n = int(path.stem.removeprefix("step-"))
        except ValueError:
            continue
        if n <= step:
            found.append((n, path))
    for n, path in sorted(found, reverse=True):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # atroposlib writes these in place: a half-written one is skipped
        if isinstance(data, dict):
            return n, data
    return None


def with_trainer_section(config: dict[str, Any]) -> dict[str, Any]:
    """`config` (a run config's mapping) with its trainer section under today's name: one written
    before the rename is renamed in place."""
    if OLD_TRAINER_SECTION in config and TRAINER_SECTION not in config:
        config[TRAINER_SECTION] = config.pop(OLD_TRAINER_SECTION)
    return config
