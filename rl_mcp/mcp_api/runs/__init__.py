"""The run tools (start, resume or fork, status, stop, results, list), their descriptions and resources."""
