"""The supervised stage before RL (docs/sft.md): examples made as the environment makes a rollout,
from its demonstrations, a teacher's filtered rollouts or the user's conversations, trained with
cross_entropy on the run's LoRA adapter by `python -m tinker_atropos.sft.stage`."""
