"""A served model's streamed replies, as Hermes and any OpenAI client read them: time to first token and
completion tokens per second for 1 and 8 streamed clients at once, the base model and the run's
adapter side by side in one run (SmolLM2-135M-Instruct, the product's inference server, the `openai`
client's stream). Also the streamed against the whole reply at one client (what streaming costs).

    .venv/bin/python bench/serve.py [--adapter RUN_DIR/checkpoints/step-N] [--tokens 64] [--clients 1 8]

Without --adapter, the adapter is a real one made for the bench: a 3-step demo run on arithmetic.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import openai

from tinker_atropos.backends.local import create_sampler, load_base_model
from tinker_atropos.inference_server import SamplerHolder, build_app, serve_in_thread
from tinker_atropos.reply_cap import served_cap

MODEL = "smollm2-135m"
PROMPTS = [f"Write a short note about the number {i} and why it matters." for i in range(16)]


def demo_adapter(home: Path) -> Path:
    """A real trained adapter: the demo's run, 3 steps (the last step's sampler weights)."""
    cmd = [sys.executable, "-m", "rl_mcp", "demo", "--steps", "3", "--home", str(home), "--skip-inference-test"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    found = sorted(p.parent for p in home.glob("runs/*/**/adapter_config.json"))
    if not found:
        raise SystemExit(f"the demo left no adapter under {home}/runs")
    return found[-1]


def one_client(url: str, prompt: str, tokens: int, stream: bool, out: list[tuple[float, float, int]]) -> None:
    with openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=600) as client:
        messages = [{"role": "user", "content": prompt}]
        started = time.perf_counter()
        if not stream:
            reply = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=tokens, temperature=0)
            done = time.perf_counter()
            out.append((done - started, done - started, reply.usage.completion_tokens if reply.usage else 0))
            return
        first, count = None, 0
        chunks = client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=tokens, temperature=0, stream=True,
            stream_options={"include_usage": True},
        )  # fmt: skip
        for chunk in chunks:
            if first is None and chunk.choices and chunk.choices[0].delta.content:
                first = time.perf_counter()
            if chunk.usage is not None:
                count = chunk.usage.completion_tokens
        done = time.perf_counter()
        out.append(((first or done) - started, done - started, count))


def measure(url: str, clients: int, tokens: int, stream: bool) -> tuple[float, float]:
    """Median time to first token (s) and completion tokens per second, all clients together."""
    out: list[tuple[float, float, int]] = []
    threads = [
        threading.Thread(target=one_client, args=(url, PROMPTS[i % len(PROMPTS)], tokens, stream, out))
        for i in range(clients)
    ]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    return statistics.median(o[0] for o in out), sum(o[2] for o in out) / wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--adapter", type=Path)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8])
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        adapter = args.adapter or demo_adapter(Path(tmp) / "home")
        base = load_base_model(MODEL, "cpu")
        cap = served_cap(MODEL, 1024)
        print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; adapter {adapter}")
        print(f"{'weights':8} {'clients':>7} {'mode':>6} {'TTFT s':>8} {'tok/s':>8}")
        for label, path in (("base", None), ("adapter", str(adapter))):
            handle = serve_in_thread(
                build_app(SamplerHolder(create_sampler(base, path)), MODEL, base.tokenizer, cap), "127.0.0.1", 0
            )
            try:
                measure(handle.url, 1, 8, True)  # warm-up
                for clients in args.clients:
                    ttft, rate = measure(handle.url, clients, args.tokens, True)
                    print(f"{label:8} {clients:7d} {'stream':>6} {ttft:8.3f} {rate:8.1f}")
                ttft, rate = measure(handle.url, 1, args.tokens, False)
                print(f"{label:8} {1:7d} {'whole':>6} {ttft:8.3f} {rate:8.1f}")
            finally:
                handle.stop()


if __name__ == "__main__":
    main()
