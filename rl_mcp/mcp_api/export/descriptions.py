"""What rl_export_model says to the agent: its description
(the next step an answer suggests is built with the answer, in its domain room)."""

from __future__ import annotations

RL_EXPORT_MODEL = """Take a run's trained model out of rl-mcp, in a form other programs load: a PEFT adapter
(`adapter`), a merged transformers model (`merged`), or a single GGUF file with an Ollama Modelfile
(`gguf`, for llama.cpp and Ollama; llama-type models such as SmolLM2).

<when_to_use>
After a run (or during one, for a saved checkpoint) when the person wants to use the model
elsewhere: Hermes with a local model, Ollama, llama.cpp, transformers, or the Hugging Face Hub.
</when_to_use>

<what_it_does>
Picks the checkpoint (`best` by the validation set where the run keeps it and has one, never by the
held-out set; else `final`, or a step), converts it in a child process with progress notifications,
loads the export back and checks that its greedy replies to the environment's own prompts equal
the trained policy's (adapter and merged float32: all; lossy dtypes: at least half), writes a README.md model card with
the reward curve, and with `hub_repo` pushes the folder to the Hub (token from HF_TOKEN, never
echoed). Tinker runs: the weights are exported by Tinker from the run's saved training state and
downloaded first (needs TINKER_API_KEY and the network); a self-hosted engine's runs: the
checkpoint's archive is downloaded from the engine (which must be running; no key).
</what_it_does>

<returns>
The folder, its files and sizes, the command to load it, the check's figures, the model card's
path, and the Hub URL when pushed.
</returns>
"""
