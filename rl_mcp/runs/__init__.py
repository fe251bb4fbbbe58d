"""Training runs: the registry, their processes, and the manager that supervises them."""
