"""What runs in an environment process beside the environment itself: atroposlib's fixes, its log,
its rollouts' health and its model requests with their fitted timeouts."""
