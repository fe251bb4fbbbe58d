"""On-policy distillation: a teacher's logprobs on the student's own samples as a per-token signal.

`signal.py` is the math (pure), `tokenizers.py` says whether two models share a tokenizer (torch-free:
the MCP server refuses a teacher with it before a start), `teacher.py` makes the teacher's sampler in the
trainer (an adapter, a base model, Tinker's sampling client or an OpenAI-compatible endpoint).
"""
