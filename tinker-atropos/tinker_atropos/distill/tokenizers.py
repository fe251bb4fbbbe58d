"""Whether a teacher shares the student's tokenizer: its logprobs score the student's token ids, which
mean other words under another vocabulary (cross-tokenizer distillation is out of scope).

Torch-free, so the MCP server refuses such a teacher before anything starts: a local model by its
tokenizer.json, a Tinker model by its family. The trainer checks the vocabularies themselves again
where this cannot tell (a model not built yet, a folder without tokenizer.json, an endpoint).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tinker_atropos.models.paths import is_offline_model, model_ref

# Tinker's base models that share one tokenizer (tinker-cookbook's get_tokenizer maps them so)
TINKER_FAMILIES = (
    ("Qwen/Qwen3", "Qwen3"),
    ("meta-llama/Llama-3", "Llama 3"),
    ("deepseek-ai/DeepSeek-V3", "DeepSeek-V3"),
    ("openai/gpt-oss", "gpt-oss"),
    ("moonshotai/Kimi-K2", "Kimi K2"),
)


def tokenizer_fingerprint(folder: Path) -> str | None:
    """A hash of tokenizer.json's vocabulary, merges and added tokens; None where the folder has none."""
    try:
        data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    kept = {"model": data.get("model"), "added_tokens": data.get("added_tokens")}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()


def tinker_family(model: str) -> str | None:
    return next((family for prefix, family in TINKER_FAMILIES if model.startswith(prefix)), None)


def tokenizer_mismatch(student: str, teacher: str, *, backend: str) -> str | None:
    """Why base model `teacher` cannot score base model `student`'s tokens; None where they share a
    tokenizer, or where the files to tell are not here yet (the trainer then compares the vocabularies)."""
    if student == teacher:
        return None
    if backend == "tinker":
        family = tinker_family(student)
        if family is not None and family == tinker_family(teacher):
            return None
        return (
            f"teacher base model {teacher!r} and the student's {student!r} are not known to share a tokenizer "
            f"(families sharing one: {', '.join(f for _, f in TINKER_FAMILIES)})"
        )
    if is_offline_model(student) and is_offline_model(teacher):
        return f"teacher {teacher!r} and the student {student!r} have tokenizers of their own"
    mine, theirs = (tokenizer_fingerprint(Path(model_ref(m))) for m in (student, teacher))
    if mine is not None and theirs is not None and mine != theirs:
        return f"the tokenizer of teacher {teacher!r} differs from the student's ({student!r}): other vocabularies"
    return None
