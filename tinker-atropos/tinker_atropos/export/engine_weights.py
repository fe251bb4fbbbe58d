"""A self-hosted Tinker-API engine's (SkyRL's) sampler checkpoint as a PEFT adapter folder.

The engine keeps each sampler checkpoint as a .tar.gz of `adapter_model.safetensors` and
`adapter_config.json` and serves it at `/api/v1/training_runs/{model}/checkpoints/{name}/archive`
(a redirect to `.../download`), even after the run's model was unloaded. The archive's config names
no `target_modules` (PEFT would then load only q_proj/v_proj and silently drop the rest) and the
engine's own model path; its embedding LoRA (`train_unembed`) is stored as [vocab, r] / [r, hidden].
`download_engine_weights` fetches the archive, takes out exactly those two members, and writes a
folder `PeftModel.from_pretrained` loads with every LoRA module the checkpoint holds.

The engine never applies the embedding LoRA to a tied output head; merging the adapter into a model
whose head is tied to its embeddings would. `untie_output_head` unties such a model first.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from tinker_atropos.http_tls import shared_tls
from tinker_atropos.models.paths import model_ref

ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json")
ENGINE_KEY_ENV = "TINKER_ENGINE_API_KEY"  # sent as X-API-Key where set (SkyRL does no auth)
READ_TIMEOUT_S = 300.0  # the engine reads the whole archive before it sends the first byte
MAX_CONFIG_BYTES = 1 << 20
EMBEDDINGS = ("embed_tokens",)  # stored [vocab, r] / [r, hidden]: PEFT's lora_embedding_A/B transposed
_ID = r"[A-Za-z0-9_-]{1,255}"  # the engine's model and checkpoint ids
_PATH = re.compile(rf"^tinker://({_ID})/(?:(sampler_weights|weights)/)?({_ID})$")
_KEY = re.compile(r"^base_model\.model\.((?:[A-Za-z0-9_]+\.)*([A-Za-z0-9_]+))\.lora_([AB])\.weight$")


class EngineWeightsError(RuntimeError):
    """The checkpoint could not be brought here; the message names the URL and what to do."""


def parse_checkpoint_path(path: str) -> tuple[str, str]:
    """`tinker://M/C` (or `tinker://M/sampler_weights/C`) as (M, C)."""
    match = _PATH.match(path)
    if match is None:
        raise EngineWeightsError(
            f"{path!r} is not a self-hosted engine's sampler checkpoint: expected tinker://MODEL_ID/NAME"
        )
    model_id, kind, name = match.groups()
    if kind == "weights":
        raise EngineWeightsError(
            f"{path} is a training state; the engine hands out sampler checkpoints only "
            f"(tinker://{model_id}/NAME, as the run's checkpoint index records them)"
        )
    return model_id, name


def archive_url(base_url: str, model_id: str, name: str) -> str:
    return f"{base_url.rstrip('/')}/api/v1/training_runs/{quote(model_id)}/checkpoints/{quote(name)}/archive"


def download_engine_weights(
    path: str,
    dest: Path,
    base_url: str | None,
    base_model: str,
    progress: Callable[[float], None] | None = None,
    connect_timeout_s: float | None = None,
) -> Path:
    """Sampler checkpoint `path` (tinker://M/C) of the engine at `base_url`, as a PEFT adapter folder
    at `dest` whose config names `base_model` as the product loads it (`base_url` None:
    $TINKER_BASE_URL, as the trainer reads it). Atomic: `dest` appears complete, or not at all
    (an old `dest` is replaced)."""
    model_id, name = parse_checkpoint_path(path)
    base_url = base_url or os.environ.get("TINKER_BASE_URL", "").strip()
    if not base_url:
        raise EngineWeightsError(
            f"no engine URL to fetch {path} from: the run's config names no tinker.tinker_base_url "
            "(and TINKER_BASE_URL is unset)"
        )
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        archive = staging / "archive.tar.gz"
        _download(archive_url(base_url, model_id, name), archive, base_url, path, progress, connect_timeout_s)
        _unpack(archive, staging, path)
        archive.unlink()
        normalize(staging, model_ref(base_model))
        _replace(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return dest


def _download(
    url: str,
    target: Path,
    base_url: str,
    path: str,
    progress: Callable[[float], None] | None,
    connect_timeout_s: float | None,
) -> None:
    connect = connect_timeout_s if connect_timeout_s is not None else _connect_timeout()
    headers = {"X-API-Key": key} if (key := os.environ.get(ENGINE_KEY_ENV, "").strip()) else {}
    host = urlsplit(base_url).hostname or ""
    try:
        with (
            httpx.Client(
                timeout=httpx.Timeout(READ_TIMEOUT_S, connect=connect),
                follow_redirects=True,
                trust_env=host not in ("127.0.0.1", "localhost", "::1"),  # loopback: never a proxy
                verify=shared_tls(),
            ) as http,
            http.stream("GET", url, headers=headers) as resp,
        ):
            if resp.status_code != 200:
                resp.read()
                raise EngineWeightsError(_status_message(resp, path, base_url))
            total = int(resp.headers.get("content-length") or 0)
            done = 0
            with target.open("wb") as fh:
                for chunk in resp.iter_bytes(1 << 20):
                    fh.write(chunk)
                    done += len(chunk)
                    if progress is not None and total:
                        progress(min(1.0, done / total))
    except httpx.ConnectError as exc:
        raise EngineWeightsError(
            f"cannot connect to the self-hosted Tinker engine at {base_url} ({exc or 'connection refused'}), "
            f"for {url}: the engine is not running (or not at that address). Start it (the server starts its "
            "engine with the next run or rl_test_inference on the engine profile; `mcp-server-rl doctor` shows its "
            "state and address), then retry: its checkpoints stay in its state folder"
        ) from exc
    except httpx.TimeoutException as exc:
        raise EngineWeightsError(
            f"the self-hosted Tinker engine at {base_url} did not answer in time ({type(exc).__name__}) "
            f"for {url}: check that it is up and not busy (`mcp-server-rl doctor`, the engine's log), then retry"
        ) from exc
    except httpx.HTTPError as exc:
        raise EngineWeightsError(f"downloading {url} failed: {type(exc).__name__}: {exc}") from exc


def _status_message(resp: httpx.Response, path: str, base_url: str) -> str:
    try:
        detail = str(resp.json().get("detail") or "")
    except (ValueError, AttributeError):
        detail = resp.text
    said = f" ({detail[:300]})" if detail else ""
    where = str(resp.request.url)  # the download's URL where the archive's redirect led there
    if resp.status_code == 404:
        return (
            f"the engine at {base_url} has no sampler checkpoint {path}: HTTP 404 at {where}{said}. It was "
            "deleted, or this engine is not the one the run trained on (another state folder at that address)"
        )
    if resp.status_code == 425:
        return (
            f"checkpoint {path} is still being written by the engine at {base_url}: HTTP 425 at {where}{said}; "
            "retry in a few seconds"
        )
    if resp.status_code == 500:
        return f"the engine at {base_url} failed to save checkpoint {path}: HTTP 500 at {where}{said}; see its log"
    return f"the engine at {base_url} answered HTTP {resp.status_code} at {where}{said}"


def _connect_timeout() -> float:
    from tinker_atropos.backends.tinker_backend import connect_timeout  # $TINKER_CONNECT_TIMEOUT, else 30

    return connect_timeout()


def _unpack(archive: Path, folder: Path, path: str) -> None:
    """The two adapter files, taken out by name; a link, a device, a path out of the archive's
    root, a duplicate or a missing member refuses the whole archive."""
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            found: dict[str, tarfile.TarInfo] = {}
            for member in tar.getmembers():
                name = member.name.removeprefix("./")
                parts = [p for p in name.split("/") if p not in ("", ".")]
                if ".." in parts or (member.name.startswith("/") and parts):
                    raise EngineWeightsError(f"the archive of {path} holds a path out of its folder: {member.name!r}")
                if not (member.isfile() or member.isdir()):
                    raise EngineWeightsError(
                        f"the archive of {path} holds {member.name!r}, which is not a plain file (a link or device)"
                    )
                if member.isfile() and len(parts) == 1 and parts[0] in ADAPTER_FILES:
                    if parts[0] in found:
                        raise EngineWeightsError(f"the archive of {path} holds {parts[0]} twice")
                    found[parts[0]] = member
            missing = [f for f in ADAPTER_FILES if f not in found]
            if missing:
                raise EngineWeightsError(f"the archive of {path} lacks {', '.join(missing)}: not a LoRA checkpoint")
            if found["adapter_config.json"].size > MAX_CONFIG_BYTES:
                raise EngineWeightsError(f"the archive of {path} holds an adapter_config.json over 1 MiB")
            for file_name, member in found.items():
                source = tar.extractfile(member)
                if source is None:
                    raise EngineWeightsError(f"the archive of {path}: {file_name} cannot be read")
                with source, (folder / file_name).open("wb") as out:
                    shutil.copyfileobj(source, out, 1 << 20)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise EngineWeightsError(f"the archive of {path} is not a readable .tar.gz: {exc}") from exc


def normalize(folder: Path, base_model_ref: str) -> dict[str, Any]:
    """Rewrite the folder's two files as PEFT reads them: embedding keys renamed and transposed,
    `target_modules` the modules the tensors hold, `r` their rank, the base model as given. Returns
    the config written."""
    from safetensors.torch import load_file, save_file

    given = _given_config(folder / "adapter_config.json")
    tensors = load_file(str(folder / "adapter_model.safetensors"))
    out: dict[str, Any] = {}
    modules: set[str] = set()
    ranks: set[int] = set()
    for key, tensor in tensors.items():
        match = _KEY.match(key)
        if match is None or tensor.dim() != 2:
            raise EngineWeightsError(f"adapter_model.safetensors holds {key!r}, which is not a LoRA A/B matrix")
        module, leaf, side = match.groups()
        modules.add(leaf)
        if leaf in EMBEDDINGS:  # A [vocab, r], B [r, hidden] -> lora_embedding_A [r, vocab], _B [hidden, r]
            ranks.add(int(tensor.shape[1] if side == "A" else tensor.shape[0]))
            out[f"base_model.model.{module}.lora_embedding_{side}"] = tensor.t().contiguous()
        else:  # A [r, in], B [out, r]: PEFT's own layout and names
            ranks.add(int(tensor.shape[0] if side == "A" else tensor.shape[1]))
            out[key] = tensor.contiguous()
    if not out:
        raise EngineWeightsError("adapter_model.safetensors holds no LoRA tensors")
    if len(ranks) != 1:
        raise EngineWeightsError(f"the LoRA tensors have different ranks ({sorted(ranks)}): not one adapter")
    rank = ranks.pop()
    if given.get("r") not in (None, rank):
        raise EngineWeightsError(f"adapter_config.json says r={given['r']} but the tensors have rank {rank}")
    alpha = given.get("lora_alpha")
    if not isinstance(alpha, int | float) or isinstance(alpha, bool) or alpha <= 0:
        raise EngineWeightsError(f"adapter_config.json has no usable lora_alpha ({alpha!r})")
    if given.get("use_rslora") or given.get("use_dora"):
        raise EngineWeightsError("adapter_config.json asks for rsLoRA or DoRA, which the engine does not train")
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model_ref,
        "r": rank,
        "lora_alpha": alpha,  # scaling alpha / r, as the engine computes it
        "lora_dropout": 0.0,
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "target_modules": sorted(modules),
        "inference_mode": True,
    }
    save_file(out, str(folder / "adapter_model.safetensors"), metadata={"format": "pt"})
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return config


def _given_config(path: Path) -> dict[str, Any]:
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise EngineWeightsError(f"adapter_config.json is not readable JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise EngineWeightsError("adapter_config.json is not a JSON object")
    return config


def _replace(staging: Path, dest: Path) -> None:
    old = None
    if dest.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{dest.name}-old-", dir=dest.parent))
        os.replace(dest, old / dest.name)
    os.replace(staging, dest)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def untie_output_head(model: Any, adapter_dir: Path) -> bool:
    """Give `model` its own output head when it is tied to the embeddings and the adapter holds an
    embedding LoRA: merged in, that LoRA must change the input embeddings only, as on the engine.
    Returns whether it untied (a no-op otherwise)."""
    import torch

    targets = _given_config(Path(adapter_dir) / "adapter_config.json").get("target_modules") or []
    head, embeddings = model.get_output_embeddings(), model.get_input_embeddings()
    if not set(targets) & set(EMBEDDINGS) or head is None or head.weight is not embeddings.weight:
        return False
    head.weight = torch.nn.Parameter(embeddings.weight.detach().clone(), requires_grad=False)
    for config in {id(c): c for c in (model.config, model.config.get_text_config())}.values():
        config.tie_word_embeddings = False
    return True
