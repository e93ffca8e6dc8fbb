"""The one tokenizer every lexical channel shares, so rank-bm25 and bm25s index identical terms."""

from __future__ import annotations

import re

_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")

# A short English stop list: function words only. Content words, numbers and short technical
# tokens ("js", "io") are kept because memories are often terse.
STOPWORDS = frozenset(
    """a an and are as at be been but by can could did do does for from had has have he her his how i if in
    into is it its me my of on or our she so than that the their them then there these they this to was we
    were what when where which who will with would you your""".split()
)


def tokenize(text: str, *, stopwords: frozenset[str] = STOPWORDS) -> list[str]:
    return [t for t in _TOKEN.findall(text.lower()) if t not in stopwords]
