"""Run diagnosis: findings over a run's recorded metrics, each with its evidence and one next step."""
