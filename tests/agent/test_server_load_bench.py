"""bench/server_load.py at a small size: concurrent conversations across a restart, every thread checked."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "server_load.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("server_load_bench", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # dataclasses look their module up there
    spec.loader.exec_module(bench)
    return bench


def test_small_load_run_has_no_errors_and_intact_threads(capsys) -> None:
    bench = load_bench()
    code = bench.main(["--conversations", "6", "--turns", "3", "--restart-after", "1", "--think-ms", "1",
                       "--in-process", "--json", "--max-seconds", "120"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0, result["details"]
    assert result["ok"] == result["requests"] == 18
    assert result["errors"] == 0 and result["thread_problems"] == 0
    assert result["p50_ms"] is not None and result["p95_ms"] >= result["p50_ms"]


def test_echo_agent_in_a_server_process_reports_percentiles_and_server_cpu(capsys) -> None:
    bench = load_bench()
    code = bench.main(["--agent", "echo", "--conversations", "4", "--concurrency", "2", "--turns", "2",
                       "--restart-after", "2", "--stream", "yes", "--json", "--max-seconds", "120"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0, result["details"]
    assert (result["agent"], result["concurrency"], result["stream"]) == ("echo", 2, True)
    assert result["ok"] == result["requests"] == 8 and result["thread_problems"] == 0
    assert result["p50_ms"] <= result["p95_ms"] <= result["p99_ms"] <= result["max_ms"]
    # Measured on the server process itself, so it is there and positive.
    assert result["server_cpu_ms_per_turn"] > 0
    # The server process reports its garbage collections while serving: a part of its CPU.
    assert 0 <= result["server_gc_ms_per_turn"] < result["server_cpu_ms_per_turn"]
    assert result["gc_pause_max_ms"] >= 0
    # The client shares the machine's cores, so its own CPU is reported beside the server's.
    assert result["client_cpu_ms_per_turn"] > 0


def test_each_conversation_gets_a_connection_pool_of_its_own() -> None:
    import asyncio

    bench = load_bench()

    async def pools() -> set[int]:
        async with bench.chat_clients("http://127.0.0.1:9", 5) as clients:
            return {id(c._client) for c in clients}

    # One pool shared by every conversation made the client the bottleneck at 200 conversations.
    assert len(asyncio.run(pools())) == 5
