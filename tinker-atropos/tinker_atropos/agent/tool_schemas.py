"""The OpenAI function schemas of hermes-agent 0.19's own tools, as data.

Taken verbatim from `model_tools.get_tool_definitions(enabled_toolsets=["terminal", "file"])` of
hermes-agent 0.19.0 (defined in `tools/terminal_tool.py` TERMINAL_SCHEMA and `tools/file_tools.py`
READ_FILE_SCHEMA, WRITE_FILE_SCHEMA, PATCH_SCHEMA, SEARCH_FILES_SCHEMA), so a policy trained here
makes exactly the calls it will make inside Hermes. Regenerate them from a newer Hermes, never
edit by hand.
"""

from __future__ import annotations

from typing import Any

HERMES_VERSION = "0.19.0"

TOOL_SCHEMAS: dict[str, dict[str, Any]] = {
    "terminal": {
        "type": "function",
        "function": {
            "name": "terminal",
            "description": "Execute shell commands on a Linux environment. Filesystem, current "
            "working directory, and exported environment variables persist "
            "between calls.\n"
            "\n"
            "Do NOT use cat/head/tail to read files — use read_file instead.\n"
            "Do NOT use grep/rg/find to search — use search_files instead.\n"
            "Do NOT use ls to list directories — use search_files(target='files') "
            "instead.\n"
            "Do NOT use sed/awk to edit files — use patch instead.\n"
            "Do NOT use echo/cat heredoc to create files — use write_file "
            "instead.\n"
            "Reserve terminal for: builds, installs, git, processes, scripts, "
            "network, package managers, and anything that needs a shell.\n"
            "Because exported environment state persists, activate a virtualenv "
            "or export setup variables once per session; do not re-source the "
            "same environment before every command unless a command proves the "
            "shell state was reset.\n"
            "\n"
            "Foreground (default): Commands return INSTANTLY when done, even if "
            "the timeout is high. Set timeout=300 for long builds/scripts — "
            "you'll still get the result in seconds if it's fast. Prefer "
            "foreground for short commands.\n"
            "Background: Set background=true to get a session_id. Almost always "
            "pair with notify_on_complete=true — bg without notify runs SILENTLY "
            "and you have no way to learn it finished short of calling "
            "process(action='poll') yourself. Two legitimate uses:\n"
            "  (1) Long-lived processes that never exit (servers, watchers, "
            "daemons) — silent is correct, there's no exit to notify on.\n"
            "  (2) Long-running bounded tasks (tests, builds, deploys, CI "
            "pollers, batch jobs) — MUST set notify_on_complete=true. Without it "
            "you'll either forget to poll or sit blocked waiting for the user to "
            "surface the result.\n"
            "For servers/watchers, do NOT use shell-level background wrappers "
            "(nohup/disown/setsid/trailing '&') in foreground mode. Use "
            "background=true so Hermes can track lifecycle and output.\n"
            "After starting a server, verify readiness with a health check or log "
            "signal, then run tests in a separate terminal() call. Avoid blind "
            "sleep loops.\n"
            'Use process(action="poll") for progress checks, '
            'process(action="wait") to block until done.\n'
            "Working directory: Use 'workdir' for per-command cwd.\n"
            "PTY mode: Set pty=true for interactive CLI tools (Codex, Claude "
            "Code, Python REPL).\n"
            "\n"
            "Do NOT use vim/nano/interactive tools without pty=true — they hang "
            "without a pseudo-terminal. Pipe git output to cat if it might "
            "page.\n",
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {
                        "type": "string",
                        "description": "The command to execute on the VM",
                    },
                    "background": {
                        "type": "boolean",
                        "description": "Run the command in the "
                        "background. Almost "
                        "always pair with "
                        "notify_on_complete=true "
                        "— without it, the "
                        "process runs silently "
                        "and you'll have no way "
                        "to learn it finished "
                        "short of calling "
                        "process(action='poll') "
                        "yourself (easy to "
                        "forget, leading to "
                        "silent blindness on "
                        "long jobs). Two "
                        "legitimate patterns: "
                        "(1) Long-lived "
                        "processes that never "
                        "exit (servers, "
                        "watchers, daemons) — "
                        "these stay silent "
                        "because there's no exit "
                        "to notify on. (2) "
                        "Long-running bounded "
                        "tasks (tests, builds, "
                        "deploys, CI pollers, "
                        "batch jobs) — these "
                        "MUST set "
                        "notify_on_complete=true. "
                        "For short commands, "
                        "prefer foreground with "
                        "a generous timeout "
                        "instead.",
                        "default": False,
                    },
                    "timeout": {
                        "type": "integer",
                        "description": "Max seconds to wait "
                        "(default: 180, foreground "
                        "max: 600). Returns "
                        "INSTANTLY when command "
                        "finishes — set high for "
                        "long tasks, you won't wait "
                        "unnecessarily. Foreground "
                        "timeout above 600s is "
                        "rejected; use "
                        "background=true for longer "
                        "commands.",
                        "minimum": 1,
                    },
                    "workdir": {
                        "type": "string",
                        "description": "Working directory for this "
                        "command (absolute path). "
                        "Defaults to the session "
                        "working directory.",
                    },
                    "pty": {
                        "type": "boolean",
                        "description": "Run in pseudo-terminal (PTY) "
                        "mode for interactive CLI tools "
                        "like Codex, Claude Code, or "
                        "Python REPL. Only works with "
                        "local and SSH backends. "
                        "Default: false.",
                        "default": False,
                    },
                    "notify_on_complete": {
                        "type": "boolean",
                        "description": "When true (and "
                        "background=true), "
                        "you'll be "
                        "automatically "
                        "notified "
                        "exactly once "
                        "when the "
                        "process "
                        "finishes. "
                        "**This is the "
                        "right choice "
                        "for almost "
                        "every "
                        "long-running "
                        "task** — tests, "
                        "builds, "
                        "deployments, "
                        "multi-item "
                        "batch jobs, "
                        "anything that "
                        "takes over a "
                        "minute and has "
                        "a defined end. "
                        "Use this and "
                        "keep working on "
                        "other things; "
                        "the system "
                        "notifies you on "
                        "exit. MUTUALLY "
                        "EXCLUSIVE with "
                        "watch_patterns "
                        "— when both are "
                        "set, "
                        "watch_patterns "
                        "is dropped.",
                        "default": False,
                    },
                    "watch_patterns": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Strings to watch "
                        "for in background "
                        "process output. "
                        "HARD RATE LIMIT: at "
                        "most 1 notification "
                        "per 15 seconds per "
                        "process — matches "
                        "arriving inside the "
                        "cooldown are "
                        "dropped. After 3 "
                        "consecutive "
                        "15-second windows "
                        "with dropped "
                        "matches, "
                        "watch_patterns is "
                        "automatically "
                        "disabled for that "
                        "process and "
                        "promoted to "
                        "notify_on_complete "
                        "behavior (one "
                        "notification on "
                        "exit, no more "
                        "mid-process spam). "
                        "USE ONLY for truly "
                        "rare, one-shot "
                        "mid-process signals "
                        "on LONG-LIVED "
                        "processes that will "
                        "never exit on their "
                        "own — e.g. "
                        "['Application "
                        "startup complete'] "
                        "on a server so you "
                        "know when to hit "
                        "its endpoint, or "
                        "['migration done'] "
                        "on a daemon. DO NOT "
                        "use for: (1) "
                        "end-of-run markers "
                        "like 'DONE'/'PASS' "
                        "— use "
                        "notify_on_complete "
                        "instead; (2) error "
                        "patterns like "
                        "'ERROR'/'Traceback' "
                        "in loops or "
                        "multi-item batch "
                        "jobs — they fire on "
                        "every iteration and "
                        "you'll hit the "
                        "strike limit fast; "
                        "(3) anything you'd "
                        "ever combine with "
                        "notify_on_complete. "
                        "When in doubt, "
                        "choose "
                        "notify_on_complete. "
                        "MUTUALLY EXCLUSIVE "
                        "with "
                        "notify_on_complete "
                        "— set one, not "
                        "both.",
                    },
                },
                "required": ["command"],
            },
        },
    },
    "read_file": {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a text file with line numbers and pagination. Use this instead "
            "of cat/head/tail in terminal. Output format: 'LINE_NUM|CONTENT'. "
            "Suggests similar filenames if not found. Use offset and limit for "
            "large files. Reads exceeding ~100K characters are truncated on a "
            "line boundary and return a next_offset; continue with offset to read "
            "the rest. Jupyter notebooks (.ipynb), Word documents (.docx), and "
            "Excel workbooks (.xlsx) are auto-extracted to readable text. NOTE: "
            "Cannot read images or other binary files — use vision_analyze for "
            "images.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "description": "Path to the file to read (absolute, relative, or ~/path)",
                    },
                    "offset": {
                        "type": "integer",
                        "description": "Line number to start reading from (1-indexed, default: 1)",
                        "default": 1,
                        "minimum": 1,
                    },
                    "limit": {
                        "type": "integer",
                        "description": "Maximum number of lines to read (default: 500, max: 2000)",
                        "default": 500,
                        "maximum": 2000,
                    },
                },
                "required": ["path"],
            },
        },
    },
    "write_file": {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Write content to a file, completely replacing existing content. Use "
            "this instead of echo/cat heredoc in terminal. Creates parent "
            "directories automatically. OVERWRITES the entire file — use 'patch' "
            "for targeted edits. Auto-runs syntax checks on .py/.json/.yaml/.toml "
            "and other linted languages; only NEW errors introduced by this write "
            "are surfaced (pre-existing errors are filtered out).",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "description": "Path to the file to write "
                        "(will be created if it "
                        "doesn't exist, overwritten if "
                        "it does)",
                    },
                    "content": {
                        "type": "string",
                        "description": "Complete content to write to the file",
                    },
                    "cross_profile": {
                        "type": "boolean",
                        "description": "Opt out of the "
                        "cross-profile soft "
                        "guard. Defaults to "
                        "false. Set true ONLY "
                        "after explicit user "
                        "direction to edit "
                        "another Hermes "
                        "profile's "
                        "skills/plugins/cron/memories "
                        "— by default these "
                        "writes are blocked "
                        "with a warning "
                        "because they affect "
                        "a different profile "
                        "than the one this "
                        "session is running "
                        "under.",
                        "default": False,
                    },
                },
                "required": ["path", "content"],
            },
        },
    },
    "patch": {
        "type": "function",
        "function": {
            "name": "patch",
            "description": "Targeted find-and-replace edits in files. Use this instead of "
            "sed/awk in terminal. Uses fuzzy matching (9 strategies) so minor "
            "whitespace/indentation differences won't break it. Returns a unified "
            "diff. Auto-runs syntax checks after editing.\n"
            "\n"
            "REPLACE MODE (mode='replace', default): find a unique string and "
            "replace it. REQUIRED PARAMETERS: mode, path, old_string, "
            "new_string.\n"
            "PATCH MODE (mode='patch'): apply V4A multi-file patches for bulk "
            "changes. REQUIRED PARAMETERS: mode, patch.",
            "parameters": {
                "type": "object",
                "properties": {
                    "mode": {
                        "type": "string",
                        "enum": ["replace", "patch"],
                        "description": "Edit mode. 'replace' "
                        "(default): requires path + "
                        "old_string + new_string. "
                        "'patch': requires patch "
                        "content only.",
                        "default": "replace",
                    },
                    "path": {
                        "type": "string",
                        "description": "REQUIRED when mode='replace'. File path to edit.",
                    },
                    "old_string": {
                        "type": "string",
                        "description": "REQUIRED when "
                        "mode='replace'. Exact "
                        "text to find and "
                        "replace. Must be unique "
                        "in the file unless "
                        "replace_all=true. "
                        "Include surrounding "
                        "context lines to ensure "
                        "uniqueness.",
                    },
                    "new_string": {
                        "type": "string",
                        "description": "REQUIRED when "
                        "mode='replace'. "
                        "Replacement text. Pass "
                        "empty string '' to "
                        "delete the matched "
                        "text.",
                    },
                    "replace_all": {
                        "type": "boolean",
                        "description": "Replace all occurrences instead of requiring a unique match (default: false)",
                        "default": False,
                    },
                    "patch": {
                        "type": "string",
                        "description": "REQUIRED when mode='patch'. "
                        "V4A format patch content. "
                        "Format:\n"
                        "*** Begin Patch\n"
                        "*** Update File: "
                        "path/to/file\n"
                        "@@ context hint @@\n"
                        " context line\n"
                        "-removed line\n"
                        "+added line\n"
                        "*** End Patch",
                    },
                    "cross_profile": {
                        "type": "boolean",
                        "description": "Opt out of the "
                        "cross-profile soft "
                        "guard. Defaults to "
                        "false. Set true ONLY "
                        "after explicit user "
                        "direction to edit "
                        "another Hermes "
                        "profile's "
                        "skills/plugins/cron/memories.",
                        "default": False,
                    },
                },
                "required": ["mode"],
            },
        },
    },
    "search_files": {
        "type": "function",
        "function": {
            "name": "search_files",
            "description": "Search file contents or find files by name. Use this instead of "
            "grep/rg/find/ls in terminal. Ripgrep-backed, faster than shell "
            "equivalents.\n"
            "\n"
            "Content search (target='content'): Regex search inside files. Output "
            "modes: full matches with line numbers, file paths only, or match "
            "counts.\n"
            "\n"
            "File search (target='files'): Find files by glob pattern (e.g., "
            "'*.py', '*config*'). Also use this instead of ls — results sorted by "
            "modification time.",
            "parameters": {
                "type": "object",
                "properties": {
                    "pattern": {
                        "type": "string",
                        "description": "Regex pattern for content "
                        "search, or glob pattern "
                        "(e.g., '*.py') for file "
                        "search",
                    },
                    "target": {
                        "type": "string",
                        "enum": ["content", "files"],
                        "description": "'content' searches inside file contents, 'files' searches for files by name",
                        "default": "content",
                    },
                    "path": {
                        "type": "string",
                        "description": "Directory or file to search in (default: current working directory)",
                        "default": ".",
                    },
                    "file_glob": {
                        "type": "string",
                        "description": "Filter files by pattern "
                        "in grep mode (e.g., "
                        "'*.py' to only search "
                        "Python files)",
                    },
                    "limit": {
                        "type": "integer",
                        "description": "Maximum number of results to return (default: 50)",
                        "default": 50,
                    },
                    "offset": {
                        "type": "integer",
                        "description": "Skip first N results for pagination (default: 0)",
                        "default": 0,
                    },
                    "output_mode": {
                        "type": "string",
                        "enum": ["content", "files_only", "count"],
                        "description": "Output format for grep "
                        "mode: 'content' shows "
                        "matching lines with "
                        "line numbers, "
                        "'files_only' lists "
                        "file paths, 'count' "
                        "shows match counts per "
                        "file",
                        "default": "content",
                    },
                    "context": {
                        "type": "integer",
                        "description": "Number of context lines before and after each match (grep mode only)",
                        "default": 0,
                    },
                },
                "required": ["pattern"],
            },
        },
    },
}
