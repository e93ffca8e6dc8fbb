"""`memeval-train-reranker` / `python -m experiments.training.reranker`: train the cross-encoder reranker.

No trained cross-encoder can be downloaded on these machines (models load offline), so
the harness trains one: a `CrossEncoder` built from the bundled MiniLM bi-encoder (sentence-
transformers adds a fresh one-logit head) is fine-tuned on a training suite that shares no
conversation with the evaluation suite (BEAM 500K by default; BEAM 100K is evaluated).

    training suite -> split by conversation (train / validation)
                   -> first stage (bm25 by default) top `negative_depth` per query
                   -> pairs: evidence = positives, first-stage non-evidence = hard negatives
                   -> binary cross-entropy, AdamW, linear warm-up/decay, fixed seed
                   -> every `eval_every` steps: rerank validation queries' top N, nDCG@8;
                      keep the best weights, stop after `patience` validations without gain or after
                      `epochs` passes over the pairs (both count steps: the same model on any machine)
                   -> the wall-clock budget (`max_train_minutes`) is only a safety cap, checked every
                      step with room for a last validation; cutting there warns, as the model then
                      depends on the machine's speed and load
                   -> save the best weights to `output_dir`; export them to `export_backend` (ONNX);
                      config + validation curve to MLflow and the run dir
`num_layers` keeps only the first N transformer layers of the base model: a compact reranker that
trains and scores in proportion faster (`make reranker`: 2 layers, docs/reranker.md).

A plain torch loop, not `CrossEncoder.fit`: `fit` needs the `datasets` and `accelerate` packages,
which the project does not install, and the loop is short enough to read.
"""

from __future__ import annotations

import contextlib
import copy
import json
import sys
import time
import typing
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from hydra.utils import instantiate
from tqdm.auto import tqdm

from experiments.configure.app import Job, hydra_app
from experiments.configure.app_settings import RerankerSettings
from experiments.configure.build import pipeline_from_config
from experiments.configure.check import ConfigError
from experiments.configure.compose import answer_help
from experiments.configure.setup import setup
from experiments.evaluate.metrics import per_query
from experiments.exit_codes import console_script
from experiments.suites.suite import Suite, SuiteError
from experiments.track.mlflow_tracker import MlflowTracker, TrackingError, git_commit, mlflow_params
from retrieval.encoder import EXPORT_DIR, resolve_model_path
from retrieval.pipeline import PipelineConfigError
from retrieval.reranker import load_cross_encoder
from retrieval.reuse import CandidateCache
from retrieval.types import Query


@dataclass(frozen=True)
class Pair:
    query: str
    text: str
    label: float


@dataclass(frozen=True)
class Split:
    train: list[Query]
    validation: list[Query]


def split_by_conversation(suite: Suite, val_fraction: float, seed: int) -> Split:
    """Hold out whole scopes (conversations), so no validation query sees a training conversation."""
    scopes = sorted({q.scope_key for q in suite.queries})
    if len(scopes) < 2:
        raise ValueError(f"suite {suite.name!r} has {len(scopes)} conversation(s); a split needs 2 or more")
    rng = np.random.default_rng(seed)
    n_val = min(len(scopes) - 1, max(1, round(val_fraction * len(scopes))))
    held_out = set(rng.permutation(scopes)[:n_val].tolist())
    answerable = [q for q in suite.queries if not suite.is_abstention(q.id)]
    return Split(
        train=[q for q in answerable if q.scope_key not in held_out],
        validation=[q for q in answerable if q.scope_key in held_out],
    )


class TimeBudgetWarning(UserWarning):
    """Training was cut by the wall-clock cap: the model is not the config's deterministic one."""


class Budget:
    """The wall-clock safety cap of a training run, checked every step.

    Training ends on steps and patience, which do not depend on the machine; this cap only bounds a
    run on a machine far slower than expected. It stops early enough to leave room for one more
    validation (as long as the slowest so far), so the best weights are chosen and saved within the
    cap, not after it."""

    def __init__(self, started: float, minutes: float | None):
        self.deadline = started + 60 * minutes if minutes else None
        self.validation_s = 0.0

    def exhausted(self) -> bool:
        return self.deadline is not None and time.perf_counter() + self.validation_s >= self.deadline

    @contextlib.contextmanager
    def validation(self):
        with self.timer() as elapsed:
            yield
        self.validation_s = max(self.validation_s, elapsed())

    @staticmethod
    @contextlib.contextmanager
    def timer():
        start, end = time.perf_counter(), []
        yield lambda: (end[0] if end else time.perf_counter()) - start
        end.append(time.perf_counter())


def keep_first_layers(net, n: int) -> None:
    """A compact cross-encoder: keep the first `n` transformer layers (cost is linear in layers)."""
    encoder = getattr(net.base_model, "encoder", None)
    layers = getattr(encoder, "layer", None)
    if layers is None:
        raise ValueError(f"num_layers: cannot find the transformer layers of {type(net).__name__}")
    if not 1 <= n <= len(layers):
        raise ValueError(f"num_layers must be between 1 and {len(layers)}, not {n}")
    encoder.layer = layers[:n]
    net.config.num_hidden_layers = n


def first_stage_lists(
    settings: RerankerSettings, suite: Suite, queries: Sequence[Query], depth: int
) -> dict[str, list[int]]:
    """The first stage's top `depth` corpus indices per query (cached like any run's prefix)."""
    stages = settings.first_stage
    pipeline = pipeline_from_config(list(stages.order), stages.stages, depth=depth)
    cache = CandidateCache(Path(settings.cache_dir) / "candidates") if settings.cache_dir else None
    output = pipeline.run(
        suite.memories, queries, suite_hash=suite.content_hash, cache=cache, progress=settings.progress
    )
    index_of = {mid: i for i, mid in enumerate(output.corpus.ids)}
    return {r.query_id: [index_of[m] for m in r.memory_ids[:depth]] for r in output.ranked}


def training_pairs(
    suite: Suite, queries: Sequence[Query], lists: dict[str, list[int]], settings: RerankerSettings, rng
) -> list[Pair]:
    """Evidence as positives, first-stage non-evidence as hard negatives; capped at `max_pairs`."""
    text = [m.text for m in suite.memories]
    index_of = {m.id: i for i, m in enumerate(suite.memories)}
    per_query: list[list[Pair]] = []
    for q in queries:
        relevant = [index_of[m] for m, g in suite.qrels.get(q.id, {}).items() if g > 0]
        positives = rng.permutation(relevant)[: settings.max_positives_per_query]
        negatives = [i for i in lists.get(q.id, []) if i not in set(relevant)]
        negatives = rng.permutation(negatives)[: settings.negatives_per_query] if negatives else []
        per_query.append(
            [Pair(q.text, text[i], 1.0) for i in positives] + [Pair(q.text, text[i], 0.0) for i in negatives]
        )
    pairs: list[Pair] = []
    for i in rng.permutation(len(per_query)):  # whole queries, in random order, up to the budget
        if len(pairs) + len(per_query[i]) > settings.max_pairs:
            break
        pairs.extend(per_query[i])
    return pairs


def validation_ndcg(model, suite: Suite, queries, lists, metric: str, settings: RerankerSettings) -> float:
    """`metric` of the validation queries' first-stage top N reordered by the model's scores."""
    import torch  # ~5 s to import: only training and validating need it, not --help

    run = {}
    ids = [m.id for m in suite.memories]
    model.model.eval()
    for q in queries:
        cands = lists.get(q.id, [])
        if not cands:
            run[q.id] = []
            continue
        scores = model.predict(
            [(q.text, suite.memories[i].text) for i in cands],
            batch_size=settings.batch_size * 2,
            activation_fn=torch.nn.Identity(),
            show_progress_bar=False,
        )
        order = np.argsort(-np.asarray(scores), kind="stable")
        run[q.id] = [ids[cands[j]] for j in order]
    qrels = {q.id: suite.qrels[q.id] for q in queries}
    return float(per_query(qrels, run, [metric])[metric].mean())


def first_stage_ndcg(suite: Suite, queries, lists, metric: str) -> float:
    ids = [m.id for m in suite.memories]
    run = {q.id: [ids[i] for i in lists.get(q.id, [])] for q in queries}
    return float(per_query({q.id: suite.qrels[q.id] for q in queries}, run, [metric])[metric].mean())


def train(settings: RerankerSettings, run_dir: Path) -> dict[str, Any]:
    import torch  # ~5 s with sentence_transformers and transformers: not for --help
    from sentence_transformers import CrossEncoder
    from transformers import get_linear_schedule_with_warmup

    started = time.perf_counter()
    torch.manual_seed(settings.seed)
    rng = np.random.default_rng(settings.seed)
    suite = instantiate(settings.train_suite, _convert_="all")
    split = split_by_conversation(suite, settings.val_fraction, settings.seed)
    val_queries = list(rng.permutation(np.array(split.validation, dtype=object))[: settings.val_max_queries])
    lists = first_stage_lists(settings, suite, split.train + val_queries, settings.negative_depth)
    pairs = training_pairs(suite, split.train, lists, settings, rng)
    n_pos = sum(p.label > 0 for p in pairs)
    setup_s = time.perf_counter() - started  # suite, first stage, pairs: part of the budget
    print(
        f"training suite {suite.name}: {len(split.train)} train / {len(split.validation)} validation queries "
        f"({len(val_queries)} used); {len(pairs)} pairs ({n_pos} positive); "
        f"negatives from {' -> '.join(settings.first_stage.order)} top {settings.negative_depth}"
    )
    if not pairs:
        raise ValueError("no training pairs: the training suite has no answerable training query")

    model = CrossEncoder(
        resolve_model_path(settings.base_model), num_labels=1, max_length=settings.max_length, device="cpu"
    )
    if settings.num_layers:
        keep_first_layers(model.model, int(settings.num_layers))
    net, tokenizer = model.model, model.tokenizer
    steps_per_epoch = -(-len(pairs) // settings.batch_size)
    total = steps_per_epoch * settings.epochs
    optimizer = torch.optim.AdamW(net.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    schedule = get_linear_schedule_with_warmup(optimizer, int(settings.warmup_ratio * total), total)
    loss_fn = torch.nn.BCEWithLogitsLoss()

    metric = settings.val_metric
    baseline = first_stage_ndcg(suite, val_queries, lists, metric)
    budget = Budget(started, settings.max_train_minutes)
    with budget.validation():
        history = [{"step": 0, "val": validation_ndcg(model, suite, val_queries, lists, metric, settings)}]
    best = {"step": 0, "val": history[0]["val"], "state": copy.deepcopy(net.state_dict())}
    print(f"validation {metric}: first stage {baseline:.4f}, untrained head {history[0]['val']:.4f}")
    step, stale, stopped_early, losses, stop_reason = 0, 0, False, [], "completed"
    bar = tqdm(total=total, desc="train reranker", disable=not settings.progress)
    for _epoch in range(settings.epochs):
        order = rng.permutation(len(pairs))
        for start in range(0, len(pairs), settings.batch_size):
            net.train()
            batch = [pairs[i] for i in order[start : start + settings.batch_size]]
            features = tokenizer(
                [p.query for p in batch],
                [p.text for p in batch],
                padding=True,
                truncation="longest_first",
                max_length=settings.max_length,
                return_tensors="pt",
            )
            logits = net(**features).logits.view(-1)
            loss = loss_fn(logits, torch.tensor([p.label for p in batch], dtype=logits.dtype))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            step += 1
            losses.append(loss.item())
            bar.update(1)
            bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}", best=f"{best['val']:.3f}")
            # The budget is checked every step, keeping room for one last validation of these weights.
            out_of_time = budget.exhausted()
            if step % settings.eval_every == 0 or step == total or out_of_time:
                with budget.validation():
                    val = validation_ndcg(model, suite, val_queries, lists, metric, settings)
                history.append(
                    {"step": step, "val": val, "train_loss": float(np.mean(losses[-settings.eval_every :]))}
                )
                if val > best["val"]:
                    best, stale = {"step": step, "val": val, "state": copy.deepcopy(net.state_dict())}, 0
                else:
                    stale += 1
                if out_of_time:  # best weights so far are kept and saved
                    stopped_early, stop_reason = True, "time budget"
                    warnings.warn(
                        f"the {settings.max_train_minutes}-minute safety cap cut training at step {step} of "
                        f"{total} before patience ({settings.patience}) stopped it: this model depends on "
                        "the machine's speed and load, not only on the config; raise max_train_minutes "
                        "(or null) to train to the deterministic stop",
                        TimeBudgetWarning,
                        stacklevel=1,
                    )
                    break
                if stale >= settings.patience:
                    stopped_early, stop_reason = True, "patience"
                    break
        if stopped_early:
            break
    bar.close()
    net.load_state_dict(best["state"])
    output_dir = Path(settings.output_dir)
    model.save(str(output_dir))
    summary = {
        "train_suite": suite.name,
        "train_suite_hash": suite.content_hash,
        "pairs": len(pairs),
        "positive_pairs": n_pos,
        "train_queries": len(split.train),
        "validation_queries": len(val_queries),
        "steps": step,
        "stopped_early": stopped_early,
        "stop_reason": stop_reason,
        "best_step": best["step"],
        f"val_{metric}_first_stage": baseline,
        f"val_{metric}_untrained": history[0]["val"],
        f"val_{metric}_best": best["val"],
        "final_train_loss": float(np.mean(losses[-settings.eval_every :])),
        "train_s": time.perf_counter() - started,
        "setup_s": setup_s,
        "validation_s_max": budget.validation_s,
        "num_layers": net.config.num_hidden_layers,
        "history": history,
        "config": settings.config,
    }
    if settings.export_backend and settings.export_backend != "torch":
        # Export once now (same folder the stage looks in), so the first rerank does not pay for it.

        with Budget.timer() as export_s:
            export_dir = settings.export_dir or EXPORT_DIR
            folder = str(output_dir.resolve())
            load_cross_encoder(folder, settings.max_length, "cpu", settings.export_backend, export_dir)
        summary["export_backend"], summary["export_s"] = settings.export_backend, export_s()
    for folder in (run_dir, output_dir):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "training.json").write_text(json.dumps(summary, indent=2, default=str))
    print(
        f"best validation {metric} {best['val']:.4f} at step {best['step']} of {step} "
        f"(first stage {baseline:.4f}); saved to {output_dir} in {summary['train_s']:.0f} s"
    )
    if settings.tracking.enabled:
        _log(settings, summary, run_dir)
    return summary


def _log(settings: RerankerSettings, summary: dict[str, Any], run_dir: Path) -> None:
    tracker: MlflowTracker = instantiate(settings.tracking.tracker)
    metrics = {k.replace("@", "_at_"): float(v) for k, v in summary.items() if isinstance(v, (int, float))}
    run_id = tracker.log(
        run_name=f"train-reranker-{summary['train_suite']}",
        params=mlflow_params(settings.config),
        metrics=metrics,
        tags={
            "kind": "train_reranker",
            "suite_hash": summary["train_suite_hash"],
            "git_commit": git_commit(),
        },
        run_dir=run_dir,
        config_text=settings.config_text,
    )
    print(f"MLflow run {run_id} in {tracker.experiment}")


def _refuse(err: BaseException, run_dir: Path) -> typing.NoReturn:
    """Bad input: one line, exit 2, and (as memeval-run) no empty run folder left."""
    from experiments.run.outputs import discard_if_unused

    print(f"error: {err}", file=sys.stderr)
    discard_if_unused(run_dir)
    sys.exit(2)


def _refused(err: BaseException, job: Job) -> None:
    """A setting of the wrong kind (RerankerSettings names each) is refused before the suite is read."""
    if isinstance(err, ConfigError):
        _refuse(err, job.output_dir)


@hydra_app("train_reranker", RerankerSettings.from_config, refused=_refused)
def run_app(settings: RerankerSettings, job: Job) -> float:
    try:
        summary = train(settings, job.output_dir)
    except (SuiteError, PipelineConfigError, TrackingError, ValueError) as err:
        _refuse(err, job.output_dir)
    return float(summary[f"val_{settings.val_metric}_best"])


@console_script
def main() -> None:
    """`memeval-train-reranker`: the Hydra app, or its help text at once (no Hydra group listing)."""
    if not answer_help("train_reranker", sys.argv[1:]):
        setup()
        run_app()


if __name__ == "__main__":
    main()
