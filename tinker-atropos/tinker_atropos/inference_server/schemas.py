"""Request bodies of every endpoint, as the clients send them (unknown fields are ignored)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tinker_atropos.agent.chat_format import text_of_parts


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class _OpenAISampling(_Request):
    """The sampling fields both OpenAI endpoints take."""

    temperature: float = Field(default=1.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = -1
    n: int = Field(default=1, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None


class CompletionRequest(_OpenAISampling):
    """OpenAI /v1/completions."""

    model: str | None = None
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(default=16, ge=0)
    logprobs: int | None = Field(default=None, ge=0)
    echo: bool = False
    stream: bool = False
    stream_options: dict[str, Any] | None = None  # {"include_usage": true}: a last chunk with the usage


class ChatCompletionRequest(_OpenAISampling):
    """OpenAI /v1/chat/completions."""

    model: str | None = None
    messages: list[dict[str, Any]] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=0)
    max_completion_tokens: int | None = Field(default=None, ge=0)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0)
    stream: bool = False
    stream_options: dict[str, Any] | None = None  # {"include_usage": true}: a last chunk with the usage
    tools: list[dict[str, Any]] | None = None  # hermes tool calls in the reply -> tool_calls
    tool_choice: str | dict[str, Any] | None = None  # "none": the reply stays text; else calls are parsed
    return_token_ids: bool = False  # vLLM's: the prompt's and each reply's token ids (verifiers trains on them)

    @field_validator("messages")
    @classmethod
    def _text_parts_joined(cls, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A content given as OpenAI's parts (`[{"type": "text", "text": ...}]`) as the text it holds."""
        parts = [isinstance(m.get("content"), list) for m in messages]
        return [{**m, "content": text_of_parts(m["content"])} if joined else m for m, joined in zip(messages, parts)]


class SglangSamplingParams(_Request):
    max_new_tokens: int = Field(default=128, ge=0)
    temperature: float = Field(default=1.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = -1
    n: int = Field(default=1, ge=1)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    seed: int | None = Field(default=None, alias="sampling_seed")


class SglangGenerateRequest(_Request):
    """sglang's native /generate: token ids (or text) + sampling_params."""

    input_ids: list[int] | list[list[int]] | None = None
    text: str | list[str] | None = None
    sampling_params: SglangSamplingParams = SglangSamplingParams()
    return_logprob: bool = False
    stream: bool = False


class VllmTokensPrompt(_Request):
    prompt_token_ids: list[int]


class _VllmSampling(_Request):
    """vLLM's SamplingParams fields both of its generate endpoints take."""

    n: int = Field(default=1, ge=1)
    temperature: float = Field(default=1.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = -1
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    logprobs: int | None = Field(default=None, ge=0)


class VllmGenerateRequest(_VllmSampling):
    """vLLM's /generate (api_server): prompt + top-level SamplingParams fields."""

    prompt: str | VllmTokensPrompt
    max_tokens: int = Field(default=16, ge=0)
    prompt_logprobs: int | None = Field(default=None, ge=0)
    stream: bool = False


class TokensSamplingParams(_VllmSampling):
    """vLLM's SamplingParams as verifiers 0.4.0's TrainClient sends them (None fields left out)."""

    max_tokens: int | None = Field(default=None, ge=0)


class TokensGenerateRequest(_Request):
    """vLLM's tokens-in /inference/v1/generate (renderers.client.generate): token ids + sampling_params."""

    model: str | None = None
    token_ids: list[int] = Field(min_length=1)
    sampling_params: TokensSamplingParams = TokensSamplingParams()


class LogprobsRequest(_Request):
    """Our /logprobs: the logprob of each prompt token under the live policy."""

    input_ids: list[int] | None = None
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
