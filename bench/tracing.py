"""bench/overhead.py's turns with tracing on: every span goes to the SDK's in-memory exporter, so
the cost measured is rein's span calls and the SDK's, not an exporter's I/O. Run by hand:

    python bench/tracing.py [--turns 2000]

Compare with `python bench/overhead.py` (tracing off), run side by side under the same load.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from overhead import measure

from agent import tracing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--content", action="store_true", help="record message contents too")
    args = parser.parse_args()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(provider=provider, capture_content=args.content)
    result = asyncio.run(measure(args.turns))
    # One turn: invoke_agent, rein.mode, chat, execute_tool, chat.
    result["spans"] = len(exporter.get_finished_spans())
    print(json.dumps(result))


if __name__ == "__main__":
    main()
