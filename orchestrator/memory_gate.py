"""The memory gate: which user messages the memory expert (a model call) reads at all.

Most messages tell nothing worth keeping about the customer: a request ("I want to
cancel"), a complaint ("I was charged twice for order A-10012"), a question, a greeting.
The memory expert runs after the reply, but in production it is a model call and its
writes follow every turn it runs on, so the gate decides first, in the turn, cheaply and
purely (no model, no I/O): a message passes when one of its clauses may state a *stable*
fact about the customer:

- a preference: a language, a channel, a time, a way to be addressed or delivered to
  ("I prefer Hindi", "email only please", "evenings after 6 are best", "call me Sam",
  "from now on leave parcels with my neighbour");
- a circumstance: where they live, diet and allergies, health and access needs, family
  and household, work, age, name ("I'm allergic to peanuts", "I've moved to Leeds",
  "I use a wheelchair", "my son is vegan", "I work nights", "I'm Priya");
- contact details they ask to be kept ("my new email is ...", "please keep my number on
  file", "I've changed my address").

A first person alone ("I", "my") is no longer enough: "I was charged twice", "my card was
declined", "I never received my refund", "I always get an error" are events, requests and
complaints. A clause that is a question ("Can you deliver in the morning?") tells nothing
lasting. The cues were tuned on the `tune` part of `benchmarks/data/memory_gate.jsonl` and
measured on its held-out part (`python -m benchmarks.memory_gate`; docs/memory.md). The gate
still errs towards yes where a cue is ambiguous: a missed fact is worse than a call.
"""

from __future__ import annotations

import re

__all__ = ["may_state_a_fact"]

_I_AM = r"\b(?:i'm|im|i am|we're|we are)"
_I_HAVE = r"\b(?:i|we) (?:have|'ve|'ve got|have got|got)"
_FAMILY = (
    r"(?:son|sons|daughter|daughters|wife|husband|partner|kids|children|child|baby|mum|mom"
    r"|mother|dad|father|parents|sister|brother|family|grandchildren|grandson|granddaughter)"
)
_LANGUAGES = (
    r"(?:english|hindi|marathi|tamil|telugu|bengali|gujarati|punjabi|urdu|kannada|malayalam"
    r"|spanish|french|german|italian|portuguese|dutch|polish|arabic|chinese|mandarin"
    r"|cantonese|japanese|korean|welsh|gaelic|irish|turkish|russian|ukrainian|romanian"
    r"|greek|swahili|yoruba|igbo|somali|farsi|persian)"
)
_CONDITION = (
    r"(?:allergic|intolerant|vegan|vegetarian|pescatarian|gluten[- ]free|dairy[- ]free"
    r"|lactose|coeliac|celiac|diabetic|kosher|halal|teetotal|deaf|blind|partially sighted"
    r"|hard of hearing|dyslexic|disabled|autistic|housebound|pregnant|retired|unemployed"
    r"|self[- ]employed|a student|a pensioner|a carer|a nurse|a doctor|a teacher"
    r"|a (?:single|new) (?:mum|mom|dad|parent)|on maternity leave|on paternity leave"
    r"|in the (?:army|navy|air force|armed forces|forces|raf)|studying|working abroad"
    r"|colou?r ?blind|registered)"
)
_NUMBER_WORDS = (
    r"(?:eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety)(?:[- ]\w+)?"
)
_CHANNEL = r"(?:email|e-mail|emails|text|texts|sms|whatsapp|post|letters?|phone|calls?|chat)"

_CUES = re.compile(
    "|".join(
        (
            # Circumstances said of oneself.
            rf"{_I_AM} (?:\w+ )?{_CONDITION}\b",
            rf"{_I_AM} (?:a|an) (?!bit\b|little\b|customer\b|long[- ]time\b|loyal\b)\w+",
            rf"{_I_AM} (?:\d{{1,3}}|{_NUMBER_WORDS})(?: years old)?(?: and\b|[,.!]|$)",
            rf"{_I_AM} (?:now |currently |still )?(?:based|living|staying|settled) (?:in|at|near)",
            r"\b(?:i|we) (?:now |currently |still )?(?:live|lives)\b",
            r"\b(?:i|we)(?:'ve| have)? (?:just |recently |now )?(?:moved|relocated) (?:to|house)",
            rf"{_I_HAVE} (?:a |an )?(?:\w+ ){{0,2}}(?:{_FAMILY}|dog|dogs|cat|cats|guide dog"
            r"|allergy|allergies|intolerance|disability|condition|bad back|wheelchair"
            r"|hearing aid)\b",
            r"\b(?:i|we) use (?:a |an )?(?:wheelchair|screen reader|hearing aid|walking stick"
            r"|mobility scooter|walker)",
            rf"\bmy {_FAMILY} (?:is|are|has|have|handles|does|doesn't|can't|cannot|and i"
            r"|will|may)\b",
            r"\b(?:we're|we are) a (?:family|household|couple) of\b|\bfamily of (?:\w+)\b",
            r"\b(?:i|we) (?:work|run|own|manage) (?:a |an |our |my )?(?:nights?|night shifts?"
            r"|shifts?|from home|\d+-hour|as |small |shop|cafe|café|restaurant|bakery"
            r"|business|farm|pub|hotel)",
            r"\bi (?:get paid|travel|commute|study|don't drive|do not drive|can't drive"
            r"|cannot drive|can't (?:take|answer) (?:calls|the phone)|can't lift|cannot lift"
            r"|can't read|can't hear|can't see)\b",
            r"\bmy (?:pension|salary|wages|benefits?) (?:comes?|come in|is paid|arrives?|lands?)"
            r" (?:in )?on\b",
            r"\bour (?:office|shop|cafe|café|restaurant|business|house|flat|porch|building)"
            r" (?:is|are|has|floods|opens|closes|shuts)\b",
            r"\b(?:my|our) (?:first|native|home|main) language\b|\bmother tongue\b",
            rf"\bi speak\b|\b(?:speak|reply|replies|write|answer|talk|letters?) (?:to me )?"
            rf"in {_LANGUAGES}\b|\b{_LANGUAGES}[- ]language\b",
            # The name (a capital after "I'm" is checked on the original text below).
            r"\bmy name(?:'s| is)\b|\baddress me as\b|\b(?:please )?call me (?!back\b|today\b"
            r"|tomorrow\b|later\b|asap\b|now\b|on\b|when\b|at\b|before\b|after\b|urgently\b"
            r"|again\b|as soon\b|if\b|about\b|in\b|this\b|within\b)\w+",
            # Preferences and standing wishes.
            r"\b(?:prefer|preferably|preference|rather)\b",
            r"\bfrom now on\b|\bgoing forward\b|\bin (?:the )?future\b|\bfor future\b",
            r"\b(?:please )?always (?:use|reply|write|send|deliver|leave|call|address|text"
            r"|email|post|contact|speak)\b",
            r"\b(?:never|don't|do not|please don't|no) (?:ever )?(?:call|ring|phone|text"
            r"|email|leave|post|send me|contact)\b|\bno (?:marketing|phone calls|calls"
            r"|cold calls|paper|letters|post)\b",
            rf"\b{_CHANNEL} only\b|\bonly (?:use|{_CHANNEL}|contact|call|text|email|by)\b",
            r"\b(?:contacted|reached|contact me) (?:by|via|on|through)\b",
            r"\b(?:suits?|works? for|best for) me\b|\b(?:is|are) best\b|\bi (?:like|love"
            r"|hate|dislike|don't like|can't stand) (?:my|to|it|when|getting|being|\w+s)\b",
            r"\bi usually\b|\bas (?:my|the) default\b",
            r"\bin the (?:mornings?|afternoons?|evenings?)\b|\b(?:weekends?|weekdays?|evenings?"
            r"|mornings?) (?:deliver|suit|work|are)",
            # Contact details to keep.
            r"\bmy (?:new |postal |home |work |personal |mobile |email )?(?:address|e-?mail"
            r"|phone|number|mobile|landline)(?: number| address)? (?:is|has changed|'s"
            r"|changed)\b",
            r"\b(?:changed|update|updated|note) my (?:new )?(?:\w+ )?(?:address|e-?mail"
            r"|phone|number|mobile|details|name)\b|\bon file\b|\b(?:keep|use) it from now\b",
        )
    )
)
# "I'm Priya", "Hi, I am Ade": a capitalised word after "I'm" (not a sentence's first word).
_NAMED = re.compile(r"\bI(?:'m| am) ([A-Z][a-z]+)\b")
_NOT_NAMES = frozenset({"Not", "So", "Still", "Very", "Really", "Just", "Sorry", "Afraid"})
# More ways to ask for something to be kept or done from now on.
_KEEP = re.compile(
    r"\b(?:large print|braille|easy[- ]read)\b|\bstop (?:sending|calling|texting|emailing"
    r"|posting)\b|\bnew (?:mobile|e-?mail|address|number|phone|landline)\b|\b(?:record|save"
    r"|keep) my\b|\buse my (?:\w+ )?name\b|\bfuture (?:letters|post|deliveries|orders"
    r"|statements|calls|emails|messages|correspondence)\b"
)
# A clause about the speaker ...
_ABOUT_ME = re.compile(r"\b(?:i|i'm|im|i've|i'd|i'll|me|my|mine|we|we're|we've|our|us)\b")
# ... that is a request, an event or a complaint rather than a lasting fact: an action on
# an account or an order, something that happened, went wrong or is wanted now.
_EVENT = re.compile(
    r"\b(?:(?:over|under|double[- ])?charged?|charges|(?:double[- ])?billed|refunds?|refunded"
    r"|paid|pay|paying|payments?|transactions?|transfer(?:red|s)?|debit|declined|blocked"
    r"|frozen|freeze|fail(?:ed|s|ing)?|bounced|receiv(?:e|ed|ing)|arriv(?:e|ed|es)|order(?:s|ed)?"
    r"|cancel(?:led|ling)?|dispute|fraud\w*|scam\w*|stolen|lost|broken|damaged|rotten|mouldy"
    r"|wrong|error|errors|crash\w*|wait(?:ed|ing)?|hold|promised|missing|late|locked|log(?:ged)?"
    r" (?:in|out)|login|reset|password|pin|code|codes|fees?|balance|owe|arrears|overdue"
    r"|complain\w*|unhappy|upset|furious|disappointed|fed up|annoyed|ridiculous|rude|problem"
    r"|issue|parcel|package|loan|mortgage|callback|call (?:me )?back|report|statement"
    r"|want|wanted|wants|need|needs|'d like|would like|try|trying|tried|think|called|calling"
    r"|today|yesterday|tomorrow|tonight|last (?:night|week|month|time)|this (?:time|once|one)"
    r"|again|still (?:waiting|not|no|hasn't|haven't)|keeps?|kept|hasn't|haven't|didn't"
    r"|isn't working|not working|won't|doesn't work|never (?:got|received|agreed|asked"
    r"|authori[sz]ed|signed|came|arrived)|not (?:right|happy|getting|received)"
    r"|(?:doesn't|does not|don't) (?:look|seem) right|customer|been with you|send|check"
    r"|help|sort|fix|explain|tell me|let me know|account|card|app|stuck|stopped|report|away|sent)\b"
)
# The words a `_CUES` match can begin with: each of its alternatives starts with `\b` and
# one of these whole words ("i" of "i'm", "e" of "e-mail"), so a clause with none of them
# has no cue, and one with some has a cue only where one of them stands (searching the whole
# alternation at every position of every clause was most of the gate's time). The test
# tests/orchestrator/test_memory_gate_equivalence.py derives the set from `_CUES` itself.
_CUE_STARTS = frozenset(
    (
        "i im we my our family mother speak reply replies write answer talk letter letters"
        " address please call calls prefer preferably preference rather from going in for"
        " always never don do no email e emails text texts sms whatsapp post phone chat only"
        " contacted reached contact suit suits work works best is are as weekend weekends"
        " weekday weekdays evening evenings morning mornings changed update updated note on"
        " keep use"
    ).split()
) | frozenset(_LANGUAGES[3:-1].split("|"))  # The names in `(?:...)`.
# The words a `_KEEP` match can begin with (checked alike).
_KEEP_STARTS = frozenset("large braille easy stop new record save keep use future".split())
_WORD = re.compile(r"\w+")
# Standing wishes still worth a look when they come as a question ("Could you write in
# French from now on?").
_STANDING = re.compile(r"\bfrom now on\b|\bgoing forward\b|\bin (?:the )?future\b|\bfuture \w+")
# A clause: a sentence, or a part of one after a comma or semicolon.
_CLAUSE = re.compile(r"[^.!?;,]+[.!?;,]*")


def _has_cue(folded: str, words: set[str]) -> bool:
    """`_CUES.search(folded)` (`words`: the words of `folded`), tried only at the places where
    a word that can begin a match stands (`_CUE_STARTS`)."""
    for start in _CUE_STARTS.intersection(words):
        at = folded.find(start)
        while at >= 0:  # Every place the word stands (the match checks its boundaries).
            if _CUES.match(folded, at):
                return True
            at = folded.find(start, at + 1)
    return False


def may_state_a_fact(text: str) -> bool:
    """Whether a user message may tell something stable about the customer worth
    remembering (a preference, a circumstance, contact details to keep); the memory expert
    (a model call) runs only on those. A request or a complaint ("I was charged twice",
    "I want to cancel") does not, and neither does a question ("Can I pay with a gift
    card?"). Cheap and pure (no model, no I/O), so it is decided in the turn, whatever
    schedules the learning.

    A clause passes on a cue of a stable fact (`_CUES`, `_KEEP`, a name after "I'm"), or
    when it speaks of the speaker and shows no sign of a request, an event or a complaint
    (`_EVENT`): unknown ways of telling a fact get the benefit of the doubt."""
    said = text.replace("\u2019", "'")
    for clause in _CLAUSE.findall(said):
        folded = clause.casefold()
        if clause.rstrip().endswith("?"):
            if _STANDING.search(folded):
                return True
            continue
        words = set(_WORD.findall(folded))
        if _has_cue(folded, words) or (not _KEEP_STARTS.isdisjoint(words) and _KEEP.search(folded)):
            return True
        named = _NAMED.search(clause)
        if named is not None and named.group(1) not in _NOT_NAMES:
            return True
        if _ABOUT_ME.search(folded) and not _EVENT.search(folded):
            return True
    return False
