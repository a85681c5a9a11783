"""Build the retrieval benchmark's dataset: ``conversations.jsonl`` and ``questions.jsonl``.

Deterministic (a fixed seed, no model): ``python bench/data/retrieval/generate.py`` rewrites
both files byte for byte. Six people talk to an assistant over six dated sessions each.
Every turn (user and assistant) is one memory. Facts are stated once in passing between
unrelated requests and topical small talk (hard negatives that share the topic's words),
some change later (a move, a new car), and some need two turns to answer.

Question types, each with the ids of the turns that answer it (``evidence``):
- ``single-hop``: asks for one stated fact in words close to the statement;
- ``paraphrase``: the same fact asked with no content word in common with its turn
  (checked here: the script fails if a paraphrase shares a non-stopword with its evidence);
- ``multi-hop``: needs two turns (e.g. the sister's name, then what the sister did);
- ``temporal``: a fact that changed: what was true before, what is true now;
- ``no-answer``: about the person, but never said (evidence empty);
- ``small-talk``: greetings and thanks (evidence empty; nothing should be injected).

``python bench/data/retrieval/generate.py --hard`` writes the harder variant into ``hard/``:
the same people and questions, but each conversation runs over twelve sessions and also
tells the other five people's facts as news about friends, colleagues and family ("My
flatmate Maya is allergic to peanuts"): 105 near-miss statements per conversation that
share each question's topic, wording and sentence shape, and that lexical and semantic
search both rank close to the user's own fact. The original stays the default dataset.
"""

from __future__ import annotations

import json
import random
import re
import sys
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
STOP = set(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most my
    myself no nor not now of off on once only or other our ours ourselves out over own same she should so
    some such than that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with would you your
    yours yourself yourselves s t""".split()
)

PEOPLE = [
    dict(job="pediatric nurse", company="Santa Maria Hospital", old_city="Coimbra", new_city="Lisbon",
         pet_kind="beagle", pet_name="Pepper", sister="Joana", sister_job="dentist", sister_city="Porto",
         fiance="Duarte", allergen="shellfish", instrument="cello", race="Lisbon half marathon",
         race_month="October", old_car="Renault Clio", new_car="Tesla Model 3", diet="vegetarian",
         diet_year="2015", partner="Tiago", partner_job="firefighter", partner_company="the Alfama fire station",
         kid="Leo", kid_word="son", kid_age="seven", kid_hobby="chess", destination="Japan",
         trip_month="April", medication="metformin", condition="blood sugar", dish="bacalhau à brás",
         language="Japanese", manager="Rui", office="Madrid", bday="March 3",
         system="patient records system", target="the cloud", drink="green tea",
         book="Blindness by Saramago", veg="cherry tomatoes"),
    dict(job="data engineer", company="Northwind Analytics", old_city="Ottawa", new_city="Toronto",
         pet_kind="tabby cat", pet_name="Miso", sister="Maya", sister_job="lawyer", sister_city="Vancouver",
         fiance="Owen", allergen="peanuts", instrument="trumpet", race="Toronto Waterfront 10K",
         race_month="September", old_car="Honda Civic", new_car="Subaru Outback", diet="vegan",
         diet_year="2019", partner="Sarah", partner_job="radiologist", partner_company="Sunnybrook",
         kid="Emma", kid_word="daughter", kid_age="five", kid_hobby="ice skating", destination="Iceland",
         trip_month="February", medication="levothyroxine", condition="thyroid", dish="poutine",
         language="Icelandic", manager="Megan", office="Montreal", bday="July 21",
         system="billing pipeline", target="Kubernetes", drink="oat flat whites",
         book="Station Eleven", veg="kale"),
    dict(job="chemistry teacher", company="Lindenberg Gymnasium", old_city="Leipzig", new_city="Berlin",
         pet_kind="parrot", pet_name="Kiwi", sister="Lena", sister_job="photographer", sister_city="Hamburg",
         fiance="Mats", allergen="eggs", instrument="violin", race="Berlin marathon",
         race_month="September", old_car="VW Golf", new_car="Skoda Enyaq", diet="pescatarian",
         diet_year="2012", partner="Jonas", partner_job="carpenter", partner_company="a furniture workshop in Kreuzberg",
         kid="Felix", kid_word="son", kid_age="nine", kid_hobby="the piano", destination="Morocco",
         trip_month="May", medication="an inhaler", condition="asthma", dish="käsespätzle",
         language="Arabic", manager="Klaus", office="Vienna", bday="November 9",
         system="school grading portal", target="a new database", drink="mate",
         book="The Magic Mountain", veg="strawberries"),
    dict(job="architect", company="Studio Arco", old_city="Chennai", new_city="Bangalore",
         pet_kind="golden retriever", pet_name="Bruno", sister="Priya", sister_job="pharmacist", sister_city="Pune",
         fiance="Arjun", allergen="tree nuts", instrument="tabla", race="Mumbai ultra trail",
         race_month="December", old_car="Maruti Swift", new_car="Hyundai Creta", diet="vegetarian",
         diet_year="2008", partner="Ravi", partner_job="civil engineer", partner_company="the metro rail project",
         kid="Anika", kid_word="daughter", kid_age="eleven", kid_hobby="robotics", destination="Vietnam",
         trip_month="January", medication="lisinopril", condition="blood pressure", dish="masala dosa",
         language="Vietnamese", manager="Sunita", office="Singapore", bday="January 30",
         system="client drawing archive", target="a shared drive", drink="chai",
         book="The God of Small Things", veg="chillies"),
    dict(job="veterinarian", company="Happy Paws Clinic", old_city="Valencia", new_city="Madrid",
         pet_kind="rabbit", pet_name="Clover", sister="Lucia", sister_job="journalist", sister_city="Seville",
         fiance="Marco", allergen="gluten", instrument="flamenco guitar", race="Madrid cycling sportive",
         race_month="June", old_car="Seat Ibiza", new_car="Toyota Yaris hybrid", diet="flexitarian",
         diet_year="2020", partner="Pablo", partner_job="chef", partner_company="a tapas bar in Lavapiés",
         kid="Mateo", kid_word="son", kid_age="four", kid_hobby="swimming", destination="Peru",
         trip_month="August", medication="iron supplements", condition="anemia", dish="paella",
         language="Quechua", manager="Carmen", office="Lisbon", bday="August 14",
         system="appointment scheduler", target="a mobile app", drink="matcha",
         book="One Hundred Years of Solitude", veg="courgettes"),
    dict(job="airline pilot", company="Blue Crest Airways", old_city="Leeds", new_city="Manchester",
         pet_kind="border collie", pet_name="Rex", sister="Amira", sister_job="journalist", sister_city="Glasgow",
         fiance="Callum", allergen="sesame", instrument="drums", race="Great North Run",
         race_month="September", old_car="Ford Fiesta", new_car="Kia Niro", diet="vegan",
         diet_year="2021", partner="Hannah", partner_job="midwife", partner_company="Saint Mary's maternity unit",
         kid="Zara", kid_word="daughter", kid_age="six", kid_hobby="horse riding", destination="New Zealand",
         trip_month="November", medication="sertraline", condition="anxiety", dish="fish and chips",
         language="Maori", manager="Gareth", office="Dublin", bday="October 2",
         system="crew rostering tool", target="SAP", drink="decaf espresso",
         book="Wolf Hall", veg="potatoes"),
]  # fmt: skip


@dataclass
class Fact:
    """A fact stated in one user turn, answered by ``reply``; its questions."""

    key: str
    statement: str
    reply: str
    direct: str
    paraphrase: str


FACTS = [
    Fact("job", "Big news: I started a new job as a {job} at {company} this week.",
         "Congratulations on the new role! The first weeks are always a lot to take in.",
         "What new job did I start?", "What do I do for a living these days?"),
    Fact("city", "I grew up in {old_city} and I still live there for now.",
         "It sounds like a place you know inside out.",
         "Where did I grow up?", "What is my hometown?"),
    Fact("pet", "We adopted a {pet_kind} called {pet_name} from the shelter on Saturday.",
         "How lovely! Shelter animals often settle in within a few weeks.",
         "What is the name of the {pet_kind} we adopted?", "What did we name the animal that joined our household?"),
    Fact("sister", "My sister {sister} works as a {sister_job} in {sister_city}.",
         "That's a demanding job; she must be busy.",
         "What does my sister do for work?", "What is my sibling's profession?"),
    Fact("allergy", "Just a reminder for recipes: I'm allergic to {allergen}.",
         "Noted, I'll flag recipes that could be a problem for you.",
         "What am I allergic to?", "Which food gives me a bad reaction?"),
    Fact("instrument", "On Saturdays I play {instrument} in a community band.",
         "Playing with others is such a good way to keep practising.",
         "What instrument do I play?", "What music do I make in my free time?"),
    Fact("race", "I signed up for the {race} in {race_month}, so training starts now.",
         "Exciting! A gradual plan with one long session a week works well.",
         "Which race did I sign up for?", "What athletic event am I preparing for?"),
    Fact("car", "My old {old_car} keeps breaking down on the motorway.",
         "That's frustrating. A mechanic's inspection might tell you if it's worth fixing.",
         "Which car keeps breaking down?", "What vehicle has been unreliable lately?"),
    Fact("diet", "I've been {diet} since {diet_year}.",
         "That's a long time; you must have a good repertoire of recipes by now.",
         "Since when have I been {diet}?", "Do I eat meat?"),
    Fact("partner", "My partner {partner} is a {partner_job}.",
         "That sounds like meaningful work, with long shifts I imagine.",
         "What does my partner do?", "Who is my significant other?"),
    Fact("kid", "Our {kid_word} {kid} turns {kid_age} in May.",
         "Time flies! Are you planning a party?",
         "When does {kid} have a birthday?", "What is my child called?"),
    Fact("trip", "We booked flights to {destination} for {trip_month}!",
         "Wonderful, that will be an adventure. I can help with an itinerary later.",
         "Where did we book flights to?", "Where are we going on holiday?"),
    Fact("medication", "My doctor put me on {medication} for my {condition}.",
         "I hope it helps. Do follow up if you notice side effects.",
         "What did my doctor put me on?", "Which prescription am I taking?"),
    Fact("dish", "Honestly my all-time favourite dish is {dish}.",
         "A classic choice, hard to beat when it is done well.",
         "What is my favourite dish?", "What do I love to eat most?"),
    Fact("language", "I'm learning {language} with an app every morning before breakfast.",
         "Daily practice is the best way; even ten minutes adds up.",
         "Which language am I learning?", "What foreign tongue am I studying?"),
    Fact("manager", "My manager {manager} wants the quarterly report by Friday.",
         "Deadlines like that are easier with an outline done early in the week.",
         "Who is my manager?", "Who's my boss?"),
    Fact("birthday", "My birthday is on {bday}, in case you need it for the booking form.",
         "Thanks, I'll use that for the form.",
         "When is my birthday?", "What date was I born?"),
    Fact("project", "At work I'm leading the migration of the {system} to {target}.",
         "Migrations like that go better in small, reversible steps.",
         "What migration am I leading?", "Which technical initiative am I in charge of?"),
    Fact("drink", "I switched from coffee to {drink} in the mornings.",
         "Good switch, gentler on the stomach too.",
         "What did I switch to from coffee?", "What's my usual beverage to start the day?"),
    Fact("book", "My book club picked {book} for this month.",
         "Great pick; it will give you plenty to discuss.",
         "Which book did my book club pick?", "What novel is my reading group discussing?"),
    Fact("garden", "I'm growing {veg} on the balcony this year.",
         "Balcony gardens can be surprisingly productive with enough sun.",
         "What am I growing on the balcony?", "Which crops am I cultivating at home?"),
]  # fmt: skip

# Said later: (key, user turn, assistant reply, [(type, question, evidence keys)]).
# Evidence keys name the facts' turns ("city") or this follow-up's own turn ("@").
FOLLOW_UPS = [
    ("move", "We finally moved from {old_city} to {new_city} last month.",
     "Congratulations on the move! Unpacking always takes longer than planned.",
     [("single-hop", "Which city did we move to?", ["@"]),
      ("temporal", "Where did I live before the move?", ["city", "@"]),
      ("temporal", "Which city do I live in now?", ["@"])]),
    ("new_car", "I sold the {old_car} and bought a {new_car}.",
     "Nice upgrade! Enjoy the new car.",
     [("temporal", "What car do I drive now?", ["@"]),
      ("temporal", "Which car did I have before the current one?", ["car", "@"])]),
    ("engaged", "{sister} just got engaged to {fiance}!",
     "How wonderful, congratulations to them both!",
     [("multi-hop", "Who is my sister engaged to?", ["sister", "@"])]),
    ("partner_work", "{partner} got a promotion at {partner_company}.",
     "That's great news, well deserved I'm sure.",
     [("multi-hop", "Where does my partner work?", ["partner", "@"])]),
    ("kid_hobby", "{kid} has been begging us to let him try {kid_hobby}.",
     "Kids' enthusiasm is great; a trial class could be a good start.",
     [("multi-hop", "What does my child want to try?", ["kid", "@"])]),
    ("manager_move", "{manager} is relocating to the {office} office next year.",
     "Big change for the team. Do you know who will take over?",
     [("multi-hop", "Which office is my boss moving to?", ["manager", "@"])]),
]  # fmt: skip

NO_ANSWER = [
    "What's my blood type?", "Which gym am I a member of?", "What is my favourite football team?",
    "What's my shoe size?", "What was the name of my first teacher?", "Which streaming service do I pay for?",
    "How many cousins do I have?", "What's my wifi password?", "Which bank do I use?",
    "What did I study at university?", "Do I have a tattoo?", "What's my dentist's name?",
]  # fmt: skip
SMALL_TALK = [
    "hey there", "cheers!", "alright", "good evening", "haha nice one", "how's it going?",
    "see you later", "perfect, thank you", "yep", "cool cool", "morning!", "great, thanks a lot",
]  # fmt: skip

# Unrelated requests and topical chatter: the haystack around the facts.
FILLER = [
    ("Can you give me a quick recipe for banana bread?",
     "Mash three ripe bananas, mix in melted butter, sugar, an egg and flour, then bake for an hour at 175°C."),
    ("How do I center a div in CSS?",
     "Make the parent a flex container with justify-content and align-items set to center."),
    ("Any tips for remembering people's names at parties?",
     "Repeat the name when you are introduced and link it to something about the person."),
    ("What's the difference between a virus and a bacterium?",
     "Bacteria are living cells that can reproduce on their own; viruses need a host cell to replicate."),
    ("Write a two-line poem about rain.", "Soft rain on the window pane, / the city hums its grey refrain."),
    ("How long should I boil an egg for a runny yolk?", "About six minutes from boiling water, then into cold water."),
    ("Can you explain what an index fund is?",
     "A fund that tracks a market index, like the S&P 500, holding all its stocks at low cost."),
    ("What's a polite way to decline a meeting?",
     "Thank them, say you can't make it, and offer an alternative time or ask for notes."),
    ("Recommend a podcast about history.", "Try 'The Rest Is History' or 'Hardcore History' for long deep dives."),
    ("How do I get red wine out of a carpet?", "Blot it, then apply cold water and a little dish soap; don't rub."),
    ("Is it better to stretch before or after a run?",
     "Dynamic warm-ups before, static stretches after tends to work best for most runners."),
    ("Help me name a fantasy football team.", "How about 'Net Gains', 'Kick Theory' or 'The Offside Trap'?"),
    ("What should I pack for a weekend of hiking?",
     "Layers, a rain jacket, sturdy shoes, water, snacks, a map and a small first aid kit."),
    ("Translate 'where is the train station' into French.", "Où est la gare ?"),
    ("My laptop fan is really loud, what can I do?",
     "Clean the vents, check which process is using the CPU, and keep it on a hard surface."),
    ("Suggest a board game for four adults.", "Ticket to Ride or Codenames are easy to learn and fun with four."),
    ("How often should I water a cactus?", "Every two to three weeks in summer, far less in winter."),
    ("Give me an idea for a cheap date night.", "A picnic at sunset with homemade sandwiches and a playlist."),
    ("What's a good stretch for a stiff neck?", "Slow chin tucks and gentle side tilts, holding each for twenty seconds."),
    ("Explain compound interest simply.", "You earn interest on your interest, so savings grow faster over time."),
    ("Can you proofread: 'Their going to the meeting tomorow'?", "They're going to the meeting tomorrow."),
    ("What's the capital of Australia?", "Canberra."),
    ("How do I make my sourdough starter more active?",
     "Feed it twice a day at room temperature with equal weights of flour and water."),
    ("Tips for sleeping better?", "Keep a regular schedule, a dark cool room and no screens in the last hour."),
]  # fmt: skip

# Topical chatter: shares a fact's topic words but does not state the fact.
CHATTER = {
    "pet": ("Do you think animals from shelters are harder to train?",
            "Not really; patience and routine matter more than where the animal came from."),
    "allergy": ("Are food allergies more common than they used to be?",
                "Diagnoses have risen in many countries over the last decades."),
    "race": ("How many kilometres a week should a beginner run?",
             "Twenty to thirty is plenty at first; increase by about ten percent a week."),
    "car": ("Is it worth buying an electric car these days?",
            "It depends on your charging options and how far you drive each day."),
    "trip": ("What's the best site to compare flight prices?",
             "Aggregators are good for searching; booking directly with the airline is often simpler."),
    "medication": ("Should I take pills with food?", "Many are easier on the stomach with food; check the leaflet."),
    "book": ("How do you run a good book club discussion?",
             "Prepare three open questions and let everyone speak before the host does."),
    "language": ("Which language is the hardest for English speakers?",
                 "Mandarin, Arabic, Japanese and Korean usually top those lists."),
    "job": ("How do you survive the first month at a new workplace?",
            "Ask lots of questions, take notes and learn who to go to for what."),
    "drink": ("How much caffeine is too much in a day?", "Around 400 mg, about four cups of coffee, for most adults."),
}  # fmt: skip


# Other people's facts, told as news about someone else: the hard variant's near misses.
# ``{who}`` is a friend's first name; the values come from another person in PEOPLE.
THIRD_PARTY = {
    "job": "My friend {who} just started as a {job} at {company}.",
    "city": "My cousin {who} grew up in {old_city} and never left.",
    "pet": "The neighbours adopted a {pet_kind} called {pet_name}, {who} told me.",
    "sister": "My colleague {who} has a sister who works as a {sister_job} in {sister_city}.",
    "allergy": "My flatmate {who} is allergic to {allergen}, so none of that at the party.",
    "instrument": "My friend {who} plays {instrument} in an orchestra.",
    "race": "My colleague {who} signed up for the {race} in {race_month}.",
    "car": "My brother-in-law {who} says his {old_car} keeps breaking down.",
    "diet": "My cousin {who} has been {diet} since {diet_year}.",
    "partner": "My friend {who}'s partner is a {partner_job}.",
    "kid": "My neighbour {who}'s {kid_word} {kid} turns {kid_age} soon.",
    "trip": "My parents and {who} booked flights to {destination} for {trip_month}.",
    "medication": "My uncle {who} was put on {medication} for his {condition}.",
    "dish": "My colleague {who} insists the best dish ever is {dish}.",
    "language": "My friend {who} is learning {language} at evening classes.",
    "manager": "My friend {who} complains that her manager {manager} micromanages everything.",
    "birthday": "My best friend {who} has a birthday on {bday}.",
    "project": "My old teammate {who} is migrating the {system} to {target}.",
    "drink": "My colleague {who} drinks {drink} all day long.",
    "book": "My mum and {who} are reading {book} for their book club.",
    "garden": "My neighbour {who} grows {veg} in her garden.",
}
THIRD_PARTY_REPLIES = {
    "job": "Good luck to {who} in the new role.",
    "city": "{who} must know that town well.",
    "pet": "Tell {who} I said the animal sounds adorable.",
    "sister": "That sounds like a busy family, {who}'s.",
    "allergy": "I'll keep {who}'s allergy in mind for the party menu.",
    "instrument": "An orchestra is a big commitment; {who} must practise a lot.",
    "race": "Wish {who} luck with the training.",
    "car": "Sounds like {who} needs a mechanic.",
    "diet": "{who} must be a good cook by now.",
    "partner": "Long shifts for {who}'s partner, I bet.",
    "kid": "Is {who} planning a party?",
    "trip": "That trip with {who} sounds fun.",
    "medication": "I hope the treatment works for {who}.",
    "dish": "{who} has good taste.",
    "language": "Evening classes are a good way to stay motivated, tell {who}.",
    "manager": "That sounds exhausting for {who}.",
    "birthday": "Will you get {who} a present?",
    "project": "Migrations are hard; I hope {who}'s goes smoothly.",
    "drink": "That is a lot of caffeine for {who}.",
    "book": "Your mum and {who} picked a good one.",
    "garden": "{who} must have a sunny garden.",
}
FRIENDS = ["Sofia", "Nadia", "Ingrid", "Tomás", "Kenji", "Aoife", "Bruna", "Yusuf", "Elif", "Marta",
           "Oskar", "Leila", "Nikhil", "Greta", "Dmitri", "Chloé", "Rafael", "Hana", "Kofi", "Irene",
           "Bjorn"]  # fmt: skip


@dataclass
class Conversation:
    cid: str
    start: date
    sessions: list[dict[str, object]] = field(default_factory=list)
    where: dict[str, str] = field(default_factory=dict)  # fact or follow-up key -> user turn id

    def session(self, n: int) -> dict[str, object]:
        while len(self.sessions) <= n:
            k = len(self.sessions)
            day = self.start + timedelta(days=17 * k)
            self.sessions.append({"id": f"{self.cid}-s{k + 1}", "date": day.isoformat(), "turns": []})
        return self.sessions[n]

    def say(self, n: int, user: str, assistant: str, key: str | None = None) -> None:
        session = self.session(n)
        turns: list[dict[str, str]] = session["turns"]  # type: ignore[assignment]
        for role, text in (("user", user), ("assistant", assistant)):
            turn_id = f"{session['id']}-t{len(turns) + 1}"
            turns.append({"id": turn_id, "role": role, "text": text})
            if key and role == "user":
                self.where[key] = turn_id


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"\w+", text.lower()) if w not in STOP}


def third_party(index: int, rng: random.Random) -> list[tuple[str, str, None]]:
    """The other people's facts as news about friends: (user turn, reply, no fact key)."""
    items = []
    for other, person in enumerate(PEOPLE):
        if other == index:
            continue
        for n, (key, template) in enumerate(THIRD_PARTY.items()):
            who = FRIENDS[(n + 3 * other) % len(FRIENDS)]
            reply = THIRD_PARTY_REPLIES[key].format(who=who)
            items.append((template.format(who=who, **person), reply, None))
    rng.shuffle(items)
    return items


def build(
    index: int, person: dict[str, str], rng: random.Random, hard: bool = False
) -> tuple[dict[str, object], list[dict[str, object]]]:
    cid = f"c{index + 1}"
    conv = Conversation(cid, date(2025, 1, 6) + timedelta(days=5 * index))
    facts = FACTS[:]
    rng.shuffle(facts)
    facts.remove(next(f for f in facts if f.key == "city"))
    facts.insert(0, next(f for f in FACTS if f.key == "city"))  # before the move
    filler = FILLER[:]
    rng.shuffle(filler)
    chatter = list(CHATTER.items())
    rng.shuffle(chatter)
    follow_ups = {key: (user, reply, qs) for key, user, reply, qs in FOLLOW_UPS}
    follow_order = ["move", "new_car", "engaged", "partner_work", "kid_hobby", "manager_move"]
    # Sessions 1-4 state the facts, 5-6 the changes and follow-ups; filler everywhere.
    # The hard variant adds six sessions of other people's news and spreads it over all twelve.
    news = third_party(index, rng) if hard else []
    sessions = 12 if hard else 6
    for n in range(sessions):
        items: list[tuple[str, str, str | None]] = []
        if n < 4:
            share = facts[n * len(facts) // 4 : (n + 1) * len(facts) // 4]
            items += [(f.statement.format(**person), f.reply, f.key) for f in share]
        elif n < 6:
            for key in follow_order[(n - 4) * 3 : (n - 3) * 3]:
                user, reply, _ = follow_ups[key]
                items.append((user.format(**person), reply, key))
        items += [(u, a, None) for u, a in filler[n * 4 : n * 4 + 4]]
        if n < 5:
            items += [(u, a, None) for _, (u, a) in chatter[n * 2 : n * 2 + 2]]
        items += news[n * len(news) // sessions : (n + 1) * len(news) // sessions]
        rng.shuffle(items)
        for user, reply, maybe_key in items:
            conv.say(n, user, reply, maybe_key)
    kid_pronoun = "him" if person["kid_word"] == "son" else "her"
    for session in conv.sessions:
        for turn in session["turns"]:  # type: ignore[attr-defined]
            turn["text"] = turn["text"].replace("let him try", f"let {kid_pronoun} try")
    questions: list[dict[str, object]] = []

    def ask(kind: str, text: str, evidence: list[str]) -> None:
        questions.append({"id": f"{cid}-q{len(questions) + 1}", "conversation": cid, "type": kind,
                          "question": text.format(**person), "evidence": evidence})  # fmt: skip

    for fact in FACTS:
        ask("single-hop", fact.direct, [conv.where[fact.key]])
        ask("paraphrase", fact.paraphrase, [conv.where[fact.key]])
    for key, _, _, qs in FOLLOW_UPS:
        for kind, text, keys in qs:
            ask(kind, text, [conv.where[key if k == "@" else k] for k in keys])
    for text in rng.sample(NO_ANSWER, 6):
        ask("no-answer", text, [])
    for text in rng.sample(SMALL_TALK, 4):
        ask("small-talk", text, [])
    return {"id": cid, "sessions": conv.sessions}, questions


def check(conversations: list[dict[str, object]], questions: list[dict[str, object]]) -> None:
    """Paraphrases share no content word with their evidence; ids resolve; texts are unique."""
    turns = {t["id"]: t["text"] for c in conversations for s in c["sessions"] for t in s["turns"]}  # type: ignore[attr-defined]
    problems = []
    for q in questions:
        for turn_id in q["evidence"]:  # type: ignore[attr-defined]
            if turn_id not in turns:
                problems.append(f"{q['id']}: unknown evidence {turn_id}")
            elif q["type"] == "paraphrase" and (shared := words(str(q["question"])) & words(turns[turn_id])):
                problems.append(f"{q['id']}: paraphrase shares {sorted(shared)} with {turns[turn_id]!r}")
    for c in conversations:
        texts = [t["text"] for s in c["sessions"] for t in s["turns"]]  # type: ignore[attr-defined]
        if len(texts) != len(set(texts)):
            problems.append(f"{c['id']}: repeated turn text")
    if problems:
        sys.exit("\n".join(problems))


def main() -> None:
    hard = "--hard" in sys.argv[1:]
    rng = random.Random(20251130)
    conversations, questions = [], []
    for index, person in enumerate(PEOPLE):
        conversation, asked = build(index, person, rng, hard)
        conversations.append(conversation)
        questions += asked
    check(conversations, questions)
    target = HERE / "hard" if hard else HERE
    target.mkdir(exist_ok=True)
    with open(target / "conversations.jsonl", "w") as out:
        out.writelines(json.dumps(c, ensure_ascii=False) + "\n" for c in conversations)
    with open(target / "questions.jsonl", "w") as out:
        out.writelines(json.dumps(q, ensure_ascii=False) + "\n" for q in questions)
    turns = sum(len(s["turns"]) for c in conversations for s in c["sessions"])  # type: ignore[misc, attr-defined]
    kinds: dict[str, int] = {}
    for q in questions:
        kinds[str(q["type"])] = kinds.get(str(q["type"]), 0) + 1
    print(f"{len(conversations)} conversations, {turns} turns, {len(questions)} questions: {kinds}")


if __name__ == "__main__":
    main()
