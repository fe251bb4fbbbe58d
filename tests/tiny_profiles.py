"""Shipped profiles with tiny-chat as their model, for tests whose runs must go a profile's way (its
backend, engine, locked lengths, defaults) but assert nothing a pretrained model does or learns.

tiny-chat (4 layers, 128 wide, 259 tokens) trains, samples and compiles in a fraction of SmolLM2's
time (30 layers, 576 wide, 49k tokens), and every process and call of a run is the same. It spends
a token per byte, so a profile whose locked trainer length was sized for SmolLM2's words (`smollm2`:
8192) is the one to take for long prompts such as tool schemas.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from rl_mcp.settings import PROFILES_DIR
from tinker_atropos.models.paths import TINY_CHAT

# a max_token_length within each profile's locked max_token_trainer_length (local 1024, smollm2 8192)
# that holds a tool prompt of ~900 characters and two short turns on tiny-chat
MAX_TOKEN_LENGTH = {"local": 1024, "smollm2": 2048}


def on_tiny_chat(profile: str, folder: Path) -> Path:
    """The shipped `profile` with tiny-chat as its model, written into `folder`; its path."""
    raw = yaml.safe_load((PROFILES_DIR / f"{profile}.yaml").read_text())
    path = folder / f"{profile}-on-{TINY_CHAT}.yaml"
    path.write_text(yaml.safe_dump({**raw, "model": TINY_CHAT}))
    return path
