"""What the tool-server tools say to the agent: rl_write_mcp_tasks' description (the next step its
answer suggests is in rl_mcp/tool_servers/answers.py)."""

from __future__ import annotations

RL_WRITE_MCP_TASKS = """\
Write training tasks for one of the user's MCP tool servers (an environment `mcp:<server>`): you
read its tools in rl_list_environments (`tool_servers`: names, descriptions, input schemas,
annotations) and write tasks a small model should learn to do with them; rl-mcp checks and saves them.

<when_to_use>
When the user asks to train a model to use one of their tool servers ("train a model to use my git
server"), after rl_list_environments shows the server with its tools and no `error`. Before
rl_select_environment("mcp:<server>") and rl_test_inference, which need tasks.
</when_to_use>

<input>
`server`: the server's name (without `mcp:`). `tasks`: a list of objects
  {"prompt": "...", "answer": "...", "check": {...}, "split": "train" | "eval" (optional)}
where `check` is exactly one of
  {"exact": "text"} / {"contains": "text"} / {"regex": "pattern"}   the model's final answer
      (true instead of the text: the task's `answer`)
  {"called": "tool", "arguments": {"arg": value}}   the model called that tool with those argument values
  {"final_answer_from": "tool", "field": "a.b"}     the final answer states what the tool returned
      (its whole text, or a field of its JSON result)
Write tasks whose check the server's real behaviour decides (e.g. a conversion whose result is
fixed), vary them, and prefer `called` or `final_answer_from` where the answer changes over time.
`tools`: the allow-list the run will use, when it differs from the default (the tools annotated
read-only); a tool annotated destructive is usable only when named there. `mode`: `replace` (default)
or `append` (a task with the same `id` is replaced).
</input>

<behaviour>
Every task is validated before anything is saved: the check parses, its tool exists on the server and
is enabled, and `called` constrains only arguments the tool takes. A rejection names every bad task and
why. Saved as JSONL in RL_MCP_HOME/mcp-tasks/<server>.jsonl, which the user may read and edit; a run
of mcp:<server> reads it unless `tasks_file` names another. `eval_fraction` of the tasks (not marked
with a `split`) are held out for evaluation.
</behaviour>

<next_step>
rl_select_environment(name="mcp:<server>"), then rl_test_inference(num_steps=1, group_size=4) to see
the tasks scored, then rl_start_training.
</next_step>
"""
