"""BEAM-shaped suites at BEAM's own sizes: beam_synth's conversations, as long as BEAM's messages, at
the 100K, 1M and 10M tiers, streamed to disk.

beam_synth (beside this module) writes BEAM-format conversations with planted evidence for the ten
abilities, but with short messages. This module writes the same conversations (same cast, layout,
plants, questions and gold evidence, the same seed rule) with every message lengthened by more of
its topic's filler to BEAM 100K's mean length, and with as many messages per conversation as the tier
holds tokens:

| tier | messages per conversation | like |
|---|---|---|
| `100K` | 240 | BEAM 100K ("128K": 188-344 messages, mean 243) |
| `1M` | 2,400 | BEAM 1M |
| `10M` | 24,000 | BEAM 10M: ~7.6M words, ~10M tokens a conversation |

Message length: BEAM 100K's user messages average 69 words and its assistant messages 569 (319 words
a message over both), measured by `measure_lengths("../shared/beam/100K")`. Here each message's
length is drawn uniformly between half and one and a half times its role's mean, so the means match.
At the 10M tier the batches of a conversation are grouped into 10 `{"plan-<p>": [batch, ...]}`
entries, the layout of BEAM's own 10M chat.json; the loader (experiments/suites/beam.py) reads both
layouts. Message ids stay unique across a conversation's plans.

Streamed: one batch (about 80 messages) is in memory at a time; what a conversation keeps besides is
its layout (one small integer per turn) and its planted evidence (a few dozen messages). Deterministic:
the same arguments write byte-identical files.

CLI: .venv/bin/python -m experiments.suites.generators.beam_scale OUT --tier 10M --conversations 10
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from experiments.suites.beam import is_plan_group
from experiments.suites.generators import beam_synth

TIERS = {"100K": 240, "1M": 2_400, "10M": 24_000}  # messages per conversation
PLANS = {"10M": 10}  # tiers whose chat.json groups batches into plans, as BEAM's does
MEAN_WORDS = {"user": 69, "assistant": 569}  # BEAM 100K, by measure_lengths (see the docstring)


def pad(rng: random.Random, role: str, text: str, topic: str, values: dict[str, Any]) -> str:
    """`text` followed by more filler of its topic, up to a length drawn around its role's BEAM mean
    (a piece is added while it brings the length closer to the target, so the means match). A user
    message adds its topic's context, detail and ask sentences, none twice; a reply adds whole filler
    replies. Filler never holds an abstention's absent terms (beam_synth's rule)."""
    mean = MEAN_WORDS[role]
    target = rng.randint(mean // 2, mean + mean // 2)
    words, parts = len(text.split()), [text]
    if role == "user":
        pool = [*beam_synth._CONTEXT[topic], *beam_synth._DETAILS[topic], *beam_synth._ASKS[topic]]
        pieces = (s.format_map(values) for s in rng.sample(pool, len(pool)))
    else:
        pieces = ("\n\n" + beam_synth._filler_reply(rng, topic, values) for _ in itertools.count())
    for piece in pieces:
        size = len(piece.split())
        if words + size / 2 >= target:
            break
        parts.append(piece)
        words += size
    return " ".join(parts) if role == "user" else "".join(parts)


def generate(
    out_dir: str | Path,
    tier: str = "10M",
    conversations: int = 10,
    *,
    seed: int = 0,
    questions_per_ability: int = 2,
    messages: int | None = None,
) -> list[Path]:
    """Write `out_dir/1 .. out_dir/<conversations>` in BEAM's layout at `tier`'s size (or `messages`
    per conversation when given, e.g. a small suite for a test); return the conversation folders."""
    if tier not in TIERS:
        raise ValueError(f"unknown tier {tier!r} (known: {', '.join(TIERS)})")
    n_messages = TIERS[tier] if messages is None else messages
    if conversations < 1 or n_messages < 2:
        raise ValueError("need at least one conversation of at least two messages")
    if not 1 <= questions_per_ability <= beam_synth.MAX_QUESTIONS_PER_ABILITY:
        raise ValueError(
            f"questions_per_ability must be between 1 and {beam_synth.MAX_QUESTIONS_PER_ABILITY}"
        )
    folders = []
    for number in range(1, conversations + 1):
        folder = Path(out_dir) / str(number)
        beam_synth._write_conversation(
            folder, number, seed, n_messages, questions_per_ability, pad=pad, plans=PLANS.get(tier, 0)
        )
        folders.append(folder)
    return folders


def _chat_messages(chat: list) -> Iterator[dict]:
    for entry in chat:
        for batch in itertools.chain(*entry.values()) if is_plan_group(entry) else [entry]:
            for turn in batch["turns"]:
                yield from turn


def measure_lengths(tier_dir: str | Path) -> dict[str, float]:
    """Mean words per message, by role and over all, of a BEAM tier folder (one chat.json at a time)."""
    words: dict[str, list[int]] = {"user": [], "assistant": []}
    for chat in sorted(Path(tier_dir).glob("*/chat.json")):
        for message in _chat_messages(json.loads(chat.read_text("utf-8"))):
            words.setdefault(message["role"], []).append(len(message["content"].split()))
    every = [n for counts in words.values() for n in counts]
    return {**{role: statistics.fmean(n) for role, n in words.items() if n}, "all": statistics.fmean(every)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.suites.generators.beam_scale",
        description="Write a BEAM-shaped suite (BEAM's folder layout, message lengths and tier sizes) "
        "with planted evidence for the ten abilities, streamed to disk.",
    )
    parser.add_argument("out", type=Path, help="output folder (conversations go to OUT/1, OUT/2, ...)")
    parser.add_argument(
        "--tier",
        choices=tuple(TIERS),
        default="10M",
        help="messages per conversation: " + ", ".join(f"{t} {n:,}" for t, n in TIERS.items()),
    )
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument(
        "--messages", type=int, default=None, help="override the tier's messages per conversation"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--questions-per-ability", type=int, default=2)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        folders = generate(
            args.out,
            args.tier,
            args.conversations,
            seed=args.seed,
            questions_per_ability=args.questions_per_ability,
            messages=args.messages,
        )
    except (ValueError, OSError) as err:
        print(f"beam_scale: {err}", file=sys.stderr)
        return 2
    size = sum(f.stat().st_size for folder in folders for f in folder.rglob("*.json"))
    print(
        f"wrote {len(folders)} conversation(s) of {args.messages or TIERS[args.tier]:,} messages "
        f"({args.tier} tier, seed {args.seed}) to {args.out}: {size / 1e6:.1f} MB, "
        f"{time.perf_counter() - start:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
