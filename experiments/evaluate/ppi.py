"""Prediction-powered inference (PPI): a judge's accuracy corrected by a few human labels, with its interval.

A judge scores every answer (`judged`, 0/1); humans (or a strong judge) label a random subset (`labels`). The
PPI estimate is the judge's mean on the unlabelled answers plus the mean correction on the labelled ones,
theta = mean_U(judged) + mean_L(label - judged) (Angelopoulos et al., Science 2023): unbiased whatever the
judge's errors, and narrower than the labels alone when the judge is good.

Three intervals, reported side by side and labelled, because they answer different questions:
- `ppi`, the cluster interval (memeval's headline): conversations are the sampling unit, as memeval's other
  intervals (docs/metrics.md, "Statistics with few conversations"). The estimate is a sum over conversations
  of their imputed and rectifier sums; its variance is the cluster-robust one with CR2's correction, sum_g
  psi_g^2 / (1-h_g), psi_g the conversation's linearised contribution and h_g its share of the questions
  (G/(G-1) * sum_g psi_g^2 for equal sizes); the interval uses t with G - 1 degrees of freedom. It answers
  "accuracy on conversations like these" (reports/benchmarks/answer_ppi_coverage.md: its coverage).
- `iid_ppi` (PPI, lambda = 1) and `iid_ppi_plus_plus` (PPI++, lambda estimated): what `ppi_py.ppi_mean_ci` and
  ARES's `pp_mean_iid_asymptotic` compute, equal to them to 1e-12 (tests/evaluate/test_ppi.py). They treat
  answers as independent, so they answer "accuracy on these questions" and are too narrow for the former.

No interval is given (the `reason` says why) from fewer than 2 conversations or fewer than MIN_LABELS labels.

The judge's own error against the labels: false-accept rate (judged 1 where the label is 0, over the labels
that are 0) and false-reject rate (judged 0 where the label is 1, over the labels that are 1), each with the
same cluster interval of a ratio.
"""

from __future__ import annotations

import numpy as np

from experiments.evaluate.statistics import cluster_codes

# Fewer labels than this in a cell: the interval is not given (PPI's normal/t approximation needs some).
MIN_LABELS = 30
MIN_CLUSTERS = 2


def _ppf(q: float, df: float | None = None) -> float:
    from scipy import stats  # ~1 s to import; only intervals need it

    return float(stats.norm.ppf(q) if df is None else stats.t.ppf(q, df))


def ppi_lambda(labels: np.ndarray, judged_labelled: np.ndarray, judged_unlabelled: np.ndarray) -> float:
    """PPI++'s power-tuning lambda for a mean (ppi_py's `_calc_lam_glm`, clipped to [0, 1]): the covariance of
    labels and judge on the labelled answers over (1 + n/N) times the judge's variance on all answers. 0 when
    the judge's verdicts do not vary (it then carries no information)."""
    n, big_n = labels.size, judged_unlabelled.size
    label_dev = labels - labels.mean()
    judged_dev = judged_labelled - judged_labelled.mean()
    covariance = 2.0 * float(label_dev @ judged_dev) / n
    variance = float(np.var(np.concatenate([judged_labelled, judged_unlabelled]), ddof=1))
    if not variance > 0:
        return 0.0
    return float(np.clip(covariance / (2.0 * (1.0 + n / big_n) * variance), 0.0, 1.0))


def ppi_mean_iid(
    labels: np.ndarray,
    judged_labelled: np.ndarray,
    judged_unlabelled: np.ndarray,
    *,
    alpha: float = 0.05,
    lam: float | None = 1.0,
) -> tuple[float, float, float, float]:
    """(estimate, low, high, lambda) of the iid PPI interval (lambda 1) or PPI++ (lam=None: lambda estimated),
    with a normal quantile: the computation of ppi_py.ppi_mean_ci (population standard deviations)."""
    if lam is None:
        lam = ppi_lambda(labels, judged_labelled, judged_unlabelled)
    n, big_n = labels.size, judged_unlabelled.size
    imputed = lam * judged_unlabelled
    rectifier = labels - lam * judged_labelled
    estimate = float(imputed.mean() + rectifier.mean())
    se = np.sqrt((imputed.std() / np.sqrt(big_n)) ** 2 + (rectifier.std() / np.sqrt(n)) ** 2)
    half = _ppf(1 - alpha / 2) * float(se)
    return estimate, estimate - half, estimate + half, float(lam)


def ppi_mean_cluster(
    labels: np.ndarray,
    judged_labelled: np.ndarray,
    clusters_labelled: np.ndarray,
    judged_unlabelled: np.ndarray,
    clusters_unlabelled: np.ndarray,
    *,
    alpha: float = 0.05,
) -> tuple[float, float, float, int]:
    """(estimate, low, high, G) of the PPI mean (lambda 1) with conversations as the unit: the estimate is the
    iid one; each conversation g contributes psi_g = (S_g - N_g f)/N + (R_g - n_g r)/n (S_g its judged sum on
    unlabelled answers, R_g its rectifier sum on labelled ones, f and r their means), the variance is
    sum psi_g^2 / (1 - h_g) (h_g: the conversation's share of the questions), the interval t with G - 1 df."""
    codes, g = _codes(np.concatenate([clusters_unlabelled, clusters_labelled]))
    unl, lab = codes[: judged_unlabelled.size], codes[judged_unlabelled.size :]
    big_n, n = judged_unlabelled.size, labels.size
    rectifier = labels - judged_labelled
    f, r = judged_unlabelled.mean(), rectifier.mean()
    psi = (
        np.bincount(unl, weights=judged_unlabelled - f, minlength=g) / big_n
        + np.bincount(lab, weights=rectifier - r, minlength=g) / n
    )
    estimate = float(f + r)
    # CR2's small-sample correction, as memeval's cluster mean interval (statistics._cr2_t): each
    # conversation's squared contribution over 1 - its share of the questions (G/(G-1) for equal sizes).
    share = np.bincount(codes, minlength=g) / codes.size
    half = _ppf(1 - alpha / 2, g - 1) * float(np.sqrt((psi**2 / (1.0 - share)).sum()))
    return estimate, estimate - half, estimate + half, g


def _codes(clusters: np.ndarray) -> tuple[np.ndarray, int]:
    codes = cluster_codes(clusters, len(clusters))
    return codes, int(codes.max()) + 1 if codes.size else 0


def ratio_cluster_ci(
    numerator: np.ndarray, denominator: np.ndarray, clusters: np.ndarray, *, alpha: float = 0.05
) -> tuple[float, float, float] | None:
    """(rate, low, high) of sum(numerator)/sum(denominator) with conversations as the unit (linearised ratio,
    t with G - 1 df among the conversations holding a denominator, clipped to [0, 1]); None when the
    denominator is 0."""
    total = float(denominator.sum())
    if total == 0:
        return None
    rate = float(numerator.sum()) / total
    keep = denominator > 0
    codes, g = _codes(clusters[keep])
    if g < MIN_CLUSTERS:
        return rate, float("nan"), float("nan")
    psi = np.bincount(codes, weights=(numerator[keep] - rate * denominator[keep]) / total, minlength=g)
    half = _ppf(1 - alpha / 2, g - 1) * float(np.sqrt(g / (g - 1) * (psi @ psi)))
    return rate, max(0.0, rate - half), min(1.0, rate + half)


def _interval(estimate: float, low: float, high: float, **extra) -> dict:
    return {"estimate": estimate, "low": low, "high": high, **extra}


def ppi_block(
    judged: np.ndarray,
    labelled_mask: np.ndarray,
    labels: np.ndarray,
    clusters: np.ndarray,
    alpha: float = 0.05,
) -> dict:
    """The PPI block of one cell (an ability, or all questions): the judge's raw accuracy, its false-accept
    and
    false-reject rates against the labels, and the PPI-corrected accuracy with the cluster interval and the
    iid
    PPI / PPI++ intervals beside it, each labelled. `judged` is the judge's 0/1 verdict per question (aligned
    with `clusters`, the conversation of each); `labels` holds the human label per question (read where
    `labelled_mask` is true; any value elsewhere) or only the labelled ones, in order. An interval that cannot
    be given is None, with `reason`."""
    judged = np.asarray(judged, dtype=float)
    mask = np.asarray(labelled_mask, dtype=bool)
    clusters = np.asarray(clusters, dtype=object)
    labels = np.asarray(labels, dtype=float)
    if judged.ndim != 1 or mask.shape != judged.shape or clusters.shape != judged.shape:
        raise ValueError("ppi_block: judged, labelled_mask and clusters must be 1-D and aligned")
    if labels.shape == judged.shape:
        labels = labels[mask]
    elif labels.shape != (int(mask.sum()),):
        raise ValueError(
            f"ppi_block: labels must hold {judged.size} or {int(mask.sum())} values, got {labels.size}"
        )
    if not np.all(np.isin(judged, (0.0, 1.0))) or not np.all(np.isin(labels, (0.0, 1.0))):
        raise ValueError("ppi_block: judged verdicts and labels must be 0 or 1 (leave unparsed answers out)")
    if not 0 < alpha < 1:
        raise ValueError(f"ppi_block: alpha must be in (0, 1), got {alpha}")
    n, big_n = labels.size, int((~mask).sum())
    g_all = _codes(clusters)[1] if clusters.size else 0
    g_labelled = _codes(clusters[mask])[1] if n else 0
    block: dict = {
        "alpha": alpha,
        "n_questions": int(judged.size),
        "n_labelled": n,
        "n_conversations": g_all,
        "n_labelled_conversations": g_labelled,
        "judge_accuracy": float(judged.mean()) if judged.size else None,
        "label_accuracy": float(labels.mean()) if n else None,
        "reason": None,
    }
    if g_all < MIN_CLUSTERS:
        block["reason"] = f"{g_all} conversation(s): an interval needs at least {MIN_CLUSTERS}"
    elif n < MIN_LABELS:
        block["reason"] = f"{n} labelled answer(s): an interval needs at least {MIN_LABELS}"
    elif big_n == 0:
        block["reason"] = "every answer is labelled: no judge verdict to correct (the labels' mean is it)"
    judged_labelled, judged_unlabelled = judged[mask], judged[~mask]
    for name, numerator, denominator in (
        ("false_accept", (judged_labelled == 1) & (labels == 0), labels == 0),
        ("false_reject", (judged_labelled == 0) & (labels == 1), labels == 1),
    ):
        ratio = ratio_cluster_ci(
            numerator.astype(float), denominator.astype(float), clusters[mask], alpha=alpha
        )
        block[name] = (
            None
            if ratio is None
            else {
                "rate": ratio[0],
                "low": None if np.isnan(ratio[1]) or block["reason"] else ratio[1],
                "high": None if np.isnan(ratio[2]) or block["reason"] else ratio[2],
                "n": int(denominator.sum()),
            }
        )
    if block["reason"] is not None:
        block.update(ppi=None, iid_ppi=None, iid_ppi_plus_plus=None)
        return block
    est, low, high, g = ppi_mean_cluster(
        labels, judged_labelled, clusters[mask], judged_unlabelled, clusters[~mask], alpha=alpha
    )
    block["ppi"] = _interval(
        est, low, high, df=g - 1, method="cluster PPI (lambda 1): conversations as the unit, t with G-1 df"
    )
    est, low, high, _ = ppi_mean_iid(labels, judged_labelled, judged_unlabelled, alpha=alpha, lam=1.0)
    block["iid_ppi"] = _interval(
        est, low, high, method="iid PPI (lambda 1), normal: ppi_py / ARES; accuracy on these questions"
    )
    est, low, high, lam = ppi_mean_iid(labels, judged_labelled, judged_unlabelled, alpha=alpha, lam=None)
    block["iid_ppi_plus_plus"] = _interval(
        est, low, high, **{"lambda": lam}, method="iid PPI++ (lambda estimated), normal: ppi_py"
    )
    return block
