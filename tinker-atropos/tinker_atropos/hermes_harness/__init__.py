"""Training inside the real hermes-agent: episodes run by Hermes, trained on the tokens the server sampled."""
