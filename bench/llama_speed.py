"""Raw llama.cpp speed of a bundled GGUF: prompt tokens per second and decoded tokens per second.

Compares llama.cpp builds (the portable AVX2 one `make install` makes against one with the CPU's
other instruction sets): run it once per build, putting the other build first on the path.

    python bench/llama_speed.py                                   # 1.5B, one thread
    PYTHONPATH=/tmp/llama512 python bench/llama_speed.py          # a build installed with pip --target
    python bench/llama_speed.py --model qwen2.5-coder-0.5b --threads 2 --repeat 3

The prompt is the first queries of the routing task set joined (real text, the same for every
build), cut to --prompt-tokens; decoding is greedy from it. Each repeat starts from an empty context.
Prints the build's flags and one JSON line per repeat.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.models.gguf import ensure_model_file  # noqa: E402
from scenarios.routing_tasks import load_tasks  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-1.5b", help="a bundled model's name")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--prompt-tokens", type=int, default=800)
    parser.add_argument("--decode-tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    import llama_cpp

    print(f"llama_cpp {llama_cpp.__version__} from {Path(llama_cpp.__file__).parent}")
    print(llama_cpp.llama_print_system_info().decode().strip())
    llm = llama_cpp.Llama(model_path=str(ensure_model_file(args.model)), n_ctx=args.prompt_tokens + args.decode_tokens + 64,
                          n_threads=args.threads, n_threads_batch=args.threads, verbose=False)
    text = "\n".join(task.query for task in load_tasks())
    prompt = llm.tokenize(text.encode("utf-8"))[: args.prompt_tokens]
    if len(prompt) < args.prompt_tokens:
        raise SystemExit(f"the task set gives only {len(prompt)} prompt tokens")
    for repeat in range(args.repeat):
        llm.reset()
        started = time.perf_counter()
        llm.eval(prompt)
        prompt_s = time.perf_counter() - started
        started, decoded = time.perf_counter(), 0
        for _ in llm.generate([], temp=0.0, reset=False):
            decoded += 1
            if decoded >= args.decode_tokens:
                break
        decode_s = time.perf_counter() - started
        print(json.dumps({"model": args.model, "threads": args.threads, "repeat": repeat,
                          "prompt_tokens": len(prompt), "prompt_s": round(prompt_s, 2),
                          "prompt_tok_per_s": round(len(prompt) / prompt_s, 1), "decoded": decoded,
                          "decode_s": round(decode_s, 2), "decode_tok_per_s": round(decoded / decode_s, 2)}))


if __name__ == "__main__":
    main()
