"""Where "no semantic evidence" ends for an embedder: its cosine on unrelated text.

Cosines are not comparable across models: MiniLM puts unrelated sentences near 0, e5
near 0.75, the hash embedder somewhere in between depending on shared character
n-grams. ``measure_floor`` embeds small talk and off-topic requests as queries and
personal facts as memories (no pair shares a topic), and returns a high quantile of
their cosines: above it, a similarity is evidence; at or below it, noise.
"""

from __future__ import annotations

import numpy as np

from memproxy.index.embedders.base import Embedder

UNRELATED_QUERIES = (
    "hi", "hello there", "hey!", "good morning", "thanks!", "thank you so much", "ok", "okay cool",
    "lol", "bye for now", "yes please", "no", "sounds good", "how are you?", "what's up",
    "nice, go on", "can you say that again?", "never mind", "great job", "hmm",
    "what is the boiling point of water at sea level", "explain how quicksort works",
    "translate 'good night' into Japanese", "write a limerick about a penguin",
    "what is 17 times 23", "summarize the plot of Hamlet", "how do vaccines train the immune system",
    "convert 5 miles to kilometres", "who painted the Mona Lisa", "what causes the northern lights",
)  # fmt: skip

UNRELATED_FACTS = (
    "User's daughter Mia was born in 2019.", "User works as a nurse at a children's clinic.",
    "User is allergic to peanuts.", "User drives a blue Volvo estate.",
    "User's favourite band is Radiohead.", "User lives in a flat in Lisbon.",
    "User plays the cello on weekends.", "User's manager is called Priya.",
    "User is training for the Berlin marathon.", "User prefers green tea to coffee.",
    "User's cat is named Biscuit.", "User is learning Portuguese on an app.",
    "User's sister Joana is a dentist in Porto.", "User is saving up for a sailing boat.",
    "User's rent is due on the first of each month.", "User uses a standing desk at work.",
    "User's team ships releases on Thursdays.", "User is vegetarian since 2015.",
    "User's flight to Toronto is booked for June.", "User keeps bees in the back garden.",
)  # fmt: skip

FLOOR_QUANTILE = 0.98


async def measure_floor(embedder: Embedder, quantile: float = FLOOR_QUANTILE) -> float:
    """The ``quantile`` of cosines between unrelated queries and facts in ``embedder``'s space."""
    queries = await embedder.embed(list(UNRELATED_QUERIES), query=True)
    facts = await embedder.embed(list(UNRELATED_FACTS))
    cosines = (queries @ facts.T).ravel()
    return float(np.quantile(cosines, quantile))
