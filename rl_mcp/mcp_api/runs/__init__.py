"""The run tools (start, resume or fork, status, stop, results, list), their answers, views, prose and resources."""
