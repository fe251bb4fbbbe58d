"""What the environment tools say to the agent: each tool's description
(the next step an answer suggests is built with the answer, in its domain room)."""

RL_LIST_ENVIRONMENTS = """\
List the RL environments available for training (Atropos BaseEnv subclasses, Hermes agent
environments, reasoning-gym's procedural tasks, verifiers environments: classic and v1).

<when_to_use>
Start here. Call it to see what can be trained, or to check a custom environment was found
(custom environments come from the directories in RL_MCP_ENV_DIRS).
</when_to_use>

<returns>
Each environment's `name` (what rl_select_environment takes), class, file, one-line description,
config class and `format` (atropos, hermes, verifiers, verifiers-v1, mcp); `task_catalogs`: families
of tasks listed by name only, each task an environment of its own (reasoning-gym's: select
`reasoning_gym:<task>`, e.g. reasoning_gym:leg_counting); which one is selected now; names
shadowed by an earlier directory; files that could not be parsed (a syntax error is reported
here and the file is skipped). Nothing is imported or run: files are only parsed. `tool_servers`:
the user's MCP tool servers (from the tool-servers file, `tool_servers_file`: Claude Desktop's
`mcpServers` JSON; RL_MCP_TOOL_SERVERS names another, e.g. the client's own config), each an
environment `mcp:<server>` with its tools (names, descriptions, input schemas, annotations, which are
enabled by default), read from the server itself; a server that cannot start has its `error`.
</returns>

<next_step>
rl_select_environment(name) with one of the names; to train on a tool server, write its tasks first
with rl_write_mcp_tasks. The source of any environment is readable as
the resource rl://environments/{name}.
</next_step>
"""

RL_SELECT_ENVIRONMENT = """\
Select the environment to configure, test and train.

<when_to_use>
After rl_list_environments, before editing the config or starting training.
</when_to_use>

<behaviour>
Loads the environment's config fields in a separate short-lived process (the first time may take
a few seconds; later selections are cached). Sets `wandb_name` to `{env}-{timestamp}` and clears
any edits made for the previously selected environment. If the environment fails to import, the
answer is an error with the end of its traceback and the previous selection stays as it was.
The selection and edits survive a server restart.
</behaviour>

<returns>
The full config view (same as rl_get_current_config): every field with its value, type,
constraints, and status (locked by the operator's profile, editable, or managed per run).
</returns>

<next_step>
Adjust editable fields with rl_edit_config, then check the environment with rl_test_inference
before rl_start_training.
</next_step>
"""

RL_GET_CURRENT_CONFIG = """\
Show the selected environment's configuration as a run started now would use it.

<when_to_use>
To review values before testing or training, or to see which fields can be edited and their
bounds. Read-only and cheap.
</when_to_use>

<returns>
The active profile (backend, model, locked values), every config field (section `env` for the
environment, `trainer` for training, `verifiers` for a verifiers environment's own arguments) with
its value, default, type, constraints and status:
`locked` (operator's profile, cannot be edited), `managed` (set per run: ports, run directory),
`edited` (your edit), `profile_default` / `default`, `selection` (wandb_name). `generation_cap`:
where a field asks for more tokens a reply than the model's context holds, the per-turn cap the
inference server applies instead (`max_reply_tokens`). Errors if no environment is selected.
</returns>

<next_step>
rl_edit_config to change an editable field; rl_test_inference or rl_start_training when ready.
</next_step>
"""

RL_EDIT_CONFIG = """\
Change one editable config field of the selected environment, or reset edits to defaults.

<usage>
- Set:  rl_edit_config(field="group_size", value=16)
- Reset one field:  rl_edit_config(field="group_size", reset=true)
- Reset every edit: rl_edit_config(reset=true)
</usage>

<rules>
The value is checked against the field's type and bounds before it is stored (see
`constraints` in rl_get_current_config). A rejected edit changes nothing and the error says what
was expected. Fields locked by the operator's profile (e.g. the model and token lengths on
Tinker) and fields the server sets per run cannot be edited: the error names the locked value.
Edits apply to runs started afterwards, never to a run already going.
</rules>

<next_step>
rl_get_current_config to review, then rl_test_inference or rl_start_training.
</next_step>
"""
