"""Thread caps for CPU work.

On a machine whose cores are shared by other processes, torch and BLAS with several threads run
far slower than with one (their threads wait on each other): a scatter over 40k edges took 107 ms
with two threads and 6 ms with one, MiniLM embedded 300 short texts in 13 s versus 2.5 s. The
CLI and benchmark therefore default to one thread; `REIN_THREADS` overrides.
"""

from __future__ import annotations

import os

from agent.extras import needs_extra


def thread_count() -> int:
    """`$REIN_THREADS`, or 1."""
    try:
        return max(1, int(os.environ.get("REIN_THREADS", "1")))
    except ValueError:
        return 1


def limit_threads(n: int | None = None) -> int:
    """Cap torch intra-op threads and BLAS/OpenMP pools at n (default: thread_count()); returns n."""
    n = n or thread_count()
    with needs_extra("graphs", "QuadGraph retrieval"):
        import torch

    torch.set_num_threads(n)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # optional: without it numpy keeps its default pool
        return n
    threadpool_limits(limits=n)
    return n
