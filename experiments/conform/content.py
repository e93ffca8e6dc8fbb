"""Content: texts and ids round-trip exactly; empty and very long queries are answered or refused clearly.

A clear refusal is the adapter's error naming what the service said (an HTTP 4xx, an MCP tool error);
a crash is a 5xx, a timeout, or a Python adapter raising something else than LiveSystemError.
"""

from __future__ import annotations

import re

from experiments.conform.check import Check, Outcome, failed, not_applicable, passed
from experiments.conform.probe import Exchange, Probe

CRASH = re.compile(r"HTTP 5\d\d|no answer within|timed? ?out", re.IGNORECASE)
NO_TEXT = "the service returns no text with its hits: a round trip cannot be seen"


def crashed(exchange: Exchange) -> bool:
    """An error that is not a clear refusal (module docstring)."""
    return exchange.error is not None and (exchange.crash or bool(CRASH.search(exchange.error)))


class _RoundTrip(Check):
    """Shared by the text checks: store `texts()` (each after its own word), find each, compare."""

    def texts(self, probe: Probe) -> dict[str, str]:
        raise NotImplementedError

    def run(self, probe: Probe) -> Outcome:
        scope = probe.scope({"user": "texts"})
        texts = self.texts(probe)
        memories = [probe.memory(scope, name, f"{probe.token(name)} {text}") for name, text in texts.items()]
        probe.store(scope, [*probe.fillers(scope, 3), *memories])
        changed, without_text = [], 0
        for memory, name in zip(memories, texts, strict=True):
            found = probe.search(scope, probe.token(name), 10, step=f"find.{name}")
            hit = next((h for h in found.hits if h.id == memory.id), None)
            if hit is None:
                return failed(f"{memory.id!r} did not come back for its own word ({found.step})")
            if hit.text is None:
                without_text += 1
            elif hit.text != memory.text:
                changed.append(f"{name} ({found.step}): sent {_show(memory.text)}, got {_show(hit.text)}")
        if without_text == len(memories):
            return not_applicable(NO_TEXT)
        if changed:
            return failed("texts came back changed: " + "; ".join(changed), changed=changed)
        return passed(f"{len(memories)} texts came back byte for byte")


def _show(text: str) -> str:
    return repr(text) if len(text) <= 80 else f"{len(text.encode())} bytes starting {text[:40]!r}"


class ContentUnicodeText(_RoundTrip):
    """Unicode texts come back byte for byte: accents (NFC and NFD), CJK, right-to-left, emoji, a
    zero-width joiner."""

    def texts(self, probe: Probe) -> dict[str, str]:
        return {
            "accents": "naïve café, cafe\u0301 (decomposed)",
            "cjk": "東京で会議、今日は晴れ",
            "rtl": "שלום עולם مرحبا",
            "emoji": "memory 🧠 and family 👩\u200d👩\u200d👧",
        }


class ContentNewlinesAndQuotes(_RoundTrip):
    """Texts with newlines (LF, CRLF), tabs, quotes, backslashes, JSON and template braces come back
    byte for byte (never unescaped, trimmed or filled in)."""

    def texts(self, probe: Probe) -> dict[str, str]:
        return {
            "lines": "first line\nsecond line\r\nthird\tcolumn\n",
            "quotes": 'she said "no" and it\'s `ok`',
            "escapes": "a backslash \\ and \\n kept as typed",
            "braces": '{"id": 1} {text} ${env:HOME} %s %(x)s',
        }


class ContentLongText(_RoundTrip):
    """A 10 kB text comes back whole (not cut at a token limit, an index field size or a display length)."""

    def texts(self, probe: Probe) -> dict[str, str]:
        words = [probe.token(f"w{i}") for i in range(40)]
        rng = probe.rng
        body = " ".join(rng.choice(words) for _ in range(1400))
        return {"long": body[:10_000]}


class ContentIds(Check):
    """Ids come back exactly as sent: spaces, unicode, 200 characters, `/ ? # %` in them."""

    def run(self, probe: Probe) -> Outcome:
        scope = probe.scope({"user": "ids"})
        labels = {
            "spaces": "an id with spaces",
            "unicode": "idé-東京-🧠",
            "long": "x" * 200,
            "url": "a/b?c=1#d%2Fe",
        }
        memories = [
            probe.memory(scope, raw, f"{probe.token(name)} memory with a {name} id")
            for name, raw in labels.items()
        ]
        probe.store(scope, probe.fillers(scope, 3))
        wrong = []
        for memory, name in zip(memories, labels, strict=True):  # one ingest each: a refusal names its id
            stored = probe.ingest(scope, [memory], step=f"ingest.{name}", must=False)
            if stored.error is not None:
                wrong.append(
                    f"{name}: {memory.id!r} refused at ingest ({stored.step}): {stored.error[-160:]}"
                )
                continue
            probe.wait(scope, [memory], step=f"wait.{name}")
            # back once its text is: an id the service changed still ends the wait, and is judged below
            probe.settle(
                scope,
                memory,
                probe.token(name),
                step=f"find.{name}",
                back=lambda e, m=memory: any(h.text == m.text for h in e.hits),
            )
            found = probe.exchanges[-1]
            if memory.id not in found.ids:
                wrong.append(f"{name}: sent {memory.id!r}, got {found.ids} ({found.step})")
        if wrong:
            return failed("ids did not come back as sent: " + "; ".join(wrong), wrong=wrong)
        return passed(f"{len(memories)} ids came back as sent")


class _OddQuery(Check):
    """Shared by the query checks: ask `query()` in a scope holding memories; an answer or a refusal."""

    def query(self, probe: Probe) -> str:
        raise NotImplementedError

    def run(self, probe: Probe) -> Outcome:
        scope = probe.scope({"user": "queries"})
        memories = [
            probe.memory(scope, f"m{j}", f"{probe.token(f'm{j}')} ordinary note {j}") for j in range(3)
        ]
        probe.store(scope, memories)
        asked = probe.search(scope, self.query(probe), 10, step="ask", must=False)
        if crashed(asked):
            return failed(
                f"the service crashed instead of answering or refusing ({asked.step}): {asked.error}"
            )
        if asked.error is not None:
            return passed(f"refused clearly: {asked.error[:200]}")
        return passed(f"answered with {len(asked.ids)} hits")


class ContentEmptyQuery(_OddQuery):
    """An empty query is answered (any hits of its scope) or refused clearly, never a crash (5xx)."""

    def query(self, probe: Probe) -> str:
        return ""


class ContentVeryLongQuery(_OddQuery):
    """A 20 kB query is answered or refused clearly, never a crash (5xx) or a timeout."""

    def query(self, probe: Probe) -> str:
        rng = probe.rng
        return " ".join(probe.token(f"q{rng.randrange(500)}") for _ in range(2500))[:20_000]
