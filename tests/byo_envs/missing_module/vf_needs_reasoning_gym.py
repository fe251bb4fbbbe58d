"""A classic verifiers file that needs reasoning-gym, which verifiers' venv lacks (the product's venv has
it): its import error is named with the venv it runs in and the distribution's name."""

import verifiers as vf


def load_environment(num_examples: int = 2) -> vf.Environment:
    """Fails to load: reasoning_gym is imported where verifiers runs."""
    try:
        import reasoning_gym  # noqa: F401
    except ImportError as exc:  # the advice verifiers' own environments give, which does not apply here
        raise ImportError("this environment requires reasoning-gym. Install with: uv add 'verifiers[rg]'") from exc
    raise AssertionError("unreachable in rl-mcp's tests")
