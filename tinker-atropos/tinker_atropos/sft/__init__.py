"""The supervised stage before RL: conversations that show the policy the task and the environment's
tool-call format, read from a file and trained on before the first RL step."""
