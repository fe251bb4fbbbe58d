"""read_file, write_file, patch and search_files against a Sandbox, answering with the JSON fields
hermes-agent 0.19 returns, so a policy reads the same shapes here as inside Hermes.

Each function takes the validated arguments and returns the result dict; a dict with a truthy
`error` is a failed call. Text fields are cut before JSON encoding so results stay valid JSON.
"""

from __future__ import annotations

import difflib
import re
import shlex
from typing import Any

from tinker_atropos.agent.sandboxes import Sandbox

READ_CAP_BYTES = 8 * 1024 * 1024  # larger files are read up to here
MAX_LINE_CHARS = 2000  # Hermes' per-line cap in read_file
_V4A_FILE = re.compile(r"\*\*\* (Update|Add|Delete) File: (.+)")


async def read_file(sb: Sandbox, args: dict[str, Any], max_chars: int) -> dict[str, Any]:
    path, offset, limit = args["path"], args.get("offset", 1), args.get("limit", 500)
    result: dict[str, Any] = {
        "content": "",
        "total_lines": 0,
        "file_size": 0,
        "truncated": False,
    }
    result |= {"is_binary": False, "is_image": False}
    try:
        data = await sb.read_bytes(path, READ_CAP_BYTES)
    except FileNotFoundError:
        return result | {"error": f"File not found: {path}"}
    except IsADirectoryError:
        return result | {"error": f"{path} is a directory: use search_files(target='files') to list it"}
    if b"\0" in data[:8192]:
        return result | {"is_binary": True, "error": f"Cannot read binary file: {path}"}
    text = data.decode("utf-8", "replace")
    lines = text.split("\n")
    budget = max_chars - 200  # room for the other fields
    shown: list[str] = []
    for n, line in enumerate(lines[offset - 1 : offset - 1 + limit], start=offset):
        row = f"{n}|{line[:MAX_LINE_CHARS]}"
        if shown and sum(map(len, shown)) + len(row) > budget:
            break
        shown.append(row)
    end, total = offset - 1 + len(shown), text.count("\n")
    result |= {
        "content": "\n".join(shown),
        "total_lines": total,
        "file_size": len(data),
    }
    if lines[end:] not in ([], [""]):
        hint = f"Use offset={end + 1} to continue reading (showing {offset}-{end} of {total} lines)"
        result |= {"truncated": True, "hint": hint, "next_offset": end + 1}
    return result


async def write_file(sb: Sandbox, args: dict[str, Any], max_chars: int) -> dict[str, Any]:
    data = args["content"].encode()
    created = await sb.write_bytes(args["path"], data)
    resolved = sb.shell_name(args["path"])
    return {
        "bytes_written": len(data),
        "dirs_created": created,
        "resolved_path": resolved,
        "files_modified": [resolved],
    }


async def patch(sb: Sandbox, args: dict[str, Any], max_chars: int) -> dict[str, Any]:
    if args.get("mode", "replace") == "patch":
        if not args.get("patch"):
            return {
                "success": False,
                "error": "patch: mode='patch' requires the 'patch' argument (V4A text)",
            }
        return _cut_diff(await _apply_v4a(sb, args["patch"]), max_chars)
    missing = [k for k in ("path", "old_string", "new_string") if k not in args]
    if missing:
        return {
            "success": False,
            "error": f"patch: mode='replace' requires {', '.join(missing)}",
        }
    path, old, new = args["path"], args["old_string"], args["new_string"]
    try:
        text = (await sb.read_bytes(path, READ_CAP_BYTES)).decode("utf-8", "replace")
    except (FileNotFoundError, IsADirectoryError):
        return {"success": False, "error": f"File not found: {path}"}
    count = text.count(old) if old else 0
    if count == 0:
        return {
            "success": False,
            "error": "Could not find a match for old_string in the file",
            "_hint": (
                "old_string not found. Use read_file to verify the current content, or search_files to locate the text."
            ),
        }
    if count > 1 and not args.get("replace_all", False):
        return {
            "success": False,
            "error": (
                f"Found {count} matches for old_string. "
                "Provide more context to make it unique, or use replace_all=True."
            ),
        }
    updated = text.replace(old, new, -1 if args.get("replace_all", False) else 1)
    await sb.write_bytes(path, updated.encode())
    resolved = sb.shell_name(path)
    result = {
        "success": True,
        "diff": _diff(resolved, text, updated),
        "files_modified": [resolved],
    }
    return _cut_diff(result | {"resolved_path": resolved}, max_chars)


async def _apply_v4a(sb: Sandbox, text: str) -> dict[str, Any]:
    """Apply a V4A patch (*** Update/Add/Delete File, @@ hunks of ' ', '-', '+' lines)."""
    ops: list[tuple[str, str, list[str]]] = []
    for line in text.splitlines():
        m = _V4A_FILE.fullmatch(line.strip())
        if m:
            ops.append((m.group(1), m.group(2).strip(), []))
        elif ops and not line.startswith("*** "):
            ops[-1][2].append(line)
    if not ops:
        return {
            "success": False,
            "error": "patch: no '*** Update/Add/Delete File: <path>' section found",
        }
    diffs, result = (
        [],
        {
            "success": True,
            "files_modified": [],
            "files_created": [],
            "files_deleted": [],
        },
    )
    for kind, path, body in ops:
        resolved = sb.shell_name(path)
        if kind == "Delete":
            await sb.run(f"rm -f -- {shlex.quote(resolved)}")
            result["files_deleted"].append(resolved)
            continue
        if kind == "Add":
            new = "\n".join(line.removeprefix("+") for line in body) + "\n"
            await sb.write_bytes(path, new.encode())
            diffs.append(_diff(resolved, "", new))
            result["files_created"].append(resolved)
            continue
        try:
            old = (await sb.read_bytes(path, READ_CAP_BYTES)).decode("utf-8", "replace")
        except (FileNotFoundError, IsADirectoryError):
            return {"success": False, "error": f"File not found: {path}"}
        new, error = _apply_hunks(old, body)
        if error:
            return {"success": False, "error": f"{path}: {error}"}
        await sb.write_bytes(path, new.encode())
        diffs.append(_diff(resolved, old, new))
        result["files_modified"].append(resolved)
    return {k: v for k, v in result.items() if v} | {"diff": "".join(diffs)}


def _apply_hunks(text: str, body: list[str]) -> tuple[str, str]:
    hunks: list[list[str]] = [[]]
    for line in body:
        if line.startswith("@@"):
            hunks.append([])
        else:
            hunks[-1].append(line)
    pos = 0
    for n, hunk in enumerate((h for h in hunks if h), start=1):
        before = [ln[1:] for ln in hunk if ln[:1] in (" ", "-", "")]
        after = [ln[1:] for ln in hunk if ln[:1] in (" ", "+", "")]
        old_block, new_block = "\n".join(before), "\n".join(after)
        at = text.find(old_block, pos)
        if at < 0:
            return (
                text,
                f"hunk {n}: its context and '-' lines were not found in the file",
            )
        text = text[:at] + new_block + text[at + len(old_block) :]
        pos = at + len(new_block)
    return text, ""


def _diff(path: str, old: str, new: str) -> str:
    lines = difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}")
    return "".join(lines)


def _cut_diff(result: dict[str, Any], max_chars: int) -> dict[str, Any]:
    diff = result.get("diff", "")
    if len(diff) > max_chars - 500:
        result["diff"] = diff[: max_chars - 500] + "\n... [diff truncated]"
    return result


async def search_files(sb: Sandbox, args: dict[str, Any], max_chars: int) -> dict[str, Any]:
    """grep/find inside the sandbox (GNU tools), in a subshell so the agent's cwd is untouched."""
    pattern, path = args["pattern"], args.get("path", ".")
    offset, limit = args.get("offset", 0), args.get("limit", 50)
    resolved = sb.resolve(path)
    where = f"cd {shlex.quote(sb.shell_home)} && "
    rel = shlex.quote(str(resolved.relative_to(sb.workdir)) if resolved != sb.workdir else ".")
    target = {"grep": "content", "find": "files"}.get(args.get("target", "content"), args.get("target"))
    if target == "files":
        cmd = f"find {rel} -type f -name {shlex.quote(pattern)} -printf '%T@\\t%p\\n' 2>/dev/null | sort -rn"
        rows = [ln.split("\t", 1)[1] for ln in (await _lines(sb, where + cmd)) if "\t" in ln]
        return _page({"files": rows}, "files", offset, limit)
    mode = args.get("output_mode", "content")
    glob = f"--include={shlex.quote(args['file_glob'])} " if args.get("file_glob") else ""
    context = args.get("context", 0) if mode == "content" else 0
    flags = {
        "content": f"-n -C {context} --no-group-separator",
        "files_only": "-l",
        "count": "-c",
    }[mode]
    cmd = f"grep -rIEZ {flags} {glob}-e {shlex.quote(pattern)} -- {rel}"
    if mode == "content":
        cmd += f" | head -n {(offset + limit) * (1 + 2 * context) + 1}"
    out = await sb.run(f"( set -o pipefail; {where}{cmd} )")
    lines = out.output.splitlines()
    if not any("\0" in ln for ln in lines) and out.exit_code not in (0, 1) and out.output.strip():
        return {"total_count": 0, "error": out.output.strip()[: max_chars // 2]}
    if mode == "files_only":
        files = [f for ln in lines for f in ln.split("\0") if f]
        return _page({"files": files}, "files", offset, limit)
    if mode == "count":
        counts = {p: int(c) for p, _, c in (ln.partition("\0") for ln in lines) if c.isdigit() and int(c) > 0}
        return {"total_count": sum(counts.values()), "counts": counts}
    matches = []
    for ln in lines:
        p, _, rest = ln.partition("\0")
        m = re.match(r"(\d+)[:-](.*)", rest, re.DOTALL)
        if m:
            matches.append(
                {
                    "path": p,
                    "line": int(m.group(1)),
                    "content": m.group(2)[:MAX_LINE_CHARS],
                }
            )
    return _page({"matches": matches}, "matches", offset, limit, out.truncated)


async def _lines(sb: Sandbox, command: str) -> list[str]:
    return (await sb.run(f"( {command} )")).output.splitlines()


def _page(result: dict[str, Any], key: str, offset: int, limit: int, cut: bool = False) -> dict[str, Any]:
    items = result[key]
    page = items[offset : offset + limit]
    out: dict[str, Any] = {"total_count": len(items)}
    if page:
        out[key] = page
    if cut or offset + limit < len(items):
        out["truncated"] = True
    return out
