"""The recovery suite through the `openai:` adapter against a real tool-calling server on 127.0.0.1:
llama-cpp-python's server with its function-calling chat format, serving the bundled 1.5B.
One error dialogue and one control, as on the embedded path (test_recovery_local_model.py)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

from agent.models.gguf import LOCAL_MODELS, ensure_model_file

ROOT = Path(__file__).resolve().parents[2]
ERROR = "recovery-retail-opening-unsupported_operation-79"
CONTROL = "recovery-retail-opening-control-56"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    spec = LOCAL_MODELS["qwen2.5-coder-1.5b"]
    try:
        metadata.distribution(spec.distributions[-1])
        import llama_cpp.server  # noqa: F401
    except (metadata.PackageNotFoundError, ImportError) as exc:
        pytest.skip(f"needs the 1.5B and llama-cpp-python[server]: {exc}")
    port = _free_port()
    # llama.cpp logs its load at length: to a file, as a pipe nobody reads would fill and stall it.
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    stream = log.open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(ensure_model_file("qwen2.5-coder-1.5b")),
         "--model_alias", "qwen15", "--chat_format", "chatml-function-calling", "--n_ctx", "8192",
         "--host", "127.0.0.1", "--port", str(port)],
        stdout=stream, stderr=subprocess.STDOUT, text=True,
    )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited: {log.read_text(errors='replace')[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=2):
                    break
            except OSError:
                time.sleep(1)
        else:
            pytest.fail("llama_cpp.server did not answer within 180 s")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        stream.close()


@pytest.mark.slow
def test_rein_over_an_openai_compatible_server_recovers_and_leaves_a_control_alone(server: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "recovery.py"), "--model", "openai:qwen15", "--base-url", server,
         "--ids", f"{ERROR},{CONTROL}", "--interventions", "rein", "--out", str(tmp_path), "--no-progress"],
        cwd=ROOT, capture_output=True, text=True, timeout=1500,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    runs = {r["scenario_id"]: r for r in map(json.loads, (tmp_path / "rein" / "runs.jsonl").read_text().splitlines())}
    assert set(runs) == {ERROR, CONTROL}
    assert not any(r["infrastructure_error"] for r in runs.values()), [r.get("termination") for r in runs.values()]
    error = runs[ERROR]["evaluation"]
    assert error["success"], error
    control = runs[CONTROL]["evaluation"]
    assert control["success"], control
