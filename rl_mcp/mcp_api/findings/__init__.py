"""Shared by the run family, the subscriptions and the server: the diagnosis findings as answers,
their views and the notices sent to a run's subscribers. No tools of its own."""
