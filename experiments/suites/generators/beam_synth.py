"""Synthetic BEAM: deterministic BEAM-format conversations of any size, with planted evidence.

What it models. BEAM (Tavakoli et al., 2025) probes an assistant's long-term memory with ten abilities
over long user/assistant chats. This module writes conversations in BEAM's own folder layout, with the
same keys, key order and evidence shapes as the real files, so the `beam` suite loader
(`experiments.suites.beam.load_beam`) reads them unchanged:

    OUT/<n>/chat.json                                  batches (sessions) of turns of messages
    OUT/<n>/probing_questions/probing_questions.json   {ability: [question, ...]} for the ten abilities
    OUT/<n>/topic.json                                 id, category, title, theme, subtopics

Each conversation belongs to one persona with a cast of entities (two software projects, a web
framework and a database, a bank and an index fund, two cities, a sport, a doctor, a book and its hero).
Filler turns come from templates over five topics (coding, finance, travel, health, writing) filled with
that same cast and with random numbers, so lexical and dense retrieval meet many near misses. Among
them sit planted user messages, the evidence of the probing questions:
- instruction_following / preference_following: a standing instruction or preference stated once, in
  the first 60% of the chat, probed by a task that shares almost no words with it (the EXP-05 case:
  "From now on, always include type hints ..." vs "Can you show me how to parse a CSV export?").
  Some instructions use the narrow marker words (always, never, from now on ...), some only the wider
  ones (do not, prefer, I'd like you to) and some none, so tagging coverage is worth measuring; filler
  also says "always"/"never" without instructing, so tagging precision is too.
- knowledge_update: a value stated, then changed in a later session; the question asks for the current one.
- contradiction_resolution: a "never" statement and a later or earlier message that contradicts it.
- temporal_reasoning: two dated events in different sessions; the question asks the time between them.
- event_ordering / summarization: a thread of 3-4 steps spread over the chat, asked in order / summarised
  (summarization evidence includes the assistant replies, as in BEAM).
- multi_session_reasoning: facts in different sessions that must be combined (a sum, a count, a list).
- information_extraction: one stated detail asked back.
- abstention: questions about things no message mentions (`ABSENT_TERMS` lists the words that prove it).
Questions paraphrase their evidence; they never copy its sentences.

Layout follows the real data: every turn's first user message is a `main_question` with index "b,k"
and ends with the probe marker ` ->-> b,k`; follow-ups carry `followup_question`/`answer_ai_question`;
the first user message of each batch carries the session's `time_anchor` ("March-15-2024"); sessions
are a few days apart, and dated evidence refers to its session's date. Message ids are 0-based and
unique per conversation; a batch holds about 80 messages (as in BEAM 500K).

Limits, said plainly: at most `MAX_QUESTIONS_PER_ABILITY` (4) questions per ability and conversation
(each kind of planted fact is used once); a conversation must have enough turns for the evidence
(a few dozen; 200 messages hold 4 per ability). Messages are shorter than BEAM's (about 180 characters
for users and 820 for the assistant, against roughly 700-1,150 and 4,000), which keeps 100,000
messages at ~60 MB.

Deterministic: every draw comes from a `random.Random` seeded from (seed, conversation number), and
the files are written in a fixed key order, so the same arguments give byte-identical files. Batches
are written one at a time, so 100,000 messages need little memory.

CLI: python -m experiments.suites.generators.beam_synth OUT --conversations 3 --messages 1000 --seed 0
"""

from __future__ import annotations

import argparse
import bisect
import datetime as dt
import itertools
import json
import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.suites.beam import ABILITIES

TOPICS = ("coding", "finance", "travel", "health", "writing")
MESSAGES_PER_BATCH = 80

# ---------------------------------------------------------------------------------------------- cast
_NAMES = (
    "Craig",
    "Maya",
    "Tomas",
    "Priya",
    "Jonah",
    "Leila",
    "Owen",
    "Sofia",
    "Devin",
    "Hana",
    "Rafael",
    "Greta",
)
_PROJECTS = (
    "Ledgerly",
    "TrailMap",
    "Pantrybox",
    "Quillstack",
    "Harborview",
    "Beaconly",
    "Tallyho",
    "Orbitdesk",
    "Fernway",
    "Brightnote",
    "Cinderpath",
    "Lumenboard",
)
_WEB = ("Flask", "FastAPI", "Django")
_DATABASES = ("PostgreSQL", "SQLite", "MySQL")
_MODULES = ("auth", "billing", "reporting", "search", "notifications", "export", "scheduler", "dashboard")
_BANKS = ("Northwind Credit Union", "Harbor Savings", "Summit Bank", "Clearwater Federal", "Redstone Bank")
_FUNDS = ("VTI", "VXUS", "VOO", "SCHD", "ITOT")  # index funds: filler may own them without contradicting
_STOCKS = ("MSFT", "AAPL", "NVDA", "KO", "JNJ")  # single companies: only the planted contradiction owns one
_PLACES = (
    ("Lisbon", "Portugal"),
    ("Kyoto", "Japan"),
    ("Barcelona", "Spain"),
    ("Hanoi", "Vietnam"),
    ("Edinburgh", "Scotland"),
    ("Mexico City", "Mexico"),
    ("Cape Town", "South Africa"),
    ("Prague", "Czechia"),
    ("Buenos Aires", "Argentina"),
    ("Seoul", "South Korea"),
)
_SPORTS = ("running", "swimming", "cycling", "rowing")
_DOCTORS = ("Dr. Patel", "Dr. Okafor", "Dr. Lindqvist", "Dr. Moreau", "Dr. Alvarez")
_TITLES = (
    "The Salt Road",
    "Glass Orchard",
    "Winter Ledger",
    "The Quiet Meridian",
    "Paper Lanterns",
    "Low Tide Hymns",
)
_CHARACTERS = ("Elena Voss", "Marcus Hale", "Ines Carvalho", "Theo Brandt", "Nadia Rahimi", "Felix Amari")
_PROFESSIONS = ("cartographer", "lighthouse keeper", "forensic accountant", "beekeeper", "ferry pilot")
_COLLEAGUES = ("Jordan", "Aisha", "Mateo", "Wen", "Kofi", "Lena")
_GUESTHOUSES = ("Casa Azul", "the Juniper House", "Pension Lotus", "the Old Mill Inn", "Villa Serena")
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


def _cast(rng: random.Random) -> dict[str, str]:
    (city, country), (city2, country2) = rng.sample(_PLACES, 2)
    project, project2 = rng.sample(_PROJECTS, 2)
    module, module2 = rng.sample(_MODULES, 2)
    return {
        "name": rng.choice(_NAMES),
        "project": project,
        "project2": project2,
        "lib": rng.choice(_WEB),
        "db": rng.choice(_DATABASES),
        "module": module,
        "module2": module2,
        "bank": rng.choice(_BANKS),
        "ticker": rng.choice(_FUNDS),
        "stock": rng.choice(_STOCKS),
        "city": city,
        "country": country,
        "city2": city2,
        "country2": country2,
        "sport": rng.choice(_SPORTS),
        "doctor": rng.choice(_DOCTORS),
        "title": rng.choice(_TITLES),
        "character": rng.choice(_CHARACTERS),
        "profession": rng.choice(_PROFESSIONS),
        "colleague": rng.choice(_COLLEAGUES),
        "guesthouse": rng.choice(_GUESTHOUSES),
        "pyver": rng.choice(("3.10", "3.11", "3.12")),
    }


def _numbers(rng: random.Random) -> dict[str, Any]:
    """Fresh numbers for one filler turn (so no two filler messages are the same)."""
    r = rng.randint
    return {
        "n": r(3, 60),
        "port": rng.choice((3000, 5000, 8000, 8080, 8443)),
        "ms": r(80, 900),
        "rows": r(10, 900) * 1000,
        "income": r(56, 180) * 50,
        "rate": f"{r(15, 52) / 10:.1f}",
        "pct": r(2, 35),
        "debt": r(20, 180) * 100,
        "sub": r(25, 140),
        "fee": r(5, 60),
        "goal": r(10, 80) * 100,
        "bonus": r(10, 90) * 100,
        "days": r(3, 12),
        "month": rng.choice(_MONTHS),
        "mins": r(10, 45),
        "hours": r(5, 8),
        "km": r(8, 30),
        "bpm": r(48, 75),
        "ch": r(2, 30),
        "words": r(30, 110) * 1000,
        "amount": r(20, 150) * 100,
        "step": r(1, 3),
        "premium": r(80, 260) * 5,
    }


# ---------------------------------------------------------------------------------------------- filler
_ASKS = {
    "coding": (
        "I'm refactoring the {module} module in {project} and the {lib} app returns a 500 when {n} requests "
        "hit it at once. Can you help me work out what's wrong?",
        "How should I structure the tests for the {module} code in {project}? Right now there are {n} test "
        "cases and the suite always takes forever on CI.",
        "I'm loading a CSV export of transactions into {project} with pandas, but the dates come through as "
        "strings. What's the cleanest way to fix that?",
        "Can you review this {lib} route for {project}? I'm worried about how it handles errors from {db}.",
        "What's the best way to add pagination to the {module} endpoint in {project}? The table has around "
        "{rows:,} rows.",
        "I keep getting 'connection refused' from {db} when I run {project} locally on port {port}. What "
        "should I check first?",
        "Should I move the {module} logic in {project} into a background worker, or is that overkill for "
        "{n} users?",
        "A query in {project} that joins users and orders takes {ms} ms. How can I speed it up?",
        "How do I write a migration for {project2} that renames a column in {db} without downtime?",
        "My teammate {colleague} suggested we cache the {module} endpoint in {project}. What are the "
        "trade-offs?",
        "How do I read settings from environment variables in {project} instead of hard-coding them?",
        "What's a sensible logging setup for {project} so I can trace slow {module} requests?",
    ),
    "finance": (
        "I'm trying to build a monthly budget on a take-home pay of ${income:,}. How much should go to "
        "rent, groceries and savings?",
        "Is it worth moving my emergency fund from {bank} to an account paying {rate}%?",
        "I bought some {ticker} a while ago and it's down {pct}%. Should I hold or rebalance?",
        "A colleague asked whether paying off a ${debt:,} car loan early beats investing the money. "
        "What would you tell them?",
        "What's a sensible way to track subscriptions? I think I pay about ${sub} a month across them.",
        "Can you explain how a Roth IRA differs from a traditional one for someone earning ${income:,} "
        "a month?",
        "My {bank} statement shows a ${fee} charge I don't recognise. How should I dispute it?",
        "I want ${goal:,} put aside for a trip to {city} next year. How much should I save each paycheck?",
        "How should I split a ${bonus:,} bonus between savings, travel and my brokerage account?",
        "Are index funds like {ticker} enough on their own, or should I add bonds at my age?",
        "How do I set up a sinking fund for irregular costs like car repairs and gifts?",
        "What should I look at when comparing credit cards, apart from the interest rate?",
    ),
    "travel": (
        "What's the best way to get from the airport to the old town in {city}?",
        "I'm planning {days} days in {city}. Can you sketch an itinerary that isn't too rushed?",
        "How much cash should I carry in {country}, or do most places take cards?",
        "Which neighbourhood in {city} is good for staying near public transport?",
        "What should I pack for {city} in {month}? I hear the weather is unpredictable.",
        "Is a day trip from {city} to the coast realistic by train?",
        "How far in advance should I book trains between {city} and {city2}?",
        "Any tips for dealing with jet lag when I fly to {city2}?",
        "What are some local dishes I should try in {city}?",
        "How do I avoid the worst crowds at the main sights in {city2}?",
        "Is it better to rent a car or rely on buses outside {city}?",
        "What are the tipping customs in {country2}?",
    ),
    "health": (
        "I've been {sport} {step} or {n} times a week and my knees ache afterwards. Should I change "
        "something?",
        "Can you suggest a stretching routine for after {sport}? I only have about {mins} minutes.",
        "How much protein do I actually need if I'm training for {sport}?",
        "I'm sleeping about {hours} hours a night. How much does that hurt my recovery?",
        "{doctor} told me to watch my blood pressure. What are simple habits that help?",
        "What's a good way to loosen up before a {sport} session in cold weather?",
        "How do I build up to a {km} km session without getting injured?",
        "Is it fine to do strength training on the same day as {sport}?",
        "What should I eat before an early-morning {sport} session?",
        "How can I tell if I'm overtraining? My resting heart rate went up to {bpm} this week.",
        "How do I stay consistent with {sport} when work gets busy?",
        "What's the best way to recover after a really hard {sport} week?",
    ),
    "writing": (
        "I'm stuck on chapter {ch} of '{title}'. How do I get {character} from the city to the coast without "
        "a boring travel scene?",
        "How do I make {character}'s dialogue sound less stiff?",
        "Can you help me tighten the pacing in the middle of '{title}'? It's about {words:,} words.",
        "What's a good daily writing routine when I only have {mins} minutes before work?",
        "How should I handle flashbacks in a novel told in first person?",
        "I want {character}, a {profession}, to have a believable backstory. Where do I start?",
        "How do I write a query letter for '{title}'?",
        "Should '{title}' be told in past or present tense?",
        "How many beta readers should I look for, and what should I ask them?",
        "What are common mistakes in opening chapters?",
        "How do I show that {character} is grieving without saying it outright?",
        "How do I keep a subplot from taking over the middle of '{title}'?",
    ),
}
_DETAILS = {
    "coding": (
        "I'm on Python {pyver} with {lib} and {db}.",
        "The {module} tests always pass locally but fail on CI.",
        "{colleague} thinks the problem is in the ORM layer.",
        "This is blocking the next release of {project}.",
        "I never had this problem before the last dependency upgrade.",
    ),
    "finance": (
        "I get paid twice a month.",
        "My savings are at {bank} right now.",
        "I'd like to keep this simple.",
        "I always end up overspending around the holidays.",
        "I'm trying to be more deliberate this year.",
    ),
    "travel": (
        "It's my first time in {country}.",
        "I'll be there in {month}.",
        "I'm travelling with one carry-on bag.",
        "I always end up over-planning trips.",
        "I'd like at least one slow day to wander.",
    ),
    "health": (
        "I'm {sport} mostly in the mornings.",
        "{doctor} said there's nothing structurally wrong.",
        "I never used to have this problem.",
        "I always feel stiff the day after.",
        "I'd like to keep training through the winter.",
    ),
    "writing": (
        "I write mostly on weekends.",
        "'{title}' is a literary mystery.",
        "My writing group is small but honest.",
        "I always lose momentum around the midpoint.",
        "{character} is the narrator.",
    ),
}
_CONTEXT = {  # scene-setting sentences users put before their question
    "coding": (
        "I've been working on {project} most evenings this week, mainly on the {module} side.",
        "{colleague} and I split the work on {project}: I own {module}, they own {module2}.",
        "The {lib} app for {project} talks to {db} and runs on a cheap VPS.",
        "We have about {n} active users on {project} now, so performance is starting to matter.",
        "I've read the {lib} docs twice and I'm still not sure what the idiomatic approach is.",
        "I'm trying to get {project2} into a state where someone else could maintain it.",
    ),
    "finance": (
        "I've been tracking every expense in a spreadsheet for the last {step} months.",
        "My partner and I keep separate accounts but share rent and groceries.",
        "Most of my savings sit at {bank}, plus a small position in the {ticker} fund.",
        "I got a raise this year and want to make sure it doesn't just disappear.",
        "Money stuff stresses me out, so I'm trying to set up something I don't have to think about.",
        "I'm saving for a trip to {city} and trying not to touch the emergency fund.",
    ),
    "travel": (
        "I'm going to {city} for {days} days and then, if time allows, on to {city2}.",
        "I've never planned a trip this long on my own before.",
        "I'd like to see the main sights in {city} but also have time to just wander.",
        "My budget is fairly tight, so I'm trying to be smart about where the money goes.",
        "I work remotely, so a couple of the days in {country} will be half work days.",
        "A friend who lived in {city2} gave me a long list of recommendations.",
    ),
    "health": (
        "I've been {sport} for about {step} years, mostly on my own without a coach.",
        "Work has been busy, so my training has been a bit inconsistent lately.",
        "I saw {doctor} a few weeks ago for a general check-up and got mostly good news.",
        "I'm trying to get fitter without burning out like I did last year.",
        "I track my sessions on my watch, so I have numbers if that helps.",
        "My goal is to feel strong and sleep better, not to win anything.",
    ),
    "writing": (
        "I've been working on '{title}' for about {step} years, on and off.",
        "The story follows {character}, a {profession}, over one difficult summer.",
        "My writing group gave me mixed feedback on the last few chapters.",
        "I write before work, so I usually have {mins} minutes at a time.",
        "The draft is around {words:,} words and I'm in the middle of revising it.",
        "I read a lot of crime fiction, which probably shows in the structure.",
    ),
}
_HEADINGS = (
    "### Why this happens",
    "### What I'd do",
    "### A few things to check",
    "### Next steps",
    "### The short version",
)
_REPLY_SENTENCES = {
    "coding": (
        "Start by reproducing the problem with a small failing test, so you know when it is fixed.",
        "In {project}, keep the {module} logic out of the route handlers; thin handlers are easier to test.",
        "With {db}, check the query plan before adding indexes, because the planner often surprises you.",
        "{lib} gives you hooks for error handling, so you can return a clean JSON error instead of a 500.",
        "Always back up the {db} database before running a migration against real data.",
        "Never store secrets in the repository; read them from the environment at start-up.",
        "Connection pooling usually fixes intermittent 'connection refused' errors under load.",
        "Add structured logging around the {module} calls so you can see which step is slow.",
        "If the suite takes long on CI, run the slow integration tests in a separate job.",
        "Pagination with a cursor on an indexed column stays fast even at hundreds of thousands of rows.",
        "A background worker makes sense once a request does more than a second of work.",
        "Pin your dependency versions so a surprise upgrade does not break {project} overnight.",
    ),
    "finance": (
        "A common starting point is the 50/30/20 split: needs, wants, and savings or debt.",
        "Keep three to six months of essential expenses in an easily reachable account.",
        "Moving the emergency fund away from {bank} only pays off if the rate difference is meaningful.",
        "A falling position in {ticker} is a reason to check your allocation, not necessarily to sell.",
        "Paying down debt is a guaranteed return equal to its interest rate.",
        "Automating a transfer on payday means saving happens before spending.",
        "Review subscriptions every quarter; small charges add up quickly.",
        "Never invest money you will need within the next couple of years in volatile assets.",
        "Broad index funds spread risk across hundreds of companies at a low cost.",
        "Check the fee schedule: a card with no annual fee can still charge heavily for foreign purchases.",
        "Always keep receipts for disputed charges until the bank closes the case.",
    ),
    "travel": (
        "Public transport in {city} is usually the quickest way into the centre.",
        "Leave one afternoon unplanned; it is often the part of a trip people remember.",
        "Cards are widely accepted in {country}, but small cafes may still prefer cash.",
        "Booking trains between {city} and {city2} a few weeks ahead usually gets better fares.",
        "Staying near a metro line saves a lot of time compared with a cheaper place further out.",
        "Pack layers: mornings can be cool even when afternoons are warm.",
        "Get outside in daylight on arrival; it is the simplest cure for jet lag.",
        "Popular sights are quietest right after opening or in the last hour before closing.",
        "Always keep a photo of your passport separate from the passport itself.",
        "Local markets are a good place to try regional dishes cheaply.",
        "Outside {city}, regional buses are cheap but infrequent, so check the timetable the night before.",
    ),
    "health": (
        "Increase weekly volume gradually, by roughly ten percent, to give tendons time to adapt.",
        "Knee pain after {sport} often comes from doing too much too soon rather than from technique.",
        "A short mobility routine for hips and ankles helps more than long static stretches.",
        "Most active adults do well with about 1.6 grams of protein per kilogram of body weight.",
        "Sleep is when most recovery happens; even thirty extra minutes a night makes a difference.",
        "Keep easy sessions truly easy so the hard sessions can be hard.",
        "A rising resting heart rate is one of the clearest early signs of accumulated fatigue.",
        "Strength work twice a week makes {sport} more resilient to injury.",
        "If pain changes how you move, stop and let {doctor} take a look.",
        "Never push through sharp pain; dull soreness is normal, sharp pain is a warning.",
        "A small carbohydrate snack an hour before training is usually enough in the morning.",
    ),
    "writing": (
        "A scene earns its place when something changes by the end of it.",
        "Let {character} want something concrete in every scene; dialogue loosens when it has a purpose.",
        "Cut travel to its emotional essence: one vivid detail and a change of mood is often enough.",
        "Read the dialogue aloud; stiffness is easier to hear than to see.",
        "The middle sags when the stakes stop rising, so add a complication rather than more description.",
        "Flashbacks work best when they answer a question the reader is already asking.",
        "A short, regular session beats a long, irregular one for keeping a draft alive.",
        "Beta readers are most useful when you ask them where they got bored or confused.",
        "Always finish the draft before polishing the opening; you will rewrite it anyway.",
        "Give {character}'s job as a {profession} a concrete bearing on the plot, not just colour.",
        "Tense matters less than consistency; pick one and keep it.",
    ),
}
_STEPS = {
    "coding": (
        "Write a failing test that shows the bug",
        "Add logging around the {module} calls",
        "Check the {db} query plan",
        "Move slow work to a background job",
        "Deploy behind a feature flag",
    ),
    "finance": (
        "List every fixed monthly cost",
        "Set an automatic transfer on payday",
        "Build the emergency fund first",
        "Invest the surplus in a broad index fund",
        "Review the plan every quarter",
    ),
    "travel": (
        "Book the long-distance transport first",
        "Pick a base near public transport",
        "Plan one highlight per day",
        "Keep a slow day free",
        "Download offline maps",
    ),
    "health": (
        "Warm up for ten minutes",
        "Keep most sessions easy",
        "Add two short strength sessions a week",
        "Track sleep and resting heart rate",
        "Build volume by about ten percent a week",
    ),
    "writing": (
        "Write one sentence saying what the scene changes",
        "Draft it fast without editing",
        "Read it aloud",
        "Cut the first and last paragraph",
        "Note one question for beta readers",
    ),
}
_FOLLOWUPS = {
    "coding": (
        "Would that still work if {project} moves to async handlers?",
        "How would I test that change?",
        "Sure, here's the traceback from the last run. Does it point to the same cause?",
    ),
    "finance": (
        "What if my income varies month to month?",
        "Does that change if I'm saving for a house?",
        "Sure: rent is the biggest item, then groceries and transport. Does the split still work?",
    ),
    "travel": (
        "Would that still work in the rainy season?",
        "How much should I budget per day for that?",
        "Yes, I'll be travelling by train mostly. Does that change your suggestion?",
    ),
    "health": (
        "How long until I should see a difference?",
        "Can I do that on rest days too?",
        "Sure: mostly easy sessions, one harder one on weekends. Does that look right?",
    ),
    "writing": (
        "Would that work in first person too?",
        "Can you show me a short example?",
        "Sure, the scene is about 1,500 words and ends on a cliffhanger. Too long?",
    ),
}
_USER_OPENERS = (
    "",
    "",
    "",
    "Quick question. ",
    "Back again. ",
    "Following up on earlier: ",
    "Hi, it's {name}. ",
    "Another one for you. ",
    "Okay. ",
)
_REPLY_OPENERS = (
    "Good question.",
    "Sure, let's work through it.",
    "Here's how I'd approach it.",
    "Happy to help.",
    "That's a common situation.",
    "Let's break it down.",
    "Great, {name}, this is very fixable.",
)
_REPLY_CLOSERS = (
    "Let me know if you want me to go deeper on any of these steps.",
    "Want me to adapt this further?",
    "Tell me how it goes and we can adjust.",
    "If anything is unclear, just ask.",
)
_SNIPPETS = (
    "```python\ndef load_{module}(path):\n    rows = []\n    with open(path) as fh:\n"
    "        for line in fh:\n"
    "            rows.append(line.strip().split(','))\n    return rows\n```",
    "```python\n@app.route('/{module}')\ndef {module}_view():\n"
    "    items = db.session.query(Item).limit(50).all()\n"
    "    return jsonify([i.to_dict() for i in items])\n```",
    "```python\nimport logging\nlog = logging.getLogger('{module}')\n"
    "log.info('request took %s ms', elapsed)\n```",
)


def _filler_user(rng: random.Random, topic: str, values: dict[str, Any]) -> str:
    text = rng.choice(_USER_OPENERS)
    if rng.random() < 0.7:
        text += " ".join(rng.sample(_CONTEXT[topic], rng.randint(1, 2))) + " "
    text += rng.choice(_ASKS[topic])
    if rng.random() < 0.5:
        text += " " + rng.choice(_DETAILS[topic])
    if topic == "coding" and rng.random() < 0.3:
        text += " Here's what I have so far:\n" + rng.choice(_SNIPPETS)
    return text.format_map(values)


def _filler_reply(rng: random.Random, topic: str, values: dict[str, Any]) -> str:
    sentences = rng.sample(_REPLY_SENTENCES[topic], rng.randint(6, 9))
    headings = rng.sample(_HEADINGS, 2)
    parts = [rng.choice(_REPLY_OPENERS), headings[0] + "\n" + " ".join(sentences[:3])]
    if rng.random() < 0.6:
        steps = rng.sample(_STEPS[topic], rng.randint(3, 5))
        parts.append("Here's a plan:\n" + "\n".join(f"{i}. {s}" for i, s in enumerate(steps, 1)))
    if topic == "coding" and rng.random() < 0.4:
        parts.append("For example:\n" + rng.choice(_SNIPPETS))
    parts.append(headings[1] + "\n" + " ".join(sentences[3:]) + " " + rng.choice(_REPLY_CLOSERS))
    return "\n\n".join(parts).format_map(values)


# ---------------------------------------------------------------------------------------------- plants
@dataclass(frozen=True)
class Plant:
    """A probing question with its evidence turns: user texts in conversation order, their replies,
    and a builder that turns the user message ids into the question record."""

    ability: str
    user_texts: tuple[str, ...]
    reply_texts: tuple[str, ...]
    question: Callable[[list[int]], dict[str, Any]]


def _day(d: dt.date) -> str:
    return f"{d:%B} {d.day}, {d.year}"


def _refs(ids: list[int]) -> list[str]:
    return [f"chat_id: {i}" for i in ids]


def _state(text: str) -> str:
    return f"LLM response should state: {text}"


_INSTRUCTIONS = (  # statement, probe, tested, compliance, indicators, violations, type, acknowledgement
    (
        "coding",
        "From now on, always include type hints when you show me Python code.",
        "Can you show me how to parse a CSV export from {bank} into a list of records?",
        "Always include type hints when showing Python code.",
        "Response should contain Python code whose functions annotate parameter and return types.",
        ["function signatures with type annotations", "annotated return values"],
        ["untyped function definitions", "code without annotations"],
        "format_instruction",
        "Understood: every Python example will carry annotations on parameters and return values.",
    ),
    (
        "coding",
        "Whenever you write SQL for me, put every keyword in uppercase.",
        "How would I pull the ten most recent orders for one customer out of {db}?",
        "Write SQL keywords in uppercase.",
        "Response should contain a query with SELECT, FROM, WHERE in capitals.",
        ["SQL keywords in capitals"],
        ["lowercase select or from"],
        "format_instruction",
        "Noted, capitalised keywords in any query I show you.",
    ),
    (
        "coding",
        "Please remember to state the time complexity whenever you suggest an algorithm.",
        "What's a quick way to find duplicate email addresses in a big list of sign-ups?",
        "State the time complexity of any suggested algorithm.",
        "Response should give the big-O cost of the approach.",
        ["big-O notation", "cost of the approach stated"],
        ["no mention of complexity"],
        "content_instruction",
        "Will do; I'll give the big-O cost with each approach.",
    ),
    (
        "finance",
        "Going forward, put any budget breakdown you give me in a table with a percentage column.",
        "How should I divide up this month's paycheck?",
        "Present budget breakdowns as a table with percentages.",
        "Response should contain a table with a percent column.",
        ["a table", "a percentage for each category"],
        ["prose-only breakdown"],
        "format_instruction",
        "Got it, breakdowns will come as tables with shares in percent.",
    ),
    (
        "travel",
        "I'd like you to give distances in kilometres only, never miles.",
        "How long is the drive from {city} out to the nearest beach town?",
        "Give distances in kilometres, not miles.",
        "Response should express distance in kilometres.",
        ["distance in km"],
        ["distance in miles"],
        "format_instruction",
        "Sure, metric distances from here on.",
    ),
    (
        "health",
        "Make sure to start with a warm-up section every time you put together a workout for me.",
        "Could you plan a 30-minute session I can do at home tonight?",
        "Start every workout plan with a warm-up.",
        "Response should open the session with a warm-up block.",
        ["a warm-up block first"],
        ["plan starting directly with the main set"],
        "content_instruction",
        "Absolutely, each plan will open with a few minutes of easy preparation.",
    ),
    (
        "writing",
        "Keep your critiques of my writing to three bullet points at most.",
        "What do you think of the scene where {character} first reaches the harbour?",
        "Limit writing critiques to three bullet points.",
        "Response should give at most three bullet points.",
        ["three or fewer bullet points"],
        ["long essay-style critique", "more than three points"],
        "length_instruction",
        "Understood, short and focused feedback from now.",
    ),
    (
        "health",
        "Please include the calorie count for any meal you suggest.",
        "What should I cook for dinner after a long {sport} session?",
        "Include calorie counts with meal suggestions.",
        "Response should give calories for the meal.",
        ["kcal per meal"],
        ["meal ideas without calories"],
        "content_instruction",
        "Okay, I'll add the energy content next to each meal.",
    ),
    (
        "finance",
        "Never quote me an exchange rate without saying what date it's from.",
        "Roughly how much is a hundred dollars worth in {country2} right now?",
        "Date every exchange rate quoted.",
        "Response should say which date the rate refers to.",
        ["the date of the rate"],
        ["an undated rate"],
        "content_instruction",
        "Noted, rates will come with their date.",
    ),
    (
        "writing",
        "Do not use emojis in anything you draft for me.",
        "Can you draft a short newsletter announcement about finishing '{title}'?",
        "No emojis in drafted text.",
        "Response should contain a draft with no emoji characters.",
        ["plain text without emoji"],
        ["any emoji"],
        "style_instruction",
        "Understood, plain text only.",
    ),
    (
        "coding",
        "In the future, add a one-line comment above each function in code you write for me.",
        "How do I retry a failing HTTP request a few times before giving up?",
        "Comment every function in generated code.",
        "Response should contain code with a comment above each function.",
        ["a comment line per function"],
        ["uncommented functions"],
        "format_instruction",
        "Sure, each function will get a short explanatory line.",
    ),
    (
        "travel",
        "Remember to mention the local emergency number when you describe a destination for me.",
        "What's {city2} like for a first-time visitor?",
        "Mention the local emergency number for destinations.",
        "Response should include the emergency number.",
        ["the local emergency number"],
        ["destination overview without it"],
        "content_instruction",
        "Good idea, I'll include it whenever a place comes up.",
    ),
)
_PREFERENCES = (  # statement, probe, tested, compliance, indicators, violations, type
    (
        "coding",
        "I'm trying to keep {project} lightweight, so I really prefer minimal dependencies over big "
        "frameworks.",
        "What would you use to add login and a few charts to my app?",
        "Prefers minimal dependencies to keep the app lightweight.",
        "Response should recommend lightweight tools with few dependencies.",
        ["suggests lightweight libraries", "avoids heavy frameworks"],
        ["recommends large stacks"],
        "decision_criteria",
    ),
    (
        "coding",
        "I'd rather write plain functions than build deep class hierarchies.",
        "How should I organise the code for a small command-line tool?",
        "Prefers plain functions over class hierarchies.",
        "Response should propose a function-based layout.",
        ["module of functions"],
        ["abstract base classes and inheritance trees"],
        "style_preference",
    ),
    (
        "finance",
        "I'd rather put money into broad, low-cost index funds than try to pick individual winners.",
        "Where should I invest the bonus I got this month?",
        "Prefers broad index funds over stock picking.",
        "Response should suggest diversified low-cost funds.",
        ["index funds", "diversification"],
        ["individual stock tips"],
        "decision_criteria",
    ),
    (
        "finance",
        "I'm quite risk-averse with money and sleep better with guaranteed returns, even lower ones.",
        "What could I do with ${amount:,} I won't need for three years?",
        "Risk-averse; prefers guaranteed returns.",
        "Response should favour low-risk options such as CDs or bonds.",
        ["certificates of deposit or treasuries", "capital preservation"],
        ["equity-heavy suggestions"],
        "risk_tolerance",
    ),
    (
        "travel",
        "I like small family-run guesthouses much more than big chain hotels.",
        "Where should I stay when I get to {city}?",
        "Prefers small family-run guesthouses.",
        "Response should suggest independent guesthouses.",
        ["family-run places", "independent lodging"],
        ["chain hotels"],
        "accommodation_preference",
    ),
    (
        "travel",
        "Aisle seats and morning departures suit me best; overnight flights wreck me.",
        "Can you help me choose a flight to {city2}?",
        "Prefers aisle seats and morning departures.",
        "Response should favour daytime departures and aisle seats.",
        ["morning flight", "aisle seat"],
        ["red-eye suggestion"],
        "travel_preference",
    ),
    (
        "health",
        "I'm vegetarian, so no meat or fish in any meal ideas.",
        "Any ideas for a high-protein lunch I can prep on Sundays?",
        "Vegetarian diet.",
        "Response should suggest only meat-free and fish-free meals.",
        ["legumes, tofu, eggs or dairy"],
        ["chicken, beef or fish"],
        "dietary_preference",
    ),
    (
        "health",
        "I'd much rather train at home with a pair of dumbbells than join a gym.",
        "How can I build leg strength over the next two months?",
        "Prefers home training with dumbbells.",
        "Response should use dumbbell or bodyweight exercises at home.",
        ["dumbbell exercises", "no gym machines"],
        ["leg press or gym machines"],
        "training_preference",
    ),
    (
        "writing",
        "I like a plain, conversational voice; nothing that sounds academic.",
        "Can you help me rewrite the back-cover blurb for '{title}'?",
        "Prefers a plain, conversational voice.",
        "Response should be written plainly and conversationally.",
        ["short plain sentences"],
        ["jargon or academic tone"],
        "style_preference",
    ),
    (
        "writing",
        "I want blunt, specific feedback rather than encouragement.",
        "What do you make of how chapter {ch} ends?",
        "Prefers blunt, specific feedback.",
        "Response should be direct and specific about weaknesses.",
        ["direct criticism", "specific examples"],
        ["generic praise"],
        "feedback_preference",
    ),
)


def _standing_rule(rng: random.Random, cast: dict, row: tuple, ability: str) -> Plant:
    topic, statement, probe, tested, compliance, indicators, violations, kind = row[:8]
    values = {**cast, **_numbers(rng)}
    statement, probe = statement.format_map(values), probe.format_map(values)
    lead = rng.choice(("", "", "Before we go on, one thing. ", "Small request for later. "))
    user = lead + statement + ("" if rng.random() < 0.4 else " " + _filler_user(rng, topic, values))
    ack = row[8] if len(row) > 8 else "Thanks, I'll keep that in mind."
    reply = ack + "\n\n" + _filler_reply(rng, topic, values)
    test_key = "instruction_being_tested" if ability == "instruction_following" else "preference_being_tested"
    type_key = "instruction_type" if ability == "instruction_following" else "preference_type"

    def question(ids: list[int]) -> dict[str, Any]:
        return {
            "question": probe,
            test_key: tested,
            "expected_compliance": compliance,
            "compliance_indicators": indicators,
            "non_compliance_signs": violations,
            "difficulty": "medium",
            type_key: kind,
            "source_chat_ids": ids,
            "rubric": [f"LLM response should contain: {i}" for i in indicators],
        }

    return Plant(ability, (user,), (reply,), question)


def _money(old_lo: int, old_hi: int, step: int, up: tuple[int, int]) -> Callable:
    def gen(rng: random.Random, d1: dt.date, d2: dt.date) -> tuple[str, str]:
        old = rng.randint(old_lo, old_hi) * step
        return f"${old:,}", f"${old + rng.randint(*up) * step:,}"

    return gen


def _count(lo: int, hi: int, delta: tuple[int, int], fmt: str = "{:,}") -> Callable:
    def gen(rng: random.Random, d1: dt.date, d2: dt.date) -> tuple[str, str]:
        old = rng.randint(lo, hi)
        return fmt.format(old), fmt.format(old + rng.randint(*delta))

    return gen


def _later_dates(rng: random.Random, d1: dt.date, d2: dt.date) -> tuple[str, str]:
    old = d2 + dt.timedelta(days=rng.randint(10, 30))
    return _day(old), _day(old + dt.timedelta(days=rng.randint(3, 21)))


_UPDATES = (  # topic, original, update, question, update_type, what, value generator
    (
        "finance",
        "I'm budgeting around my rent, which is {old} a month.",
        "My landlord just renewed the lease and I now pay {new} a month.",
        "What am I paying for housing each month at this point?",
        "price_change",
        "monthly rent",
        _money(24, 52, 50, (1, 6)),
    ),
    (
        "coding",
        "The {project} dashboard API averages about {old} per request.",
        "After the caching change, the {project} dashboard API is down to roughly {new}.",
        "How fast does the {project} dashboard respond these days?",
        "performance_improvement",
        "API response time",
        lambda rng, a, b: (f"{rng.randint(40, 90) * 10}ms", f"{rng.randint(9, 35) * 10}ms"),
    ),
    (
        "travel",
        "My flight to {city} leaves on {old}.",
        "The airline moved my {city} flight; it now departs {new}.",
        "When am I flying out to {city}?",
        "schedule_change",
        "departure date",
        _later_dates,
    ),
    (
        "health",
        "I'm {sport} about {old} a week at the moment.",
        "I've built my {sport} up to {new} a week.",
        "How much distance am I covering per week now?",
        "progress_update",
        "weekly distance",
        _count(12, 25, (4, 15), "{} km"),
    ),
    (
        "writing",
        "'{title}' is sitting at {old} words.",
        "The draft of '{title}' just passed {new} words.",
        "How long is my manuscript at the moment?",
        "progress_update",
        "word count",
        _count(20_000, 45_000, (8_000, 30_000)),
    ),
    (
        "finance",
        "My emergency fund target is {old}.",
        "I've raised my emergency fund target to {new}.",
        "What's my current goal for the rainy-day fund?",
        "goal_change",
        "savings target",
        _money(50, 120, 100, (10, 60)),
    ),
    (
        "coding",
        "There are {old} developers on the {project} team.",
        "We just hired, so {project} now has {new} developers.",
        "How many engineers work on {project}?",
        "team_change",
        "team size",
        _count(3, 7, (1, 4)),
    ),
    (
        "health",
        "My resting heart rate is around {old} bpm.",
        "My resting heart rate has dropped to {new} bpm.",
        "What's my resting pulse lately?",
        "progress_update",
        "resting heart rate",
        lambda rng, a, b: (str(rng.randint(66, 78)), str(rng.randint(52, 63))),
    ),
    (
        "travel",
        "I've set aside {old} for the {city} trip.",
        "I bumped the {city} trip budget up to {new}.",
        "How much money have I allocated for visiting {city}?",
        "budget_change",
        "trip budget",
        _money(12, 30, 100, (3, 15)),
    ),
    (
        "writing",
        "My application for the {city} writing residency is due {old}.",
        "The residency pushed its application deadline back to {new}.",
        "When do I have to send in the residency application?",
        "deadline_change",
        "application deadline",
        _later_dates,
    ),
)


def _knowledge_update(rng: random.Random, cast: dict, row: tuple, dates: list[dt.date]) -> Plant:
    topic, original, update, ask, update_type, what, gen = row
    old, new = gen(rng, dates[0], dates[1])
    values = {**cast, **_numbers(rng)}
    texts = tuple(
        (t.format_map({**cast, "old": old, "new": new}) + " " + _filler_user(rng, topic, values))
        for t in (original, update)
    )
    replies = tuple(_filler_reply(rng, topic, values) for _ in texts)

    def question(ids: list[int]) -> dict[str, Any]:
        return {
            "question": ask.format_map(cast),
            "answer": new,
            "difficulty": "easy",
            "update_type": update_type,
            "tests_retention_of": f"updated {what}",
            "conversation_references": _refs(ids),
            "potential_confusion": f"LLM might recall the original {what} ({old}) instead of {new}",
            "source_chat_ids": {"original_info": [ids[0]], "updated_info": [ids[1]]},
            "rubric": [_state(new)],
        }

    return Plant("knowledge_update", texts, replies, question)


_CONTRADICTIONS = (  # topic, never-statement, contradicting statement, question, topic questioned
    (
        "coding",
        "I've never used Docker for anything, {project} included.",
        "I rebuilt the Docker image for {project} this morning and the container starts fine now.",
        "Have I containerised any of my projects before?",
        "Experience with containers",
    ),
    (
        "travel",
        "I've never been to {country2}.",
        "Back when I was in {city2} a couple of years ago I loved the markets.",
        "Have I visited {country2} before?",
        "Previous visits",
    ),
    (
        "finance",
        "I don't own any individual stocks.",
        "My {stock} shares dropped {pct}% today and I'm a bit rattled.",
        "Do I hold shares in any single company?",
        "Stock ownership",
    ),
    (
        "health",
        "I've never run a marathon.",
        "Since my marathon in {city} last spring my left calf has been tight.",
        "Have I ever done a 42-kilometre race?",
        "Marathon experience",
    ),
    (
        "writing",
        "I've never entered a writing contest.",
        "The short story I entered for the {city} Literary Prize made the longlist!",
        "Have I ever submitted my work to a competition?",
        "Competition entries",
    ),
    (
        "health",
        "I don't drink coffee at all.",
        "I'm on my third espresso today, which probably explains the jitters.",
        "Do I drink caffeine?",
        "Caffeine consumption",
    ),
    (
        "coding",
        "I've never written browser end-to-end tests for {project}.",
        "The Playwright end-to-end suite for {project} caught a broken login button today.",
        "Is there any automated UI testing on my web app?",
        "End-to-end testing",
    ),
    (
        "finance",
        "I've never had a student loan.",
        "I'm still paying off the ${debt:,} left on my student loan.",
        "Did I take out loans for my education?",
        "Education debt",
    ),
    (
        "travel",
        "I've never flown business class.",
        "On my business-class flight to {city} the seat was amazing.",
        "Have I travelled in a premium cabin?",
        "Premium travel",
    ),
)


def _contradiction(rng: random.Random, cast: dict, row: tuple, dates: list[dt.date]) -> Plant:
    topic, never, other, ask, topic_questioned = row
    values = {**cast, **_numbers(rng)}
    never, other = never.format_map(values), other.format_map(values)
    never_first = rng.random() < 0.5
    ordered = (never, other) if never_first else (other, never)
    texts = tuple(t + " " + _filler_user(rng, topic, values) for t in ordered)
    replies = tuple(_filler_reply(rng, topic, values) for _ in texts)

    def question(ids: list[int]) -> dict[str, Any]:
        first, second = (ids[0], ids[1]) if never_first else (ids[1], ids[0])
        return {
            "question": ask.format_map(cast),
            "ideal_answer": "I notice you've mentioned contradictory information about this. You said "
            f'"{never}", but you also said "{other}". Could you clarify which is correct?',
            "difficulty": "clear",
            "contradiction_type": "never_statement_violation",
            "topic_questioned": topic_questioned,
            "conversation_references": _refs([first, second]),
            "tests_for": "LLM should detect contradiction and request clarification instead of giving "
            "definitive answer",
            "source_chat_ids": {"first_statement": [first], "second_statement": [second]},
            "rubric": [
                "LLM response should state: there is contradictory information",
                f"LLM response should mention: {never}",
                f"LLM response should mention: {other}",
            ],
        }

    return Plant("contradiction_resolution", texts, replies, question)


_TEMPORAL = (  # topic, first event, second event, question, what is measured, labels
    (
        "coding",
        "I shipped the beta of {project} on {d1}.",
        "{project} version 1.0 went live on {d2}.",
        "How many days passed between the {project} beta and the official release?",
        ("beta", "release"),
    ),
    (
        "travel",
        "I asked for vacation days for the {city} trip on {d1}.",
        "My manager approved the time off on {d2}.",
        "How long did it take to get my leave for the trip signed off?",
        ("leave requested", "leave approved"),
    ),
    (
        "health",
        "I had my first physio appointment with {doctor} on {d1}.",
        "{doctor} cleared me to train on {d2}.",
        "How long did my rehab take, from first appointment to the all-clear?",
        ("first appointment", "all-clear"),
    ),
    (
        "writing",
        "I sent '{title}' to beta readers on {d1}.",
        "The last beta reader returned notes on {d2}.",
        "How many days did beta reading of my book take?",
        ("sent to readers", "last notes back"),
    ),
    (
        "finance",
        "I opened the savings account at {bank} on {d1}.",
        "The account reached its first $1,000 on {d2}.",
        "How long did it take to reach my first savings milestone?",
        ("account opened", "first $1,000"),
    ),
    (
        "coding",
        "The {module} outage in {project} started on {d1}.",
        "We closed the {module} incident review on {d2}.",
        "How long was it from the outage to closing its review?",
        ("outage", "review closed"),
    ),
    (
        "health",
        "I signed up for a 10K race on {d1}.",
        "I ran the 10K on {d2}, finally.",
        "How much time did I have to prepare for the 10K?",
        ("sign-up", "race day"),
    ),
    (
        "travel",
        "I applied to renew my passport on {d1}.",
        "The renewed passport arrived on {d2}.",
        "How long did the passport renewal take?",
        ("application", "delivery"),
    ),
)


def _temporal(rng: random.Random, cast: dict, row: tuple, dates: list[dt.date]) -> Plant:
    topic, first, second, ask, labels = row
    d1 = dates[0] - dt.timedelta(days=rng.randint(0, 2))
    d2 = max(dates[1] - dt.timedelta(days=rng.randint(0, 2)), d1 + dt.timedelta(days=1))
    values = {**cast, **_numbers(rng), "d1": _day(d1), "d2": _day(d2)}
    texts = tuple(t.format_map(values) + " " + _filler_user(rng, topic, values) for t in (first, second))
    replies = tuple(_filler_reply(rng, topic, values) for _ in texts)
    days = (d2 - d1).days

    def question(ids: list[int]) -> dict[str, Any]:
        return {
            "question": ask.format_map(cast),
            "answer": f"{days} days, from {_day(d1)} ({labels[0]}) to {_day(d2)} ({labels[1]}).",
            "difficulty": "easy" if days < 60 else "medium",
            "temporal_type": "duration_calculation",
            "time_points": [f"{_day(d1)}: {labels[0]}", f"{_day(d2)}: {labels[1]}"],
            "conversation_references": _refs(ids),
            "calculation_required": f"{_day(d2)} - {_day(d1)} = {days} days",
            "source_chat_ids": {"first_event": [ids[0]], "second_event": [ids[1]]},
            "rubric": [_state(f"{days} days"), _state(f"from {_day(d1)} till {_day(d2)}")],
        }

    return Plant("temporal_reasoning", texts, replies, question)


_THREADS = (  # topic, thread name, [(statement, label)], ordering question, summary question
    (
        "coding",
        "getting {project} out the door",
        (
            ("The repository and CI pipeline for {project} are finally set up.", "Repository and CI setup"),
            ("I finished building the {module} module for {project} yesterday.", "{module} module built"),
            ("We load-tested {project} with {n} simulated users over the weekend.", "Load testing"),
            ("{project} is deployed to production as of this morning.", "Production deployment"),
        ),
        "In what order did I get through the main stages of launching {project}?",
        "Can you summarise how the launch of {project} went, from start to finish?",
    ),
    (
        "travel",
        "preparing the {city} trip",
        (
            ("Flights to {city} are booked, which is a relief.", "Flights booked"),
            ("I reserved a room at {guesthouse} for the {city} stay.", "Accommodation reserved"),
            ("Travel insurance for {city} is sorted now too.", "Insurance bought"),
            ("I've mapped out two day trips from {city}.", "Day trips planned"),
        ),
        "Can you list the steps of getting ready for {city} in the order I mentioned them?",
        "Summarise where my {city} trip preparations stand and how they unfolded.",
    ),
    (
        "finance",
        "getting my finances in order",
        (
            ("I made a spreadsheet of every expense from the last three months.", "Expense spreadsheet"),
            ("My three-month emergency cushion at {bank} is fully funded.", "Emergency fund complete"),
            ("I opened a brokerage account last night.", "Brokerage account opened"),
            ("A monthly automatic purchase of {ticker} is now set up.", "Automatic investing"),
        ),
        "What order did I tackle my money goals in?",
        "Could you give me an overview of how my financial clean-up has progressed?",
    ),
    (
        "health",
        "coming back from the knee problem",
        (
            ("{doctor} looked at my sore knee and found nothing torn.", "Doctor's check"),
            ("I've started a ten-minute mobility routine every morning.", "Mobility routine"),
            ("I'm back to easy {sport}, three short sessions a week.", "Return to easy training"),
            ("I signed up for a local race in {month}.", "Race entry"),
        ),
        "In which order did the stages of my knee recovery happen?",
        "Summarise my recovery from the knee problem so far.",
    ),
    (
        "writing",
        "the journey of '{title}'",
        (
            ("The outline for '{title}' is done: {n} scenes on index cards.", "Outline"),
            ("I typed the last line of the first draft of '{title}' tonight.", "First draft finished"),
            ("'{title}' went out to four beta readers today.", "Beta readers"),
            ("I sent my first five query letters for '{title}'.", "Querying agents"),
        ),
        "Can you put the milestones of my book project in the order I reached them?",
        "Give me a summary of how my work on '{title}' has developed.",
    ),
    (
        "coding",
        "the {module2} refactor in {project2}",
        (
            (
                "Before touching {module2} in {project2}, I wrote characterization tests around it.",
                "Characterization tests",
            ),
            ("The {module2} code is now split into three small services.", "Split into services"),
            ("I swapped the raw {db} queries in {module2} for the ORM.", "ORM migration"),
            ("The old {module2} code path is deleted at last.", "Old path removed"),
        ),
        "What sequence did the {module2} refactor follow?",
        "Summarise how the {module2} refactor in {project2} went.",
    ),
    (
        "finance",
        "buying a used car",
        (
            ("I set a hard ceiling of ${amount:,} for the car.", "Budget ceiling"),
            ("{bank} pre-approved me for a small auto loan.", "Loan pre-approval"),
            ("I test-drove three hatchbacks on Saturday.", "Test drives"),
            ("I signed for the blue hatchback and picked it up today.", "Purchase"),
        ),
        "Walk me through the order of steps I took to buy the car.",
        "Could you summarise how the car purchase played out?",
    ),
    (
        "health",
        "the half-marathon training block",
        (
            ("Week one of the half-marathon plan is done: four easy sessions.", "Base week"),
            ("I added hill repeats on Tuesdays for the half-marathon block.", "Hill repeats"),
            ("My longest run of the block was {km} km, no pain.", "Long run peak"),
            ("Taper week started, volume is down by half.", "Taper"),
        ),
        "In what order did the phases of my half-marathon block come?",
        "Summarise how my half-marathon training block progressed.",
    ),
)
_THREAD_REPLIES = (
    "That's real progress on {thread}: {step}.",
    "Nice milestone for {thread} ({step}).",
    "Good news for {thread}. {step} is a real step forward.",
)


def _thread(rng: random.Random, cast: dict, row: tuple, dates: list[dt.date], ability: str) -> Plant:
    topic, thread, steps, order_ask, summary_ask = row
    values = {**cast, **_numbers(rng)}
    thread = thread.format_map(values)
    statements = [s.format_map(values) for s, _ in steps]
    labels = [label.format_map(values) for _, label in steps]
    texts = tuple(s + " " + _filler_user(rng, topic, values) for s in statements)
    replies = tuple(
        rng.choice(_THREAD_REPLIES).format(thread=thread, step=label)
        + "\n\n"
        + _filler_reply(rng, topic, values)
        for label in labels
    )

    def ordering(ids: list[int]) -> dict[str, Any]:
        ordinals = ("1st", "2nd", "3rd", "4th")
        return {
            "question": order_ask.format_map(cast),
            "answer": "You mentioned them in this order: "
            + ", ".join(f"{i}) {label}" for i, label in enumerate(labels, 1))
            + ".",
            "difficulty": "medium",
            "ordering_type": "mention_sequence",
            "total_mentions": len(ids),
            "conversation_references": [
                f"Session {i}: {label}" for i, label in zip(ids, labels, strict=True)
            ],
            "ordering_tested": [f"{o}: {label}" for o, label in zip(ordinals, labels, strict=False)],
            "source_chat_ids": ids,
            "rubric": labels,
        }

    def summary(ids: list[int]) -> dict[str, Any]:
        both = sorted(ids + [i + 1 for i in ids])
        return {
            "question": summary_ask.format_map(cast),
            "ideal_summary": f"Over the conversation, {thread} went through these stages: "
            + "; ".join(label.lower() for label in labels)
            + ".",
            "difficulty": rng.choice(("easy", "medium", "hard")),
            "summarization_type": "chronological_development",
            "bullet_points_covered": len(labels),
            "conversation_sessions": both,
            "key_elements_tested": labels,
            "synthesis_required": f"Integrating the steps of {thread} into one chronological narrative",
            "source_chat_ids": both,
            "rubric": [f"LLM response should contain: {label}" for label in labels],
        }

    return Plant(ability, texts, replies, ordering if ability == "event_ordering" else summary)


def _msr_trip(rng: random.Random) -> tuple:
    a, b, c = rng.randint(30, 90) * 10, rng.randint(40, 120) * 10, rng.randint(8, 30) * 10
    return (
        [
            f"The return flights to {{city}} came to ${a} in the end.",
            f"The guesthouse in {{city}} is ${b} for the whole stay.",
            f"I picked up a regional rail pass for {{country}}: ${c}.",
        ],
        "What have I spent on the {city} trip so far, all told?",
        f"${a + b + c:,}",
        "numeric_aggregation",
        ["Find the flight cost", "Find the accommodation cost", "Find the rail pass cost", "Add them up"],
    )


def _msr_columns(rng: random.Random) -> tuple:
    return (
        [
            "For {project}, I want to add a 'category' column to the transactions table.",
            "We also need a 'notes' text column on transactions in {project}.",
        ],
        "How many new fields did I ask for on the {project} transactions table, and which?",
        "Two: 'category' and 'notes'.",
        "simple_cross_session_facts",
        ["Find the first column request", "Find the second column request", "Count them"],
    )


def _msr_savings(rng: random.Random) -> tuple:
    a, b, c = rng.randint(20, 90) * 100, rng.randint(10, 60) * 100, rng.randint(5, 40) * 100
    return (
        [
            f"My savings account at {{bank}} holds ${a:,} right now.",
            f"The brokerage account is worth about ${b:,} after this month.",
            f"My Roth IRA balance is ${c:,}.",
        ],
        "Across all my accounts, how much have I put away?",
        f"${a + b + c:,}",
        "numeric_aggregation",
        ["Find each account balance", "Add the three balances"],
    )


def _msr_chapters(rng: random.Random) -> tuple:
    a, b = rng.randint(25, 60) * 100, rng.randint(25, 60) * 100
    return (
        [
            f"Chapter one of '{{title}}' came out at {a:,} words.",
            f"Chapter two of '{{title}}' ended up at {b:,} words.",
        ],
        "How long are the first two chapters of my book combined?",
        f"{a + b:,} words",
        "numeric_aggregation",
        ["Find chapter one's length", "Find chapter two's length", "Add them"],
    )


def _msr_bugs(rng: random.Random) -> tuple:
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    return (
        [
            f"I closed {a} bugs in the {{module}} module of {{project}} today.",
            f"Another {b} bugs fixed, this time in {{module2}}.",
        ],
        "How many defects have I fixed in total across the modules I told you about?",
        str(a + b),
        "numeric_aggregation",
        ["Find each batch of fixes", "Add them"],
    )


def _msr_advice(rng: random.Random) -> tuple:
    return (
        [
            "{doctor} wants me to cut back on salt.",
            "At the follow-up, {doctor} suggested a daily 20-minute walk.",
            "{doctor} also recommended I stop eating late at night.",
        ],
        "What lifestyle changes has my doctor recommended across my visits?",
        "Less salt, a daily 20-minute walk, and no late-night eating.",
        "list_aggregation",
        ["Collect each recommendation", "List them together"],
    )


_MULTI_SESSION = (
    ("travel", _msr_trip),
    ("coding", _msr_columns),
    ("finance", _msr_savings),
    ("writing", _msr_chapters),
    ("coding", _msr_bugs),
    ("health", _msr_advice),
)


def _multi_session(rng: random.Random, cast: dict, row: tuple, dates: list[dt.date]) -> Plant:
    topic, build = row
    statements, ask, answer, reasoning, steps = build(random.Random(rng.getrandbits(64)))
    values = {**cast, **_numbers(rng)}
    texts = tuple(s.format_map(cast) + " " + _filler_user(rng, topic, values) for s in statements)
    replies = tuple(_filler_reply(rng, topic, values) for _ in texts)

    def question(ids: list[int]) -> dict[str, Any]:
        return {
            "question": ask.format_map(cast),
            "answer": answer,
            "difficulty": "easy" if len(ids) < 3 else "medium",
            "reasoning_type": reasoning,
            "sessions_required": len(ids),
            "conversation_references": _refs(ids),
            "reasoning_steps": steps,
            "source_chat_ids": ids,
            "rubric": [_state(answer)],
        }

    return Plant("multi_session_reasoning", texts, replies, question)


_FACTS = (  # topic, statement, question, answer, question type, fact
    (
        "coding",
        "The staging box for {project} listens on port {port}.",
        "Which port is {project}'s staging server on?",
        "{port}",
        "technical_detail",
        "staging port",
    ),
    (
        "travel",
        "My sister is getting married in {city2} in {month}.",
        "Where is my sister's wedding?",
        "{city2}, in {month}",
        "personal_detail",
        "wedding location",
    ),
    (
        "health",
        "My physiotherapist is {doctor}, at the Riverside clinic.",
        "Who's treating me for physio?",
        "{doctor} at the Riverside clinic",
        "personal_detail",
        "physiotherapist",
    ),
    (
        "writing",
        "{character}, my protagonist, works as a {profession}.",
        "What does the main character in '{title}' do for a living?",
        "A {profession}",
        "story_detail",
        "occupation",
    ),
    (
        "finance",
        "The savings account at {bank} pays {rate}% APY.",
        "What interest rate does my savings earn?",
        "{rate}% APY",
        "numeric_detail",
        "interest rate",
    ),
    (
        "coding",
        "Production for {project2} runs Python {pyver}.",
        "Which interpreter version is {project2} deployed on?",
        "Python {pyver}",
        "technical_detail",
        "Python version",
    ),
    (
        "travel",
        "In {city} I'm staying at {guesthouse}.",
        "What's the name of my lodging in {city}?",
        "{guesthouse}",
        "context_detail",
        "accommodation name",
    ),
    (
        "writing",
        "My writing group meets on Thursdays at 7 pm.",
        "When does my writing group get together?",
        "Thursdays at 7 pm",
        "context_date/time",
        "meeting time",
    ),
    (
        "finance",
        "My car insurance renews at ${premium:,} a year.",
        "What do I pay annually to insure the car?",
        "${premium:,}",
        "numeric_detail",
        "insurance premium",
    ),
)


def _extraction(rng: random.Random, cast: dict, row: tuple, dates: list[dt.date]) -> Plant:
    topic, statement, ask, answer, qtype, fact = row
    values = {**cast, **_numbers(rng)}
    statement, answer = statement.format_map(values), answer.format_map(values)
    user = (
        _filler_user(rng, topic, values) + " By the way: " + statement
        if rng.random() < 0.5
        else statement + " " + _filler_user(rng, topic, values)
    )

    def question(ids: list[int]) -> dict[str, Any]:
        return {
            "question": ask.format_map(values),
            "answer": answer,
            "difficulty": "easy",
            "question_type": qtype,
            "conversation_reference": f"chat_id {ids[0]}: {statement}",
            "key_facts_tested": [fact],
            "source_chat_ids": ids,
            "rubric": [_state(answer)],
        }

    return Plant("information_extraction", (user,), (_filler_reply(rng, topic, values),), question)


# question, abstention type, why; ABSENT_TERMS holds the words no generated message may contain
_ABSTENTIONS = (
    ("What did the vet say about my dog's limp?", "unavailable_information", "No pet is ever mentioned."),
    (
        "Which wine did I choose for my parents' anniversary dinner?",
        "unavailable_information",
        "No dinner or wine is mentioned.",
    ),
    ("How are my Mandarin lessons going?", "unavailable_information", "No language lessons are mentioned."),
    ("What score did I get on my driving test?", "unavailable_information", "No driving test is mentioned."),
    (
        "What did the contractor quote for the kitchen renovation?",
        "unavailable_information",
        "No home renovation is mentioned.",
    ),
    (
        "Which piano piece am I preparing for the recital?",
        "unavailable_information",
        "No music practice is mentioned.",
    ),
    (
        "How many solar panels did the installer recommend for my roof?",
        "unavailable_information",
        "No solar installation is mentioned.",
    ),
    (
        "What medication did my doctor prescribe for my knee?",
        "missing_detail",
        "The knee and the doctor are mentioned, but never any medication.",
    ),
    ("Which chess opening have I been studying?", "unavailable_information", "Chess never comes up."),
)
ABSENT_TERMS = (
    ("vet", "dog"),
    ("wine", "anniversary"),
    ("mandarin",),
    ("driving test",),
    ("contractor", "kitchen", "renovation"),
    ("piano", "recital"),
    ("solar",),
    ("medication", "prescri"),
    ("chess",),
)


def _abstention(rng: random.Random, cast: dict, row: tuple, dates: list[dt.date]) -> Plant:
    ask, kind, why = row
    response = "Based on the provided chat, there is no information related to that."

    def question(ids: list[int]) -> dict[str, Any]:
        return {
            "question": ask,
            "ideal_response": response,
            "difficulty": rng.choice(("easy", "medium", "hard")),
            "abstention_type": kind,
            "why_unanswerable": why,
            "plan_reference": "none",
            "rubric": [response],
        }

    return Plant("abstention", (), (), question)


# ability -> (kinds, number of evidence turns of a kind, placement rule, renderer)
_PLANTERS: dict[str, tuple[tuple, Callable[[tuple], int], str, Callable]] = {
    "abstention": (_ABSTENTIONS, lambda row: 0, "any", _abstention),
    "contradiction_resolution": (_CONTRADICTIONS, lambda row: 2, "any", _contradiction),
    "event_ordering": (
        _THREADS,
        lambda row: len(row[2]),
        "spread",
        lambda rng, cast, row, dates: _thread(rng, cast, row, dates, "event_ordering"),
    ),
    "information_extraction": (_FACTS, lambda row: 1, "any", _extraction),
    "instruction_following": (
        _INSTRUCTIONS,
        lambda row: 1,
        "early",
        lambda rng, cast, row, dates: _standing_rule(rng, cast, row, "instruction_following"),
    ),
    "knowledge_update": (_UPDATES, lambda row: 2, "spread", _knowledge_update),
    "multi_session_reasoning": (
        _MULTI_SESSION,
        lambda row: len(row[1](random.Random(0))[0]),
        "spread",
        _multi_session,
    ),
    "preference_following": (
        _PREFERENCES,
        lambda row: 1,
        "early",
        lambda rng, cast, row, dates: _standing_rule(rng, cast, row, "preference_following"),
    ),
    "summarization": (
        _THREADS,
        lambda row: len(row[2]),
        "spread",
        lambda rng, cast, row, dates: _thread(rng, cast, row, dates, "summarization"),
    ),
    "temporal_reasoning": (_TEMPORAL, lambda row: 2, "spread", _temporal),
}
# event ordering and summarization split the threads between them
MAX_QUESTIONS_PER_ABILITY = min(len(_THREADS) // 2, *(len(kinds) for kinds, *_ in _PLANTERS.values()))


# ---------------------------------------------------------------------------------------------- layout
@dataclass(frozen=True)
class Layout:
    """Turn sizes, first message id per turn, batch boundaries (in turns) and session dates."""

    sizes: list[int]
    first_ids: list[int]
    batch_starts: list[int]  # turn index where each batch starts, plus the total number of turns
    dates: list[dt.date]

    def batch_of(self, turn: int) -> int:
        return bisect.bisect_right(self.batch_starts, turn) - 1


def _layout(rng: random.Random, n_messages: int) -> Layout:
    target = n_messages + n_messages % 2  # turns hold pairs of messages
    sizes, total = [], 0
    while total < target:
        size = min(rng.choices((2, 4, 6), weights=(85, 12, 3))[0], target - total)
        sizes.append(size)
        total += size
    n_batches = min(len(sizes), max(3, round(target / MESSAGES_PER_BATCH)))
    starts = [round(b * len(sizes) / n_batches) for b in range(n_batches + 1)]
    max_step = max(1, min(21, 3650 // n_batches))  # sessions days to weeks apart, ten years at most
    day = dt.date(2023, 1, 2) + dt.timedelta(days=rng.randint(0, 365))
    dates = []
    for _ in range(n_batches):
        dates.append(day)
        day += dt.timedelta(days=rng.randint(max(1, max_step // 3), max_step))
    first_ids = list(itertools.accumulate(sizes, initial=0))[:-1]
    return Layout(sizes, first_ids, starts, dates)


def _place(rng: random.Random, layout: Layout, taken: bytearray, n_slots: int, rule: str) -> list[int]:
    """Pick free turns for a plant's evidence, in distinct batches where there are enough, in order."""
    n_batches = len(layout.dates)
    hi = max(1, math.ceil(0.6 * n_batches)) if rule == "early" else n_batches
    pool = range(hi)
    batches = sorted(rng.sample(pool, n_slots) if n_slots <= len(pool) else rng.choices(pool, k=n_slots))
    turns = []
    for b in batches:
        start, end = layout.batch_starts[b], layout.batch_starts[b + 1]
        candidates = [rng.randrange(start, end) for _ in range(30)] if end > start else []
        turn = next((t for t in candidates if not taken[t]), None)
        if turn is None:
            turn = next(
                (t for t in itertools.chain(range(start, end), range(len(taken))) if not taken[t]), None
            )
        if turn is None:
            raise ValueError("conversation too short for the requested questions; ask for more messages")
        taken[turn] = 1
        turns.append(turn)
    return sorted(turns)


def _plant_all(
    rng: random.Random, cast: dict, layout: Layout, per_ability: int
) -> tuple[dict[int, tuple[str, str]], dict[str, list[dict]]]:
    taken = bytearray(len(layout.sizes))
    evidence: dict[int, tuple[str, str]] = {}
    questions: dict[str, list[dict]] = {}
    threads = rng.sample(
        range(len(_THREADS)), len(_THREADS)
    )  # event ordering and summarization never share one
    for ability in ABILITIES:
        kinds, slots, rule, render = _PLANTERS[ability]
        if ability in ("event_ordering", "summarization"):
            half = len(threads) // 2
            picks = threads[:half] if ability == "event_ordering" else threads[half:]
            if per_ability > len(picks):
                raise ValueError(f"at most {len(picks)} {ability} questions per conversation")
            chosen = [kinds[i] for i in picks[:per_ability]]
        else:
            chosen = rng.sample(kinds, per_ability)
        questions[ability] = []
        for row in chosen:
            turns = _place(rng, layout, taken, slots(row), rule)
            plant = render(rng, cast, row, [layout.dates[layout.batch_of(t)] for t in turns])
            for turn, user, reply in zip(turns, plant.user_texts, plant.reply_texts, strict=True):
                evidence[turn] = (user, reply)
            questions[ability].append(plant.question([layout.first_ids[t] for t in turns]))
    return evidence, questions


# ---------------------------------------------------------------------------------------------- writing
def _batch(
    rng: random.Random,
    cast: dict,
    layout: Layout,
    b: int,
    main_topic: str,
    evidence: dict[int, tuple[str, str]],
) -> dict[str, Any]:
    turns = []
    for k, t in enumerate(range(layout.batch_starts[b], layout.batch_starts[b + 1]), 1):
        topic = main_topic if rng.random() < 0.5 else rng.choice(TOPICS)
        values = {**cast, **_numbers(rng)}
        user, reply = evidence.get(t) or (_filler_user(rng, topic, values), _filler_reply(rng, topic, values))
        mid = layout.first_ids[t]
        first: dict[str, Any] = {"role": "user", "id": mid}
        if k == 1:
            first["time_anchor"] = f"{layout.dates[b]:%B-%d-%Y}"
        first |= {
            "index": f"{b + 1},{k}",
            "question_type": "main_question",
            "content": f"{user} ->-> {b + 1},{k}",
        }
        turn = [first, {"role": "assistant", "id": mid + 1, "content": reply}]
        for extra in range(1, layout.sizes[t] // 2):
            kind = "answer_ai_question" if rng.random() < 0.4 else "followup_question"
            follow = rng.choice(_FOLLOWUPS[topic]).format_map(values)
            turn.append({"role": "user", "id": mid + 2 * extra, "question_type": kind, "content": follow})
            answer = _filler_reply(rng, topic, values)
            turn.append({"role": "assistant", "id": mid + 2 * extra + 1, "content": answer})
        turns.append(turn)
    return {"batch_number": b + 1, "turns": turns, "time_anchor": None}


_TOPIC_CARDS = {
    "coding": (
        "Coding",
        "Building {project}, a web app in Python and {lib}",
        "Designing, testing and deploying a small {lib} application backed by {db}",
    ),
    "finance": (
        "Financial Investment",
        "Getting personal finances in order",
        "Budgeting, an emergency fund at {bank} and first steps in investing",
    ),
    "travel": (
        "Travel Planning",
        "Planning a trip to {city} and {city2}",
        "Itineraries, budgets and logistics abroad",
    ),
    "health": (
        "Health & Wellness",
        "Training for {sport} without injury",
        "Sustainable training, recovery and habits",
    ),
    "writing": (
        "Writing Assistant & Learning",
        "Writing the novel '{title}'",
        "Drafting, revising and querying a first novel about {character}",
    ),
}


def _write_conversation(folder: Path, number: int, seed: int, n_messages: int, per_ability: int) -> int:
    rng = random.Random(f"beam_synth:{seed}:{number}")  # str seeds hash with sha512: stable across processes
    cast = _cast(rng)
    main_topic = rng.choice(TOPICS)
    layout = _layout(rng, n_messages)
    evidence, questions = _plant_all(rng, cast, layout, per_ability)
    (folder / "probing_questions").mkdir(parents=True, exist_ok=True)
    with open(folder / "chat.json", "w", encoding="utf-8") as out:  # one batch in memory at a time
        out.write("[\n")
        for b in range(len(layout.dates)):
            text = json.dumps(_batch(rng, cast, layout, b, main_topic, evidence), indent=2)
            out.write(("" if b == 0 else ",\n") + "  " + text.replace("\n", "\n  "))
        out.write("\n]")
    with open(folder / "probing_questions" / "probing_questions.json", "w", encoding="utf-8") as out:
        json.dump(questions, out, indent=4)
    category, title, theme = _TOPIC_CARDS[main_topic]
    topic = {
        "id": number,
        "category": category,
        "title": title.format_map(cast),
        "theme": theme.format_map(cast),
        "subtopics": [s.format_map(cast) for s in _STEPS[main_topic]],
    }
    with open(folder / "topic.json", "w", encoding="utf-8") as out:
        json.dump(topic, out, indent=4)
    return sum(layout.sizes)


def generate(
    out_dir: Path,
    n_conversations: int = 1,
    messages_per_conversation: int = 300,
    seed: int = 0,
    questions_per_ability: int = 2,
) -> list[Path]:
    """Write conversations `out_dir/1 .. out_dir/n` in BEAM's layout; return their folders."""
    if n_conversations < 1 or messages_per_conversation < 2:
        raise ValueError("need at least one conversation of at least two messages")
    if not 1 <= questions_per_ability <= MAX_QUESTIONS_PER_ABILITY:
        raise ValueError(f"questions_per_ability must be between 1 and {MAX_QUESTIONS_PER_ABILITY}")
    folders = []
    for number in range(1, n_conversations + 1):
        folder = Path(out_dir) / str(number)
        _write_conversation(folder, number, seed, messages_per_conversation, questions_per_ability)
        folders.append(folder)
    return folders


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Write synthetic BEAM-format conversations with planted evidence."
    )
    parser.add_argument("out", type=Path, help="output folder (conversations go to OUT/1, OUT/2, ...)")
    parser.add_argument("--conversations", type=int, default=1)
    parser.add_argument("--messages", type=int, default=300, help="messages per conversation")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--questions-per-ability", type=int, default=2)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        folders = generate(args.out, args.conversations, args.messages, args.seed, args.questions_per_ability)
    except ValueError as err:
        print(f"beam_synth: {err}", file=sys.stderr)
        return 2
    for folder in folders:
        size = sum(f.stat().st_size for f in folder.rglob("*.json"))
        print(
            f"wrote {folder}: chat.json, probing_questions/probing_questions.json, topic.json "
            f"({size / 1e6:.1f} MB)"
        )
    print(
        f"{len(folders)} conversation(s) of ~{args.messages} messages, seed {args.seed}, "
        f"{time.perf_counter() - start:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
