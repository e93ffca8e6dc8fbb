"""A deterministic suite of tiered memories with known evidence, for the tiering variant.

BEAM holds only messages (observations), so this generator builds what tiered memory systems keep:
per scope (an agent's project), topics (a service x a problem), each with `observations_per_topic`
episodic observations (symptoms, no fix) and, for some topics, one high-order memory (lesson,
semantic, procedural, crystal, insight, facet) that states the fix. Decoys test the rules: a deleted
outdated memory and a low-confidence one (confidence 0.2 < floor 0.3) on some answered topics, each
with a wrong fix; they are judged 0 and must never be returned.

Queries (label `category`):
- `high_order`: "what is the fix for <symptom> on <service>?" - the high-order memory is grade 2,
  the topic's observations grade 1 (they describe the case but hold no fix);
- `observation_only`: a topic with no high-order memory - its observations are grade 1.
Scopes share services and problems but not fixes, so a cross-scope result is both a leak and wrong.
Every memory carries created_at, tags and importance, so the decay and tag variants run here too;
high-order memories carry strength and confidence (observations none: a missing factor counts 1.0).

    python -m experiments.suites.generators.tiered_synth OUT [--observations 1000] [--scopes 2] [--seed 0]
    python -m experiments.run suite=tiered_synth variant=tiering tracking=none
"""

from __future__ import annotations

import argparse
from datetime import date, timedelta
from types import MappingProxyType

import numpy as np

from experiments.suites.jsonl import save_suite
from experiments.suites.suite import Gathered, Suite, check_suite
from retrieval.types import Memory, Query

SERVICES = (
    "billing-api auth-service search-indexer payment-gateway report-worker email-sender image-resizer "
    "user-profile order-queue inventory-sync analytics-etl notification-hub checkout-web admin-portal "
    "metrics-agent backup-job"
).split()
# problem slug -> (symptom, log detail, (fix for even scopes, fix for odd scopes))
PROBLEMS = {
    "timeout": (
        "request timeouts",
        "upstream deadline exceeded",
        (
            "raise the client timeout to 30 seconds and retry with backoff",
            "move the call to a background job and poll for the result",
        ),
    ),
    "memory-leak": (
        "steadily growing memory",
        "resident set above 2 GB",
        ("recycle workers every 500 requests", "close the cursor inside the export loop"),
    ),
    "deadlock": (
        "stuck transactions",
        "lock wait detected",
        ("acquire row locks in a fixed table order", "shorten transactions to one statement"),
    ),
    "flaky-test": (
        "intermittent test failures",
        "order-dependent fixture state",
        ("pin the random seed and isolate the shared fixture", "run the suite with fresh databases"),
    ),
    "rate-limit": (
        "HTTP 429 responses",
        "quota exceeded for the vendor key",
        ("batch the calls and honour Retry-After", "spread calls with a token bucket of 10 per second"),
    ),
    "disk-full": (
        "write errors",
        "no space left on device",
        ("rotate logs daily and keep seven days", "move artefacts to object storage nightly"),
    ),
    "stale-cache": (
        "stale values after updates",
        "cache hit after a write",
        ("invalidate the cache key on every write", "cut the cache TTL to 60 seconds"),
    ),
    "cert-expiry": (
        "TLS handshake failures",
        "certificate has expired",
        ("renew certificates 30 days before expiry", "switch to the managed certificate issuer"),
    ),
    "migration-hang": (
        "hanging deploys",
        "waiting for schema lock",
        ("run migrations before starting new pods", "split the migration into batches of 1000 rows"),
    ),
    "encoding": (
        "garbled characters",
        "UnicodeDecodeError in the parser",
        ("decode input as UTF-8 explicitly", "normalise uploads to NFC before parsing"),
    ),
    "oom-kill": (
        "killed processes",
        "out-of-memory killer invoked",
        ("lower the batch size to 16", "stream rows instead of loading the whole file"),
    ),
    "slow-query": (
        "slow page loads",
        "sequential scan on a large table",
        ("add an index on the foreign key column", "paginate the listing to 50 rows"),
    ),
}
OBSERVATION_TEMPLATES = (
    "Day {d}: {service} showed {symptom} during the nightly run.",
    "Saw {symptom} again on {service} after the release.",
    "User reported {symptom} in {service}; logs mention {detail}.",
    "{service} alert fired: {detail}.",
    "Retried {service} by hand after {symptom}; it passed the second time.",
    "On-call note: {service} had {symptom} for about twenty minutes.",
    "{detail} appeared in {service} logs around noon.",
    "Dashboard for {service} flagged {symptom} twice this week.",
)
HIGH_ORDER_TEMPLATES = {
    "lesson": "Lesson learned: when {service} has {symptom}, {fix}.",
    "semantic": "Known fact about {service}: {symptom} comes from {detail}; the remedy is to {fix}.",
    "procedural": "Procedure for {symptom} on {service}: check for {detail}, then {fix}.",
    "crystal": "Settled rule: {fix} whenever {service} shows {symptom}.",
    "insight": "Insight: {symptom} on {service} traces back to {detail}, so {fix}.",
    "facet": "{service} is prone to {symptom}; to handle it, {fix}.",
}
DECOY = "Earlier guess for {service} {symptom}: {fix}."
START = date(2025, 1, 1)


def tiered_synth(
    observations: int = 1000,
    scopes: int = 2,
    seed: int = 0,
    observations_per_topic: int = 8,
    answered_share: float = 0.4,
    name: str = "tiered_synth",
    k: int = 10,
) -> Suite:
    """The suite in memory (deterministic for given arguments)."""
    rng = np.random.default_rng(seed)
    topics_all = [(s, p) for s in SERVICES for p in PROBLEMS]
    tiers = list(HIGH_ORDER_TEMPLATES)
    memories: list[Memory] = []
    queries: list[Query] = []
    qrels: dict[str, dict[str, int]] = {}
    n_topics = max(1, observations // observations_per_topic)
    if n_topics > len(topics_all):
        raise ValueError(f"at most {len(topics_all) * observations_per_topic} observations per scope")
    horizon = 180
    for sc in range(scopes):
        scope = MappingProxyType({"agent": "agent-1", "project": f"project-{sc + 1}"})
        prefix = f"p{sc + 1}"
        chosen = rng.permutation(len(topics_all))[:n_topics]
        n_answered = int(round(n_topics * answered_share))
        for t, topic_i in enumerate(chosen):
            service, problem = topics_all[topic_i]
            symptom, detail, fixes = PROBLEMS[problem]
            fill = {"service": service, "symptom": symptom, "detail": detail}
            tags = (service, problem)
            obs_ids = []
            for j in range(observations_per_topic):
                day = int(rng.integers(0, horizon))
                mid = f"{prefix}:t{t}:o{j}"
                obs_ids.append(mid)
                text = OBSERVATION_TEMPLATES[(j + t) % len(OBSERVATION_TEMPLATES)].format(d=day, **fill)
                memories.append(
                    Memory(
                        id=mid,
                        text=text,
                        scope=scope,
                        tier="observation",
                        tags=tags,
                        created_at=(START + timedelta(days=day)).isoformat(),
                        importance="low" if j % 2 else "medium",
                    )
                )
            judged = dict.fromkeys(obs_ids, 1)
            category = "observation_only"
            if t < n_answered:
                category = "high_order"
                tier = tiers[t % len(tiers)]
                mid = f"{prefix}:t{t}:{tier}"
                fix = fixes[sc % 2]
                memories.append(
                    Memory(
                        id=mid,
                        text=HIGH_ORDER_TEMPLATES[tier].format(fix=fix, **fill),
                        scope=scope,
                        tier=tier,
                        tags=tags,
                        created_at=(START + timedelta(days=horizon - 1 - t % 30)).isoformat(),
                        importance="high" if t % 3 else "critical",
                        strength=round(float(rng.uniform(0.8, 1.0)), 3),
                        confidence=round(float(rng.uniform(0.7, 0.99)), 3),
                    )
                )
                judged[mid] = 2
                wrong = fixes[(sc + 1) % 2]
                if t % 5 in (1, 2):  # decoys: a deleted and a low-confidence memory with the wrong fix
                    decoy = f"{prefix}:t{t}:decoy"
                    memories.append(
                        Memory(
                            id=decoy,
                            text=DECOY.format(fix=wrong, **fill),
                            scope=scope,
                            tier=tier,
                            tags=tags,
                            created_at=(START + timedelta(days=horizon - 40)).isoformat(),
                            importance="medium",
                            deleted=t % 5 == 1,
                            confidence=0.2 if t % 5 == 2 else 0.9,
                            strength=1.0,
                        )
                    )
                    judged[decoy] = 0
            qid = f"{prefix}:q{t}"
            queries.append(
                Query(
                    id=qid,
                    text=f"What is the fix for {symptom} on {service}?",
                    scope=scope,
                    labels=MappingProxyType({"category": category}),
                    now=(START + timedelta(days=horizon)).isoformat(),
                )
            )
            qrels[qid] = judged
    suite = Gathered(memories, queries, qrels).suite(
        name,
        k=k,
        description=f"tiered_synth(observations={observations}, scopes={scopes}, seed={seed})",
        label_names=("category",),
    )
    check_suite(suite)
    return suite


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--observations", type=int, default=1000, help="observations per scope")
    parser.add_argument("--scopes", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    suite = tiered_synth(args.observations, args.scopes, args.seed)
    path = save_suite(suite, args.out)
    print(f"wrote {path}: {len(suite.memories)} memories, {len(suite.queries)} queries")


if __name__ == "__main__":
    main()
