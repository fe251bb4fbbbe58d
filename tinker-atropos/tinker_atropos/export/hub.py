"""Push an export folder to the Hugging Face Hub (`huggingface_hub`), with the token from HF_TOKEN,
which is never echoed. Offline or unreachable, the error says so within HUB_TIMEOUT_S."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

HUB_TIMEOUT_S = 20.0


class HubError(RuntimeError):
    pass


def hub_refusal(environ: Mapping[str, str]) -> str | None:
    """Why no push can start under `environ` (no token, offline), or None. The server asks it before
    an export is converted, the push child again before it uploads."""
    if not environ.get("HF_TOKEN", "").strip():
        return "hub_repo needs HF_TOKEN (a write token from huggingface.co/settings/tokens) in the server's environment"
    if environ.get("HF_HUB_OFFLINE", "").strip() not in ("", "0"):
        return "HF_HUB_OFFLINE is set: the Hub cannot be reached; unset it to push"
    return None


def push_folder(folder: Path, repo: str) -> str:
    """Upload `folder` to model repo `repo` (created private if missing); its URL."""
    if refusal := hub_refusal(os.environ):
        raise HubError(refusal)
    token = os.environ["HF_TOKEN"].strip()
    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", str(int(HUB_TIMEOUT_S)))
    os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", str(int(HUB_TIMEOUT_S)))
    from huggingface_hub import HfApi
    from huggingface_hub.utils import HfHubHTTPError

    api = HfApi(token=token)
    try:
        api.create_repo(repo, repo_type="model", private=True, exist_ok=True)
        commit = api.upload_folder(folder_path=str(folder), repo_id=repo, repo_type="model")
    except HfHubHTTPError as exc:
        raise HubError(f"the Hub refused the upload to {repo}: {exc}") from exc
    except Exception as exc:  # connection refused, DNS, timeouts: httpx and OS errors alike
        raise HubError(f"the Hub could not be reached to push {repo} ({type(exc).__name__}: {exc})") from exc
    return str(getattr(commit, "repo_url", None) or f"https://huggingface.co/{repo}")
