"""gsm8k data: the Hugging Face set when it can be had quickly, else generated grade-school word
problems (deterministic for a seed), plus numeric answer extraction and verification."""

from __future__ import annotations

import logging
import random
import re
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

log = logging.getLogger(__name__)

_NUMBER = r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+"
_HASHES = re.compile(r"####\s*\$?\s*(" + _NUMBER + ")")
_BOXED = re.compile(r"\\boxed\{\s*\$?\s*(" + _NUMBER + r")\s*\}")
_ANY = re.compile(_NUMBER)


@dataclass(frozen=True)
class Problem:
    question: str
    answer: str  # the final number, as text


def parse_number(text: str) -> Decimal | None:
    try:
        return Decimal(text.replace(",", "").strip().rstrip("."))
    except InvalidOperation:
        return None


def extract_answer(text: str) -> Decimal | None:
    """The reply's final answer: after the last `####`, else the last \\boxed{}, else the last number."""
    for pattern in (_HASHES, _BOXED, _ANY):
        found = pattern.findall(text)
        if found:
            return parse_number(found[-1])
    return None


def is_correct(reply: str, answer: str) -> bool:
    got, want = extract_answer(reply), parse_number(answer)
    return got is not None and want is not None and got == want


# --- generated problems -------------------------------------------------------------------

_NAMES = ["Ava", "Ben", "Carla", "Dev", "Elena", "Farid", "Grace", "Hugo", "Iris", "Jamal", "Kiko", "Lena"]
_ITEMS = ["apples", "marbles", "stickers", "pencils", "cookies", "stamps", "shells", "books"]


def _add_sub(r: random.Random) -> Problem:
    name, item = r.choice(_NAMES), r.choice(_ITEMS)
    a, b = r.randint(5, 60), r.randint(2, 40)
    c = r.randint(1, a + b - 1)
    q = (
        f"{name} has {a} {item}. {name} gets {b} more and then gives {c} to a friend. "
        f"How many {item} does {name} have now?"
    )
    return Problem(q, str(a + b - c))


def _multiply(r: random.Random) -> Problem:
    name, item = r.choice(_NAMES), r.choice(_ITEMS)
    boxes, per = r.randint(2, 12), r.randint(3, 25)
    q = f"{name} buys {boxes} boxes of {item} with {per} {item} in each box. How many {item} is that in total?"
    return Problem(q, str(boxes * per))


def _share(r: random.Random) -> Problem:
    name, item = r.choice(_NAMES), r.choice(_ITEMS)
    friends, each = r.randint(2, 9), r.randint(2, 15)
    q = f"{name} shares {friends * each} {item} equally among {friends} friends. How many {item} does each friend get?"
    return Problem(q, str(each))


def _money(r: random.Random) -> Problem:
    name = r.choice(_NAMES)
    price, count = r.randint(2, 15), r.randint(2, 8)
    paid = price * count + r.randint(0, 30)
    q = (
        f"{name} buys {count} notebooks that cost ${price} each and pays with ${paid}. "
        f"How many dollars of change does {name} get?"
    )
    return Problem(q, str(paid - price * count))


def _time(r: random.Random) -> Problem:
    name = r.choice(_NAMES)
    days, minutes = r.randint(2, 7), r.choice([15, 20, 25, 30, 45, 50])
    weeks = r.randint(2, 4)
    q = (
        f"{name} practices piano for {minutes} minutes a day, {days} days a week. "
        f"How many minutes does {name} practice in {weeks} weeks?"
    )
    return Problem(q, str(minutes * days * weeks))


_TEMPLATES: tuple[Callable[[random.Random], Problem], ...] = (_add_sub, _multiply, _share, _money, _time)


def generate_problems(count: int, seed: int) -> list[Problem]:
    """`count` word problems, the same for the same seed on every machine."""
    r = random.Random(seed)
    return [r.choice(_TEMPLATES)(r) for _ in range(count)]


# --- the Hugging Face set -----------------------------------------------------------------


def _reachable(host: str, timeout: float) -> bool:
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def _hf_rows_to_problems(rows) -> list[Problem]:
    out = []
    for row in rows:
        answer = row["answer"].split("####")[-1].strip().replace(",", "")
        out.append(Problem(row["question"], answer))
    return out


def _datasets_offline() -> None:
    """datasets reads the offline variables once, at import: a process that imported it before
    (an environment file, another environment) would still try the hub and wait out the timeout."""
    config = sys.modules.get("datasets.config")
    if config is not None:
        config.HF_HUB_OFFLINE = config.HF_DATASETS_OFFLINE = True  # type: ignore[attr-defined]


def load_hf_gsm8k(timeout: float) -> tuple[list[Problem], list[Problem]] | None:
    """(train, test) from the hub, or None when it cannot be had within `timeout` seconds."""
    import os

    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1":
        offline = True
    else:
        offline = not _reachable("huggingface.co", min(3.0, timeout))
    result: dict[str, object] = {}

    def load() -> None:
        try:
            from datasets import load_dataset

            ds = load_dataset("gsm8k", "main")
            result["data"] = (_hf_rows_to_problems(ds["train"]), _hf_rows_to_problems(ds["test"]))
        except Exception as exc:
            result["error"] = exc

    if offline:
        # A cached copy still loads with no network; HF_*_OFFLINE keeps it from retrying.
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
        _datasets_offline()
    worker = threading.Thread(target=load, daemon=True, name="gsm8k-load")
    worker.start()
    worker.join(timeout)
    if "data" in result:
        return result["data"]  # type: ignore[return-value]
    log.warning(
        "gsm8k from the hub unavailable (%s); using generated problems",
        result.get("error", f"no answer within {timeout:.0f}s"),
    )
    return None
