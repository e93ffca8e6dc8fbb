"""A generated suite whose conversations carry a true concept graph and explicit corrections.

Per conversation (one scope): `services` services, each depending on its own datastore (the true
graph: concepts for both, `depends_on` from service to datastore), stated in messages:
- a dependency message naming the service and its datastore ("we settled on <store> as the backing
  store of the <service> service");
- a hosting message naming only the datastore (region and node type): all alike but for the names;
- an ownership message and a log-retention message per service; for every third service a later
  correction of the retention figure that does not name the service ("Correction on that retention
  figure: ..."), recorded as a feedback record (topic, prediction, correction) on that message;
- filler chatter;
- with `review_sentences` > 0, for every third service (the third group) a long incident-review
  message: that many sentences of chatter, then one fact about the service at the very end, past the
  256 tokens a MiniLM encoder reads (the suite `graph_synth_long` tests passages with it).
Names are made-up words (no model has a prior about them), so only the links lead from a service
to its datastore's hosting message.

Questions (label `ability`):
- `multi_hop`: "Which region hosts the backing store of the <service> service?" - evidence: the
  dependency message and the datastore's hosting message (reachable only through the graph);
- `correction`: "How many days are <service> logs kept now?" - evidence: the correction message;
- `control`: ownership and direct hosting questions, answerable from one message naming its subject;
- `long_memory` (only with reviews): "On which weekday does the <service> service on-call rotation
  hand over?" - evidence: the review message, whose last sentence alone answers it.

    python -m experiments.suites.generators.graph_synth OUT [--conversations 6] [--services 30] [--seed 0]
        [--review-sentences 0]
    python -m experiments.run suite=graph_synth variant=graph tracking=none
"""

from __future__ import annotations

import argparse
from datetime import date, timedelta
from pathlib import Path
from types import MappingProxyType

import numpy as np
import yaml

from experiments.suites.jsonl import save_suite
from experiments.suites.suite import Gathered, Suite, check_suite
from retrieval.types import Concept, Feedback, Knowledge, Memory, Query, Relation

# The template data (name syllables, values, filler and review chatter) lives beside this module.
_DATA = yaml.safe_load(Path(__file__).with_name("graph_synth.yaml").read_text("utf-8"))
SYLLABLES, REGIONS, NODES, TEAMS, WEEKDAYS = (
    _DATA[k] for k in ("syllables", "regions", "nodes", "teams", "weekdays")
)
FILLER = tuple(_DATA["filler"])
REVIEW = tuple(_DATA["review"])  # long messages whose one fact comes last, past a 256-token encoder's reach
MEMORY_KINDS = ("dependency", "hosting", "ownership", "retention", "correction", "review", "filler")


def _names(rng: np.random.Generator, n: int, taken: set[str]) -> list[str]:
    out = []
    while len(out) < n:
        name = "".join(rng.choice(SYLLABLES, size=3))
        if name not in taken:
            taken.add(name)
            out.append(name)
    return out


def graph_synth(
    conversations: int = 6,
    services: int = 30,
    filler: int = 40,
    seed: int = 0,
    name: str = "graph_synth",
    k: int = 10,
    review_sentences: int = 0,
) -> Suite:
    rng = np.random.default_rng(seed)
    memories: list[Memory] = []
    queries: list[Query] = []
    qrels: dict[str, dict[str, int]] = {}
    concepts: list[Concept] = []
    relations: list[Relation] = []
    feedback: list[Feedback] = []
    for c in range(conversations):
        conv = f"g{c}"
        scope = MappingProxyType({"conversation": conv})
        taken: set[str] = set()
        service_names, store_names = _names(rng, services, taken), _names(rng, services, taken)
        # (kind, subject index, text, session) in conversation order; corrections come last (session 5)
        lines: list[tuple[str, int, str, int]] = []
        facts = []
        for s, (svc, store) in enumerate(zip(service_names, store_names, strict=True)):
            region, node = rng.choice(REGIONS), rng.choice(NODES)
            team, days = rng.choice(TEAMS), int(rng.integers(7, 60))
            new_days = days + int(rng.integers(10, 60))
            facts.append((region, team, days, new_days))
            lines += [
                (
                    "dependency",
                    s,
                    f"For the {svc} service we settled on {store} as its backing store after the review.",
                    1,
                ),
                ("hosting", s, f"{store.capitalize()} runs in the {region} region on {node} nodes.", 2),
                ("ownership", s, f"The {svc} service is owned by the {team} team.", 3),
                ("retention", s, f"Logs of the {svc} service are kept for {days} days.", 3),
            ]
        order = rng.permutation(len(lines))
        lines = [lines[i] for i in order]
        lines = sorted(lines, key=lambda line: line[3])  # stable: sessions in order, shuffled within
        for i in range(filler):
            lines.insert(int(rng.integers(0, len(lines) + 1)), ("filler", i, FILLER[i % len(FILLER)], 0))
        # one long incident review per service of the third group, in session 4 (none without sentences)
        reviewed = list(range(2, services, 3)) if review_sentences else []
        for s in reviewed:
            chatter = rng.choice(REVIEW, size=review_sentences, replace=review_sentences > len(REVIEW))
            last = (
                f"Last point from the review: the {service_names[s]} service on-call rotation now hands"
                f" over on {rng.choice(WEEKDAYS)} afternoons."
            )
            lines.append(("review", s, " ".join([*chatter, last]), 4))
        corrected = list(range(0, services, 3))
        lines += [
            (
                "correction",
                s,
                f"Correction on that retention figure: make it {facts[s][3]} days, the old one was wrong.",
                5,
            )
            for s in corrected
        ]
        ids: dict[tuple[str, int], str] = {}
        start = date(2025, 1, 6)
        session = 1
        for position, (kind, s, text, sess) in enumerate(lines):
            session = max(session, sess)
            mid = f"{conv}:m{position}"
            ids[kind, s] = mid
            memories.append(
                Memory(
                    id=mid,
                    text=text,
                    scope=scope,
                    created_at=(start + timedelta(days=session * 7)).isoformat(),
                    role="user" if position % 2 == 0 else "assistant",
                    metadata=MappingProxyType({"batch": session, "position": position, "kind": kind}),
                )
            )
        for s, (svc, store) in enumerate(zip(service_names, store_names, strict=True)):
            links = [ids["dependency", s], ids["ownership", s], ids["retention", s]]
            links += [ids["correction", s]] if s in corrected else []
            concepts.append(
                Concept(f"{conv}:svc{s}", svc, scope, f"the {svc} service", ("service",), tuple(links))
            )
            concepts.append(
                Concept(
                    f"{conv}:db{s}",
                    store,
                    scope,
                    f"{store}, a datastore",
                    ("datastore",),
                    (ids["dependency", s], ids["hosting", s]),
                )
            )
            relations.append(Relation(f"{conv}:svc{s}", f"{conv}:db{s}", "depends_on"))
        for s in corrected:
            svc, (_, _, days, new_days) = service_names[s], facts[s]
            feedback.append(
                Feedback(
                    id=f"{conv}:fb{s}",
                    topic=f"{svc} service log retention days",
                    prediction=f"{svc} logs are kept for {days} days",
                    correction=f"{svc} logs are kept for {new_days} days",
                    scope=scope,
                    importance=0.9,
                    created_by="user",
                    memory_ids=(ids["correction", s],),
                )
            )

        def ask(qid: str, text: str, ability: str, evidence: list[str], scope=scope) -> None:
            queries.append(
                Query(id=qid, text=text, scope=scope, labels=MappingProxyType({"ability": ability}))
            )
            qrels[qid] = dict.fromkeys(evidence, 1)

        for s in range(0, services, 3):
            svc, store = service_names[s], store_names[s]
            ask(
                f"{conv}:hop{s}",
                f"Which region hosts the backing store of the {svc} service?",
                "multi_hop",
                [ids["dependency", s], ids["hosting", s]],
            )
            ask(
                f"{conv}:fix{s}",
                f"How many days are {svc} service logs kept now?",
                "correction",
                [ids["correction", s]],
            )
        for s in range(1, services, 3):
            svc, store = service_names[s], store_names[s]
            ask(f"{conv}:own{s}", f"Which team owns the {svc} service?", "control", [ids["ownership", s]])
            ask(f"{conv}:reg{s}", f"In which region does {store} run?", "control", [ids["hosting", s]])
        for s in reviewed:
            svc = service_names[s]
            ask(
                f"{conv}:rev{s}",
                f"On which weekday does the {svc} service on-call rotation hand over?",
                "long_memory",
                [ids["review", s]],
            )
    suite = Gathered(memories, queries, qrels).suite(
        name,
        k=k,
        description=f"graph_synth: {conversations} conversations x {services} services, seed {seed}",
        label_names=("ability",),
        knowledge=Knowledge(tuple(concepts), tuple(relations), tuple(feedback)),
    )
    check_suite(suite)
    return suite


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--conversations", type=int, default=6)
    parser.add_argument("--services", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--review-sentences", type=int, default=0)
    args = parser.parse_args(argv)
    suite = graph_synth(
        args.conversations, args.services, seed=args.seed, review_sentences=args.review_sentences
    )
    print(save_suite(suite, args.out), suite.summary())


if __name__ == "__main__":
    main()
