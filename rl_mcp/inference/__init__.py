"""rl_test_inference's domain: where to send requests, running `process` per model, reading its scores."""
