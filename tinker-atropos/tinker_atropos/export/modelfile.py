"""An Ollama Modelfile beside a GGUF file: `ollama create NAME -f Modelfile` then `ollama run NAME`.

Ollama templates are Go templates, not Jinja: ChatML models (SmolLM2, Qwen, Hermes) get a ChatML
template; for others the GGUF's own chat template is left to Ollama's detection.
"""

from __future__ import annotations

from pathlib import Path

CHATML_TEMPLATE = """{{- range .Messages }}<|im_start|>{{ .Role }}
{{ .Content }}<|im_end|>
{{ end }}<|im_start|>assistant
"""


def write_modelfile(gguf_file: Path, chat_template: str | None, eos_token: str | None) -> Path:
    lines = [f"FROM ./{gguf_file.name}"]
    if chat_template and "<|im_start|>" in chat_template:
        lines += ['TEMPLATE """' + CHATML_TEMPLATE + '"""', 'PARAMETER stop "<|im_end|>"']
    elif eos_token:
        lines.append(f'PARAMETER stop "{eos_token}"')
    path = gguf_file.parent / "Modelfile"
    path.write_text("\n".join(lines) + "\n")
    return path
