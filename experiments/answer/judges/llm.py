"""`llm`: a judge model asked about each answer through a prompt set (longmemeval, mem0, beam, strict).

The judge builds its chat calls from the prompt set, sends each through the `chat` the runtime gives it (the
endpoint and its cassette: a judge never opens a connection), and reads each reply as the prompt set says
(upstream's own parse under `protocol=official`). A reply that cannot be read makes the whole item `unparsed`
(score None, the raw replies kept): never silently right or wrong. `extra["plain_label"]` is 1 when every
reply was nothing but the label, so a run can say how many replies upstream's lenient parse had to interpret.

`answer.judges=[longmemeval]` is the same judge as `llm` with `prompt_set=longmemeval` (one name per set).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from types import MappingProxyType

from experiments.answer.judges.prompt_sets import find_prompt_set
from experiments.answer.types import AnswerItem, Chat, Verdict

PROTOCOLS = ("official", "memeval")


class LLMJudge:
    """An LLM judge with a named prompt set; `concurrency` items are judged at once (calls stay in order)."""

    name = "llm"
    fixed_prompt_set: str | None = None

    def __init__(self, *, protocol: str = "official", prompt_set: str | None = None, concurrency: int = 1):
        if protocol not in PROTOCOLS:
            raise ValueError(
                f"answer.judges: protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}"
            )
        if self.fixed_prompt_set is not None:
            if prompt_set not in (None, self.fixed_prompt_set):
                raise ValueError(
                    f"answer.judges: judge {self.name!r} uses prompt set {self.fixed_prompt_set!r}, got "
                    f"{prompt_set!r}"
                )
            prompt_set = self.fixed_prompt_set
        if prompt_set is None:
            raise ValueError(
                "answer.judges: the llm judge needs a prompt_set (longmemeval, mem0, beam, strict)"
            )
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"answer.judges: concurrency must be an integer >= 1, got {concurrency!r}")
        self.protocol = protocol
        self.prompts = find_prompt_set(prompt_set)
        self.concurrency = concurrency

    def columns(self) -> tuple[str, ...]:
        return (f"answer.llm_{self.prompts.name}.{self.prompts.column}",)

    def notes(self) -> tuple[str, ...]:
        return self.prompts.notes(self.protocol)

    def judge(self, items: Sequence[AnswerItem], chat: Chat | None) -> list[Verdict]:
        if chat is None:
            raise ValueError(f"judge {self.name!r} needs a chat endpoint (answer.judge_endpoint)")
        calls = [self.prompts.calls(item, self.protocol) for item in items]  # bad input fails before any call
        if self.concurrency == 1:
            return [self._one(item, c, chat) for item, c in zip(items, calls, strict=True)]
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(
                pool.map(lambda pair: self._one(pair[0], pair[1], chat), zip(items, calls, strict=True))
            )

    def _one(self, item: AnswerItem, calls, chat: Chat) -> Verdict:
        replies = tuple(chat(messages, params) for messages, params in calls)
        parsed = [self.prompts.parse(reply, item, self.protocol) for reply in replies]
        if any(p.score is None for p in parsed):
            return Verdict(score=None, unparsed=True, raw=replies)
        score = self.prompts.combine([p.score for p in parsed], item, self.protocol)
        plain = MappingProxyType({"plain_label": float(all(p.plain for p in parsed))})
        return Verdict(score=float(score), raw=replies, extra=plain)


def _fixed(class_name: str, prompt_set: str) -> type[LLMJudge]:
    """The judge named after one prompt set: the llm judge with that set, which no option can change."""
    return type(class_name, (LLMJudge,), {"name": prompt_set, "fixed_prompt_set": prompt_set})


LongMemEvalJudge = _fixed("LongMemEvalJudge", "longmemeval")
Mem0Judge = _fixed("Mem0Judge", "mem0")
BeamJudge = _fixed("BeamJudge", "beam")
StrictJudge = _fixed("StrictJudge", "strict")
