"""Record a tool's results to a cassette file and replay them, keyed by the tool's name and arguments.

A model cassette replays a run only as far as every tool answers exactly as it did when the run was
recorded, because each tool result is part of the next request's key. The retrieval tool does not
carry over between machines: it prints passage scores to 6 decimals, and MiniLM vectors computed on
another CPU differ in their last bits, so a graph built elsewhere prints other digits and the next
call misses. Recording such a tool's results next to the model calls makes the rows replayable from
the files alone, on any machine, with the graph needed only for calls the file lacks.

The file is JSON Lines, one `{"key", "scope", "tool", "arguments", "result"}` object per distinct call,
appended under a file lock (labelling shards share it); the first copy of a key wins. The key includes
a scope, the row the call belongs to (task and pass): two runs that asked the same question on
graphs built on different machines saw different digits, and each must replay what it saw.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
import os
from pathlib import Path
from typing import Any

from agent.errors import UserFacingError
from agent.file_lock import exclusive
from agent.jsonl import json_objects
from tools import Tool, format_result


def call_key(tool: str, arguments: dict[str, Any], scope: str = "") -> str:
    """A stable hash of a call: its scope, the tool's name and its validated arguments."""
    blob = json.dumps({"scope": scope, "tool": tool, "arguments": arguments}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ToolCassette:
    """Results of tool calls, replayed when recorded and recorded when not.

    With `keep_new` (labelling) a result the file lacks is appended at once; without it
    (verification) new results wait in `fresh` until `keep_fresh()`, so that only results a verified
    row used are added.
    """

    def __init__(self, path: str | Path, keep_new: bool = True) -> None:
        self.path = Path(path)
        self.keep_new = keep_new
        self._entries: dict[str, Any] = {}
        self.fresh: dict[str, dict[str, Any]] = {}
        """New results not yet written (only without keep_new), by key."""
        self.used: set[str] = set()
        """Keys of the calls made through this cassette."""
        self.replayed = 0
        """Calls answered from the file."""
        self.scope = ""
        """What the calls being made belong to (labelling sets the task and pass); part of each key."""
        self._by_text: dict[str, list[str]] = {}
        """The text of each new result as its tool message shows it -> the keys of the calls that gave it."""
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        for lineno, row in json_objects(self.path):
            if "key" not in row or "result" not in row:
                raise UserFacingError(f"{self.path}:{lineno}: corrupt tool cassette entry (no key or result)")
            self._entries.setdefault(row["key"], row["result"])

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def keys(self) -> frozenset[str]:
        """The call keys the file holds a result for."""
        return frozenset(self._entries)

    def wrap(self, tool: Tool) -> Tool:
        """The tool, answering from this cassette when it can (sync stays sync: it runs in a thread)."""
        if inspect.iscoroutinefunction(tool.fn):
            async def replay_async(**arguments: Any) -> Any:
                key = self._before(tool.name, arguments)
                if key in self._entries:
                    return self._replay(key)
                return self._after(key, tool.name, arguments, await tool.fn(**arguments))

            return tool.with_options(fn=replay_async)

        def replay(**arguments: Any) -> Any:
            key = self._before(tool.name, arguments)
            if key in self._entries:
                return self._replay(key)
            return self._after(key, tool.name, arguments, tool.fn(**arguments))

        return tool.with_options(fn=replay)

    def _before(self, name: str, arguments: dict[str, Any]) -> str:
        key = call_key(name, arguments, self.scope)
        self.used.add(key)
        return key

    def _replay(self, key: str) -> Any:
        self.replayed += 1
        return copy.deepcopy(self._entries[key])

    def _after(self, key: str, name: str, arguments: dict[str, Any], result: Any) -> Any:
        # Stored as JSON, so a replayed result is the JSON form of the live one (tuples come back as
        # lists), which the tool message renders the same way.
        entry = {"key": key, "scope": self.scope, "tool": name, "arguments": json.loads(json.dumps(arguments, default=str)),
                 "result": json.loads(json.dumps(result, ensure_ascii=False))}
        self._entries[key] = entry["result"]
        if self.keep_new:
            self._append([entry])
        else:
            # Only results waiting in `fresh` can be corrected, so a labelling run keeps no texts.
            self.fresh[key] = entry
            self._by_text.setdefault(format_result(entry["result"]), []).append(key)
        return copy.deepcopy(entry["result"])

    def keep_fresh(self) -> int:
        """Append the results waiting in `fresh`; how many."""
        entries = list(self.fresh.values())
        if entries:
            self._append(entries)
        self.fresh.clear()
        self._by_text.clear()
        return len(entries)

    def correct(self, text: str, result: Any) -> int:
        """Replace every new result whose message text is `text` (those waiting in `fresh`) by `result`:
        the version a recorded run was found to have seen (recover_digits.py). How many were replaced.

        Every one, because two calls of a run can return the same text (the same question asked twice,
        worded a little differently), and the run saw one version of it."""
        keys = [key for key in self._by_text.pop(text, []) if key in self.fresh]
        for key in keys:
            self.fresh[key]["result"] = result
            self._entries[key] = result
        return len(keys)

    def forget_fresh(self) -> None:
        """Drop the results waiting in `fresh`: a row that did not verify used them."""
        for key in self.fresh:
            self._entries.pop(key, None)
        self.fresh.clear()
        self._by_text.clear()

    def _append(self, entries: list[dict[str, Any]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f, exclusive(f):
            f.write("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries))
            f.flush()
            os.fsync(f.fileno())


__all__ = ["ToolCassette", "call_key"]
