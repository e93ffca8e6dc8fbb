"""Dense search and the bootstrap run their matrix-vector products on one BLAS thread (measured faster on
the shared CPU) and leave numpy's thread settings as they were."""

from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_info

from retrieval.blas_threads import one_blas_thread


def _blas_threads() -> list[int]:
    return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]


def test_one_blas_thread_inside_and_the_settings_restored_after():
    before = _blas_threads()
    matrix = np.random.default_rng(0).standard_normal((500, 384), dtype=np.float32)
    with one_blas_thread():
        assert set(_blas_threads()) <= {1}
        inside = matrix @ matrix[0]
    assert _blas_threads() == before
    np.testing.assert_allclose(inside, matrix @ matrix[0], rtol=1e-5)
