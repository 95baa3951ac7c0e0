"""Prompt sets perfwarden writes itself (no external dataset, no tokenizer).

Three sets, all pure functions of their arguments (a seed where there is randomness), so two legs, two
sessions or a resumed run send exactly the same prompts:

- **varied**: several dozen hand-written natural-language prompts of very different lengths, the
  realistic mix for throughput/latency legs (short chat turns next to long instructions);
- **random words**: prompts made of words drawn from a fixed vocabulary with a seeded RNG, at target
  lengths (sglang's ``random`` dataset without a tokenizer: lengths are in *words*, so the token
  count the server sees is only approximately the target -- the server's ``usage`` is the truth);
- **parity**: a fixed subset of the varied prompts, chosen once by id, for the greedy-output parity
  dump (``outputs.jsonl``). It never depends on a seed, so baseline and candidate dump the same ids.

``estimate_tokens`` is the fallback input length when a server does not report ``usage``; it is an
estimate and every record that uses it says so.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

PromptSource = Literal["varied", "random_words"]


@dataclass(frozen=True)
class Prompt:
    """One prompt of a set, with a stable id so outputs and records can be joined across legs."""

    id: str
    """Stable identifier: ``v00``..``vNN`` for the varied set, ``r<seed>-<i>`` for random words."""
    text: str
    """The prompt text sent as the completion ``prompt``."""
    source: PromptSource
    """Which generator made it."""

    @property
    def est_tokens(self) -> int:
        """Rough input token count (see :func:`estimate_tokens`); the server's usage overrides it."""
        return estimate_tokens(self.text)


def estimate_tokens(text: str) -> int:
    """Estimate a BPE token count without a tokenizer: about 4 characters per token for English.

    Used only when the server reports no ``usage.prompt_tokens``; records built from it are marked
    ``estimate`` so nobody mistakes it for a measured count.
    """
    return max(1, round(len(text) / 4))


# ------------------------------------------------------------------------------------------ varied

# Hand-written, deliberately uneven: one-line questions, mid-size instructions, and long multi-part
# requests, across topics, so prefill lengths and answer lengths both vary.
_VARIED_TEXTS: tuple[str, ...] = (
    "What is the capital of France?",
    "Name three primary colors.",
    "Translate 'good morning' into Spanish.",
    "How many legs does a spider have?",
    "Give me a synonym for 'happy'.",
    "What is 17 multiplied by 23?",
    "Who wrote the play Romeo and Juliet?",
    "Define the word 'photosynthesis' in one sentence.",
    "List the planets of the solar system in order from the sun.",
    "Write a haiku about the first snow of winter falling on a quiet city street.",
    "Explain why the sky looks blue during the day but red and orange at sunset.",
    "Suggest a name for a small bakery that specializes in sourdough bread and cinnamon rolls.",
    "What are the main differences between a virus and a bacterium? Answer briefly.",
    "Write a short, polite email declining an invitation to a meeting on Friday afternoon.",
    "Describe how a bicycle converts the rider's pedaling into forward motion.",
    "Give two tips for keeping houseplants alive during a dry winter.",
    "Summarize the plot of a story in which a lighthouse keeper finds a message in a bottle.",
    "Why do we have leap years? Keep the answer under fifty words.",
    "Write a Python function that returns the largest number in a list without using max().",
    "Explain the difference between weather and climate to a ten-year-old.",
    "What should a beginner know before running their first five-kilometre race?",
    "Compose a limerick about a cat who is afraid of cucumbers.",
    "Describe the water cycle, including evaporation, condensation, precipitation and collection.",
    "Give me a simple recipe for pancakes that uses flour, milk, eggs and a pinch of salt.",
    "A train leaves the station at 3 pm travelling at 80 kilometres per hour. A second train leaves"
    " the same station at 4 pm on the same track travelling at 100 kilometres per hour. At what time"
    " does the second train catch up with the first? Show your reasoning step by step.",
    "You are a tour guide in Rome. A family with two young children has one free afternoon and"
    " wants to see something memorable without walking more than three kilometres in total. Plan"
    " their afternoon, including where to stop for ice cream and how long to spend at each place.",
    "Read the following note and list every task it mentions, one per line: 'Before Thursday please"
    " renew the parking permit, call the plumber about the kitchen sink, buy birthday candles for"
    " Maya, return the library books that are overdue, and remind Sam to send the invoice.'",
    "Explain, for an audience of new software engineers, what a race condition is, give a small"
    " example involving two threads incrementing a shared counter, and describe two different ways"
    " to prevent it.",
    "Write the opening paragraph of a mystery novel set on a night train crossing the mountains in"
    " winter, where the narrator notices that one passenger never seems to cast a reflection in the"
    " dark windows.",
    "Compare renting and buying a home. Consider up-front costs, monthly costs, flexibility,"
    " maintenance responsibilities and long-term financial effects, and end with one sentence of"
    " advice for a young couple who may move cities within three years.",
    "A customer writes: 'I ordered a blue kettle two weeks ago, the tracking page has not updated"
    " for six days, and nobody answers the phone.' Draft a reply from the support team that"
    " apologizes, explains the next steps and offers a concrete remedy.",
    "Describe the life cycle of a star like our sun, from the collapse of a gas cloud to its final"
    " state, in about one hundred words.",
    "What is the difference between a list and a tuple in Python, and when would you choose one"
    " over the other?",
    "Give three arguments for and three arguments against allowing phones in secondary school"
    " classrooms.",
    "Write a short dialogue between a robot that has just learned to paint and the museum curator"
    " who must decide whether to hang its first painting.",
    "Explain what compound interest is and calculate how much 1,000 euros grows to after three years"
    " at five percent interest compounded yearly.",
    "The meeting notes below are messy. Rewrite them as a clean summary with a heading, three bullet"
    " points of decisions and a list of owners with deadlines. Notes: 'ok so we agreed launch moves"
    " to march, priya owns the beta list (end of jan), marketing budget stays flat unless the pilot"
    " beats 5 percent conversion, tom checks legal on the new terms by feb 10, next sync in two"
    " weeks, maybe invite finance.'",
    "Tell me about the history of the printing press and how it changed the spread of ideas in"
    " Europe during the fifteenth and sixteenth centuries.",
    "Which is heavier, a kilogram of feathers or a kilogram of iron? Explain the trick in the"
    " question.",
    "Invent a board game for four players that can be learned in five minutes. Describe the board,"
    " the pieces, how a turn works, and how someone wins.",
    "Outline a one-week study plan for a student preparing for a high-school chemistry exam that"
    " covers atomic structure, chemical bonding, stoichiometry and acids and bases. Include short"
    " daily review sessions and one full practice test.",
    "Explain how a refrigerator keeps food cold, mentioning the refrigerant, the compressor, the"
    " condenser coils and the evaporator.",
    "Write a product description for a waterproof hiking backpack with a 30-litre capacity, a"
    " padded laptop sleeve and adjustable shoulder straps.",
    "What are the rules of chess for how a knight moves, and why is the knight useful in crowded"
    " positions?",
    "Describe a calm morning at a fishing harbour using all five senses.",
    "Continue the sequence and explain the pattern: 2, 6, 12, 20, 30, ...",
    "A small town wants to reduce traffic near its primary school at drop-off time. Propose four"
    " measures, estimate the cost of each as low, medium or high, and say which one you would try"
    " first and why. Consider parents who must drive, children who walk, and the bus schedule.",
    "Why is it important to wash your hands with soap, and how long should you scrub?",
    "You are helping a volunteer group that runs a community garden. They have twenty raised beds,"
    " a shed with shared tools, a rain-water tank that runs dry every August, and about thirty members"
    " who visit at very different times. Last year tools went missing, two beds were abandoned in"
    " June, and people argued about who could use the compost. Write a set of simple house rules,"
    " no more than ten, that address these problems fairly. Then write a short friendly message"
    " that introduces the rules to the members, explains why each of the three problems matters,"
    " and invites them to suggest changes at the next monthly meeting. Keep the tone warm and avoid"
    " sounding like a landlord.",
    "Below is a description of a small program. Explain what it does, point out any bugs, and"
    " suggest improvements. The program reads a text file line by line. For every line it splits"
    " the text on spaces, lowercases each word, and adds one to a counter for that word in a"
    " dictionary. When the file ends it sorts the dictionary items by count, prints the ten most"
    " common words with their counts, and then prints the total number of lines. The author says"
    " that punctuation sometimes makes the same word appear twice, that empty lines seem to add an"
    " empty-string word, and that the program is slow on a two-gigabyte log file. They also ask"
    " whether the sort is needed at all if only the top ten words are wanted.",
)

VARIED_PROMPTS: tuple[Prompt, ...] = tuple(
    Prompt(id=f"v{i:02d}", text=text, source="varied") for i, text in enumerate(_VARIED_TEXTS)
)

# Chosen once by hand to span short, medium and long prompts and several tasks (facts, arithmetic,
# code, rewriting, open generation). Fixed ids: changing this list changes every parity dump.
PARITY_IDS: tuple[str, ...] = (
    "v00", "v05", "v08", "v13", "v18", "v19", "v24", "v26", "v29", "v35", "v37", "v45",
)


def varied_prompts(n: int | None = None, seed: int | None = None) -> list[Prompt]:
    """The varied set, optionally shuffled with ``seed`` and cut to ``n`` prompts.

    ``seed=None`` keeps the fixed order, so a caller that wants the whole set in a stable order gets
    it without thinking about seeds. ``n`` larger than the set is an error rather than silent reuse:
    repeating a prompt inside a rep would hand a prefix cache free hits.
    """
    prompts = list(VARIED_PROMPTS)
    if seed is not None:
        random.Random(seed).shuffle(prompts)
    if n is None:
        return prompts
    if not 0 < n <= len(prompts):
        raise ValueError(f"n={n!r} must be in 1..{len(prompts)} (the varied set has {len(prompts)} prompts)")
    return prompts[:n]


def parity_prompts() -> list[Prompt]:
    """The fixed parity subset (``PARITY_IDS``), in that order; no seed, by design."""
    by_id = {p.id: p for p in VARIED_PROMPTS}
    return [by_id[i] for i in PARITY_IDS]


# ------------------------------------------------------------------------------------ random words

# A fixed vocabulary of common lowercase English words. Never reorder or edit it: the words a seed
# produces depend on it.
VOCABULARY: tuple[str, ...] = tuple(dict.fromkeys("""
time year people way day man thing woman life child world school state family student group country
problem hand part place case week company system program question work government number night point
home water room mother area money story fact month lot right study book eye job word business issue
side kind head house service friend father power hour game line end member law car city community name
president team minute idea kid body information back parent face others level office door health
person art war history party result change morning reason research girl guy moment air teacher force
education foot boy age policy process music market sense nation plan college interest death experience
effect use class control care field development role effort rate heart drug show leader light voice
wife police mind price report decision son view relationship town road arm difference value building
action model season society tax director position player record paper space ground form event official
matter center couple site project activity star table need court oil situation cost industry figure
street image phone data picture practice piece land product doctor wall patient worker news test movie
north love support technology step baby computer type attention film tree source organization hair
window evidence population truth song river green quiet bright small large old new early late quick
slow warm cold heavy light simple clear open strong soft round flat deep high low long short young
""".split()))  # dict.fromkeys: drop repeats, keep first-seen order


def random_word_text(n_words: int, rng: random.Random) -> str:
    """``n_words`` words drawn uniformly (with replacement) from ``VOCABULARY``, space-separated."""
    if n_words < 1:
        raise ValueError(f"n_words={n_words!r} must be >= 1")
    return " ".join(rng.choice(VOCABULARY) for _ in range(n_words))


def random_word_lengths(n: int, input_len: int, range_ratio: float = 0.0, seed: int = 0) -> list[int]:
    """Target lengths in words, drawn like sglang's random dataset: uniform integers in
    ``[max(1, int(input_len * range_ratio)), input_len]`` (``range_ratio=1`` gives fixed lengths).

    Its own RNG stream (seeded from ``seed``) so the lengths do not shift when the vocabulary draw
    changes, and vice versa.
    """
    if n < 1 or input_len < 1:
        raise ValueError(f"n={n!r} and input_len={input_len!r} must both be >= 1")
    if not 0.0 <= range_ratio <= 1.0:
        raise ValueError(f"range_ratio={range_ratio!r} must be in [0, 1]")
    low = max(1, int(input_len * range_ratio))
    rng = random.Random(f"lengths:{seed}")
    return [rng.randint(low, input_len) for _ in range(n)]


def random_word_prompts(n: int, input_len: int, range_ratio: float = 0.0, seed: int = 0) -> list[Prompt]:
    """``n`` random-word prompts with target lengths from :func:`random_word_lengths`.

    Same arguments, same prompts, in any process (``random.Random`` with a string seed is stable
    across Python versions and does not depend on ``PYTHONHASHSEED``).
    """
    lengths = random_word_lengths(n, input_len, range_ratio, seed)
    rng = random.Random(f"words:{seed}")
    return [Prompt(id=f"r{seed}-{i}", text=random_word_text(k, rng), source="random_words")
            for i, k in enumerate(lengths)]
