"""rl_serve_model's, rl_list_served_models' and rl_stop_served_model's answers (and `mcp-server-rl
serve-model`'s): where the model is served, what it costs in memory and what makes Hermes or any
OpenAI client use it, read from its record by attribute."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from rl_mcp.from_domain import answer_from
from rl_mcp.serving.clients import hermes_command, hermes_config, hermes_yaml, openai_lines
from rl_mcp.serving.manager import Served, StoppedServe


class ServeMemory(BaseModel):
    rss_bytes: int | None = Field(description="The process tree's resident memory now (psutil); null once it is gone")
    estimate_bytes: int | None = Field(
        description="Reckoned before the start from the base model's weight files (null: they are not here)"
    )
    estimate_basis: str = Field(description="How the estimate was reckoned")
    available_bytes: int = Field(
        description="The room it was checked against at its start: the machine's available memory, or "
        "RL_MCP_SERVE_MEMORY_LIMIT_BYTES where lower"
    )


class HermesSetup(BaseModel):
    config_yaml: str = Field(description="The block for $HERMES_HOME/config.yaml, exact and ready to paste")
    config: dict[str, Any] = Field(description="The same keys as structured fields")
    home: str = Field(description="A HERMES_HOME written with exactly this config and an empty .no-bundled-skills")
    command: str = Field(description="The hermes command line (headless, terminal and file tools) using that home")


class ServedModel(BaseModel):
    model: str = Field(description="The served name, <run_id>@<checkpoint>: requests' `model`, and the id to stop")
    url: str = Field(description="The OpenAI-compatible endpoint (loopback): http://127.0.0.1:PORT/v1")
    port: int
    pid: int = Field(description="The inference server's process (its own session: it outlives the MCP server)")
    status: Literal["starting", "ready"]
    run_id: str
    checkpoint: str = Field(description="The checkpoint served (step-NNNNNN or final)")
    checkpoint_step: int | None
    chosen_because: str = Field(description="Why this checkpoint: as asked, final, or best by validation")
    weights: str = Field(description="The adapter served (a folder, or tinker://)")
    base_model: str
    backend: str = Field(description="Where the weights are sampled: local (this machine) or tinker")
    sampler: str = Field(description="engine (the product's own), vllm, or tinker")
    started_at: str
    log: str = Field(description="The inference server's log: each request with the weights that served it")
    memory: ServeMemory
    hermes: HermesSetup
    openai_python: str = Field(description="The openai Python client's lines for any other program")


class ServeResult(ServedModel):
    already_serving: bool = Field(description="These weights were served already: that server is the answer")
    next_step: str


class ServedList(BaseModel):
    served: list[ServedModel]
    rss_bytes: int = Field(description="Their resident memory together, now")
    next_step: str


class ServeStopped(BaseModel):
    model: str
    run_id: str
    port: int
    pid: int
    was_running: bool = Field(description="False: the process had already ended; its record is gone either way")
    exit_code: int | None = Field(
        description="The server's exit code (0: stopped cleanly); -1 where it is unknowable (a process another "
        "server lifetime started), null where it had ended already"
    )
    next_step: str


def served_model(served: Served) -> ServedModel:
    return answer_from(ServedModel, served.record, **_beside(served))


def serve_answer(served: Served) -> ServeResult:
    rec = served.record
    again = "These weights were already served: this is that server. " if served.already_serving else ""
    return answer_from(
        ServeResult,
        served,  # already_serving
        rec,
        **_beside(served),
        next_step=f"{again}Point a program at url with model {rec.model!r}: run hermes.command, or paste "
        "hermes.config_yaml into your Hermes config, or use openai_python. rl_stop_served_model(model) frees "
        "its memory; it keeps serving after this MCP server exits unless that was started with --stop-runs-on-exit.",
    )


def served_list(served: list[Served]) -> ServedList:
    step = (
        "Use a model's url and name (hermes.command, openai_python); rl_stop_served_model(model) stops one."
        if served
        else "Nothing is served: rl_serve_model(run_id) serves a run's weights."
    )
    return ServedList(
        served=[served_model(s) for s in served], rss_bytes=sum(s.rss_bytes or 0 for s in served), next_step=step
    )


def stopped_answer(stopped: StoppedServe) -> ServeStopped:
    return answer_from(
        ServeStopped,
        stopped,
        stopped.record,
        next_step=f"rl_serve_model(run_id={stopped.record.run_id!r}) serves it again; rl_list_served_models lists "
        "the rest.",
    )


def _beside(served: Served) -> dict[str, Any]:
    """What a served model's answer needs beside its record."""
    rec = served.record
    hermes = HermesSetup(
        config_yaml=hermes_yaml(rec.model, rec.url),
        config=hermes_config(rec.model, rec.url),
        home=str(rec.files.hermes_home),
        command=hermes_command(rec.files.hermes_home),
    )
    return dict(  # keywords: the field `hermes` is no format's name here
        started_at=datetime.fromtimestamp(rec.started_at, UTC).isoformat(timespec="seconds"),
        log=str(rec.log),
        memory=answer_from(ServeMemory, rec, rss_bytes=served.rss_bytes),
        hermes=hermes,
        openai_python=openai_lines(rec.model, rec.url),
    )
