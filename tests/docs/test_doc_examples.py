"""The runnable examples of docs/runtime.md, models.md, scenarios.md, tracing.md, mcp.md and rein.md still
run and print what the pages say.

Markers (HTML comments, invisible when the page is rendered) sit on the line before a fence:
- `<!-- doc-test -->` before a ```python block: run it. The blocks of one page run in order in one
  namespace, like a session, in a fresh interpreter whose working directory is a temporary folder
  (with a `scenarios` link to the repository's, so example paths resolve) and whose REIN_HOME is
  another temporary folder.
- `<!-- doc-test: output -->` before a ```text block: the exact stdout of the runnable block before it.
- `<!-- doc-test: file NAME -->` before any block: write its text to NAME in the working folder
  before the page's blocks run.

Examples must use deterministic models (ScriptedModel, FunctionModel, echo); the run fails if one
loads the embedded llama.cpp model.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = ("runtime.md", "models.md", "scenarios.md", "tracing.md", "mcp.md", "rein.md", "guardrails.md")
_MARKER = re.compile(r"^<!--\s*doc-test(?::\s*(output|file\s+(\S+)))?\s*-->\s*$")
_FENCE = re.compile(r"^```(\w*)\s*$")

# Runs in the child interpreter: executes the blocks, reports each block's stdout or traceback.
_RUNNER = r"""
import contextlib, io, json, sys, traceback
blocks = json.load(open(sys.argv[1], encoding="utf-8"))
namespace = {"__name__": "__doc_example__"}
out = []
for block in blocks:
    buf = io.StringIO()
    error = None
    try:
        with contextlib.redirect_stdout(buf):
            exec(compile(block["code"], f"{block['page']}:{block['line']}", "exec"), namespace)
    except BaseException:
        error = traceback.format_exc()
    out.append({"stdout": buf.getvalue(), "error": error})
    if error:
        break
local = sys.modules.get("agent.models.local_loader")
loaded = sorted(key[0] for key in getattr(local, "_LOADED", {}))
print(json.dumps({"blocks": out, "embedded_loaded": loaded}))
"""


@dataclass
class Block:
    """A runnable python block and the output the page promises for it."""

    line: int
    """1-based line of the code's first line in the page."""
    code: str
    """The code."""
    expected: str | None = None
    """Exact stdout the page shows for it, when it shows one."""


@dataclass
class Page:
    """What a page asks the test to do."""

    blocks: list[Block] = field(default_factory=list)
    """Runnable blocks in page order."""
    files: dict[str, str] = field(default_factory=dict)
    """Files to write before running."""


def parse_page(text: str) -> Page:
    """The marked blocks of a Markdown page; a marker without a fence after it is an error."""
    lines = text.splitlines()
    page = Page()
    i = 0
    while i < len(lines):
        marker = _MARKER.match(lines[i].strip())
        if not marker:
            i += 1
            continue
        fence = _FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
        if fence is None:
            raise ValueError(f"line {i + 1}: doc-test marker not followed by a code fence")
        end = next((j for j in range(i + 2, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise ValueError(f"line {i + 2}: unclosed code fence")
        body = "\n".join(lines[i + 2 : end]) + "\n"
        kind, name = marker.group(1), marker.group(2)
        if kind is None:
            if fence.group(1) != "python":
                raise ValueError(f"line {i + 2}: a runnable block must be ```python")
            page.blocks.append(Block(i + 3, body))
        elif kind == "output":
            if not page.blocks or page.blocks[-1].expected is not None:
                raise ValueError(f"line {i + 1}: output block without a runnable block before it")
            page.blocks[-1].expected = body
        else:
            page.files[name] = body
        i = end + 1
    return page


def _normal(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def test_parse_page_reads_markers() -> None:
    text = (
        "intro\n<!-- doc-test: file a.yaml -->\n```yaml\nx: 1\n```\n"
        "<!-- doc-test -->\n```python\nprint(1)\n```\n<!-- doc-test: output -->\n```text\n1\n```\n"
        "```python\nnot run\n```\n"
    )
    page = parse_page(text)
    assert page.files == {"a.yaml": "x: 1\n"}
    assert [(b.line, b.code, b.expected) for b in page.blocks] == [(8, "print(1)\n", "1\n")]
    with pytest.raises(ValueError, match="not followed by a code fence"):
        parse_page("<!-- doc-test -->\ntext\n")
    with pytest.raises(ValueError, match="without a runnable block"):
        parse_page("<!-- doc-test: output -->\n```text\n1\n```\n")


@pytest.mark.parametrize("name", PAGES)
def test_page_examples_run(name: str, tmp_path: Path) -> None:
    path = REPO / "docs" / name
    if not path.is_file():
        pytest.fail(f"{path} is missing")
    page = parse_page(path.read_text(encoding="utf-8"))
    assert page.blocks, f"{name} has no runnable examples"
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    (work / "scenarios").symlink_to(REPO / "scenarios", target_is_directory=True)
    for file_name, text in page.files.items():
        (work / file_name).write_text(text, encoding="utf-8")
    spec = tmp_path / "blocks.json"
    spec.write_text(
        json.dumps([{"page": name, "line": b.line, "code": b.code} for b in page.blocks]),
        encoding="utf-8",
    )
    env = {**os.environ, "REIN_HOME": str(home), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", _RUNNER, str(spec)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    for block, result in zip(page.blocks, report["blocks"], strict=False):
        where = f"docs/{name}, example at line {block.line}"
        assert result["error"] is None, f"{where} failed:\n{result['error']}"
        if block.expected is not None:
            assert _normal(result["stdout"]) == _normal(block.expected), (
                f"{where} printed something else"
            )
    assert len(report["blocks"]) == len(page.blocks)
    assert not report["embedded_loaded"], (
        f"docs/{name} examples loaded the embedded model: {report['embedded_loaded']}"
    )
