"""The coherence calibration's prompt set: 32 short, varied English prompts written for this project.

``coherence_calibration.py record`` sends each to every model it records, and ``coherence_samples.json``
names each answer's prompt by its ``id`` (never reuse or renumber one). Prompts are unique (a duplicate
would let a response cache look like a speedup).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PromptKind = Literal["question", "instruction", "creative", "explain", "list", "code", "math", "rewrite"]


@dataclass(frozen=True)
class Prompt:
    """One prompt of the set."""

    id: str
    """Stable id, ``p01`` ... (recorded outputs refer to it)."""
    kind: PromptKind
    """What sort of answer the prompt invites."""
    text: str
    """The user message (chat) or the raw prompt (completions)."""


PROMPTS: tuple[Prompt, ...] = (
    Prompt("p01", "question", "Why do leaves change color in the autumn?"),
    Prompt("p02", "explain", "Explain in two sentences how a bicycle stays upright while moving."),
    Prompt("p03", "instruction", "Write a short thank-you note to a neighbor who watered my plants."),
    Prompt("p04", "list", "List three things to pack for a weekend camping trip."),
    Prompt("p05", "question", "What does a lighthouse keeper do?"),
    Prompt("p06", "creative", "Begin a story about a cat who finds a key under the kitchen sink."),
    Prompt("p07", "explain", "Describe what happens to water when it boils."),
    Prompt("p08", "code", "Write a Python function that returns the largest number in a list."),
    Prompt("p09", "math", "If a train travels 60 miles in one hour, how far does it go in three hours?"),
    Prompt("p10", "rewrite", "Rewrite this sentence more politely: Give me the report now."),
    Prompt("p11", "question", "What are the main differences between a lake and a river?"),
    Prompt("p12", "instruction", "Give me some advice for sleeping better at night."),
    Prompt("p13", "explain", "How does a refrigerator keep food cold?"),
    Prompt("p14", "list", "Name four common vegetables that grow underground."),
    Prompt("p15", "creative", "Write a two-line poem about the morning sun."),
    Prompt("p16", "question", "Why is it important to drink enough water every day?"),
    Prompt("p17", "explain", "What is the purpose of a library in a small town?"),
    Prompt("p18", "instruction", "Explain to a child how to cross the street safely."),
    Prompt("p19", "code", "What does the word 'variable' mean in programming?"),
    Prompt("p20", "math", "What is the sum of the numbers from one to ten?"),
    Prompt("p21", "rewrite", "Summarize in one sentence: The meeting was moved from Monday to Thursday "
           "because the manager was travelling, and everyone agreed the new date was better."),
    Prompt("p22", "question", "How do bees help flowers and farmers?"),
    Prompt("p23", "creative", "Describe a busy market on a Saturday morning."),
    Prompt("p24", "explain", "Why do we have different seasons during the year?"),
    Prompt("p25", "instruction", "Suggest a simple recipe for a healthy breakfast."),
    Prompt("p26", "list", "What are three good habits for studying for an exam?"),
    Prompt("p27", "question", "What is the job of the heart in the human body?"),
    Prompt("p28", "explain", "Tell me briefly how a letter travels from one city to another by post."),
    Prompt("p29", "creative", "Write the opening line of a letter from a sailor to his family."),
    Prompt("p30", "question", "Why should people recycle paper and plastic?"),
    Prompt("p31", "instruction", "How should I prepare for a job interview?"),
    Prompt("p32", "explain", "What makes a good friend?"),
)
"""The prompt set, in id order."""

