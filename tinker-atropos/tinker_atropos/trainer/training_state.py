"""Full training states a run can resume from: saved every `save_state_every` steps, indexed, bounded.

A state is the adapter and the optimizer (Adam moments and step count), saved by the backend's
`save_state` (a local `weights/state-<step>` folder, staged then renamed; a `tinker://` path on
Tinker). Only once the save has finished is it added to `training_states.jsonl`, which is
rewritten atomically (run_files.write_training_states): a reader never sees an entry for a
half-written state. Past `keep_states`, the oldest periodic states leave the index first and are
deleted after; the final state (saved on stop or completion) and the supervised stage's are always kept.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from tinker_atropos.backends.base import TrainingBackend
from tinker_atropos.best_checkpoint import best_of
from tinker_atropos.run_files import RunFiles, TrainingState, read_jsonl, read_training_states, write_training_states
from tinker_atropos.trainer.config import RunConfig, TinkerConfig

logger = logging.getLogger(__name__)

FINAL_STATE_NAME = "final"
SFT_STATE_NAME = "sft-final"  # the supervised stage's last state (step 0: before RL's first): RL, a fork start there
KEPT_NAMES = (FINAL_STATE_NAME, SFT_STATE_NAME)  # never pruned


def state_entry(t: TinkerConfig, step: int, path: str, name: str, wandb_run_id: str | None = None) -> TrainingState:
    """The index entry of a state this run's config saved."""
    return TrainingState(
        step=step,
        path=path,
        name=name,
        backend=t.backend,
        base_model=t.base_model,
        lora_rank=t.lora_rank,
        time=time.time(),
        wandb_run_id=wandb_run_id,
    )


def state_name(step: int) -> str:
    return f"state-{step:06d}"


class StateKeeper:
    """Saves, indexes and prunes one run's training states."""

    def __init__(self, cfg: RunConfig, training: TrainingBackend, wandb_run_id: str | None = None) -> None:
        self.cfg = cfg
        self.training = training
        self.run_dir = cfg.trainer.run_dir
        self.wandb_run_id = wandb_run_id

    def due(self, step: int) -> bool:
        every = self.cfg.trainer.save_state_every
        return every > 0 and step % every == 0 and step < self.cfg.trainer.total_steps

    async def save(self, step: int, *, final: bool = False) -> str:
        """Save the state after `step` steps and index it; returns its path."""
        name = FINAL_STATE_NAME if final else state_name(step)
        path = await self.training.save_state_async(name)
        if step <= 0:
            return path  # nothing trained yet: nothing worth resuming from
        entry = state_entry(self.cfg.trainer, step, path, name, self.wandb_run_id)
        states = [s for s in read_training_states(self.run_dir) if s.path != path] + [entry]
        kept, dropped = self._bounded(states)
        write_training_states(self.run_dir, kept)
        for old in dropped:
            try:
                await self.training.delete_state_async(old.path)
            except Exception as exc:  # a leftover state costs space, never the run
                logger.warning("could not delete the old training state %s: %s", old.path, exc)
        logger.info("training state after step %d saved: %s", step, path)
        return path

    def _bounded(self, states: list[TrainingState]) -> tuple[list[TrainingState], list[TrainingState]]:
        """The newest keep_states periodic states, and with keep_best the one at the best validation
        step so far (Tinker exports a run's weights from its states)."""
        best = best_of(read_jsonl(RunFiles(Path(self.run_dir)).validation)) if self.cfg.trainer.keep_best else None
        kept_steps = {best.step} if best else set()
        periodic = sorted(
            (s for s in states if s.name not in KEPT_NAMES and s.step not in kept_steps), key=lambda s: (s.step, s.time)
        )
        dropped = periodic[: max(len(periodic) - self.cfg.trainer.keep_states, 0)]
        kept = [s for s in states if s not in dropped]
        return sorted(kept, key=lambda s: (s.step, s.time)), dropped
