"""verifiers environments run by the product: a host environment in the product's venv (atroposlib)
drives a child process in a verifiers venv of its own, where the environment's own code runs."""
