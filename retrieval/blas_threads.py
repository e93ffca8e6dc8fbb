"""One BLAS thread for the small matrix-vector products of a query or a bootstrap.

OpenBLAS wakes its other threads for such a product, and they spin after it: on the shared 2-core box a
dense query's p95 went from 0.4 ms to 8-70 ms (reports/benchmarks/backends.md, "Dense search threads"),
and in a sweep the spinning threads' CPU time was a third of each job.
"""

from __future__ import annotations

import functools
from typing import Any


@functools.lru_cache(maxsize=1)
def _controller() -> Any:
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def one_blas_thread() -> Any:
    """A context manager: BLAS limited to one thread inside it (threadpoolctl; cheap to enter)."""
    return _controller().limit(limits=1, user_api="blas")
