"""What an export says about its base model: the name users know it by and its license.

Torch-free: the server's model card reads it too.
"""

from __future__ import annotations

from dataclasses import dataclass

from tinker_atropos.models.paths import SMOLLM2, TINY_CHAT


@dataclass(frozen=True)
class BaseFacts:
    hub_id: str  # what a user passes to from_pretrained elsewhere
    license: str
    note: str = ""


KNOWN = {
    SMOLLM2: BaseFacts("HuggingFaceTB/SmolLM2-135M-Instruct", "apache-2.0"),
    TINY_CHAT: BaseFacts(
        "tiny-chat (built offline by tinker-atropos: random weights)", "MIT", "a test model that cannot learn"
    ),
}


def base_facts(name: str) -> BaseFacts:
    """Facts about base model `name`; a hub id or folder is its own name, its license unknown here."""
    return KNOWN.get(name, BaseFacts(name, "see the base model's own card"))
