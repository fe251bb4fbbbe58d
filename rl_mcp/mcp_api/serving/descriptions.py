"""What the serving tools say to the agent: their descriptions
(the next step an answer suggests is built with the answer, in its domain room)."""

from __future__ import annotations

RL_SERVE_MODEL = """Serve a run's trained model on this machine as an OpenAI-compatible endpoint
(http://127.0.0.1:PORT/v1, loopback only), so Hermes or any other program can use it.

<when_to_use>
After a run (or during one, for a saved checkpoint) when the person wants to talk to the trained
model, or point an agent at it, without exporting it first.
</when_to_use>

<what_it_does>
Picks the checkpoint as rl_export_model does (`best` by the validation set where the run keeps it
and has one, else `final`, or a step), checks that it fits in memory (an estimate from the base
model's weight files against the machine's available memory: a refusal gives both figures), and
starts the product's inference server with the run's adapter on its base model: sampled on this
machine (vLLM where the run sampled with vLLM), or by Tinker for a Tinker run (needs
TINKER_API_KEY); a self-hosted engine's checkpoint is downloaded and sampled here. Waits until the
server answers (progress notifications meanwhile). The server runs in its own process: it keeps
serving after this MCP server exits (the next one lists it again), unless the MCP server runs with
--stop-runs-on-exit. The same weights asked again return the server already serving them.
</what_it_does>

<returns>
The URL and the served model's name (`<run_id>@<checkpoint>`), its process, port and memory (the
estimate, and the resident memory measured once it serves), the Hermes config block (as YAML to
paste and as fields), a HERMES_HOME written with it and the `hermes` command line, and the `openai`
Python client's lines.
</returns>
"""

RL_LIST_SERVED_MODELS = """The models rl_serve_model (or `mcp-server-rl serve-model`) serves now: each one's
URL, name, port, process, weights and memory (resident now), with what makes Hermes or an OpenAI
client use it. Models served before this MCP server started are listed too."""

RL_STOP_SERVED_MODEL = """Stop serving a model (by its name from rl_serve_model or rl_list_served_models,
`<run_id>@<checkpoint>`): its inference server and everything it started end, and its memory is freed.
The run and its weights are untouched."""
