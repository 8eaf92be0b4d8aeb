"""The word lists the corpus statistics and the synthetic generator share.

:data:`FUNCTION_WORDS` is the closed class that :mod:`harness.datasets.stats` counts as
function words; :data:`TEMPLATE_FUNCTION_WORDS` are the ones the synthetic salience generator
(:mod:`harness.datasets.synthetic`) writes its templates with, so that both agree on which
words carry content.
"""

from __future__ import annotations

# Closed-class English words: articles and determiners, pronouns, prepositions,
# conjunctions, auxiliaries and modals, negation and common particles/adverbs of degree,
# time and place, contractions and clitics (as PTB splits them: 's n't 're 've 'll 'd 'm),
# and the Early Modern forms of Shakespeare (thou, hath, doth, 'tis, o'er ...).
FUNCTION_WORDS: frozenset[str] = frozenset(
    """
    a an the this that these those each every either neither some any no all both half
    several many much more most few fewer less least little other another such what
    whatever which whichever whose own same enough
    i me my mine myself you your yours yourself yourselves he him his himself she her hers
    herself it its itself we us our ours ourselves they them their theirs themselves one
    oneself who whom whoever whomever someone somebody something anyone anybody anything
    everyone everybody everything nobody nothing none
    about above across after against along amid among amongst around as at before behind
    below beneath beside besides between beyond by despite down during except for from in
    inside into like near of off on onto out outside over past per since than through
    throughout till to toward towards under underneath unlike until unto up upon via with
    within without
    and but or nor so yet if unless because although though while whilst whereas whether
    when whenever where wherever whereby wherein how why once lest then therefore thus
    hence however
    be am is are was were been being have has had having do does did doing done will would
    shall should can could may might must ought
    not very too also just only even still again ever never always here there now quite
    rather almost already perhaps else indeed
    s t d ll re ve m n't
    don't doesn't didn't isn't aren't wasn't weren't can't cannot couldn't won't wouldn't
    shouldn't haven't hasn't hadn't mustn't i'm i've i'll i'd you're you've you'll you'd
    he's he'll he'd she's she'll she'd it's it'll we're we've we'll we'd they're they've
    they'll they'd that's there's here's what's who's let's
    thou thee thy thine thyself ye art hast hath doth dost didst shalt wilt wouldst
    shouldst couldst canst mayst ere hither thither whither thence whence wherefore nay ay
    aye yea o oh ah tis twas o'er ne'er e'er gainst em
    """.split()
)

# Function words the synthetic generator draws its templates from (most frequent first);
# every one is in FUNCTION_WORDS, so corpus_stats recognises them.
TEMPLATE_FUNCTION_WORDS: tuple[str, ...] = (
    "the",
    "of",
    "and",
    "a",
    "to",
    "in",
    "is",
    "it",
    "that",
    "was",
    "for",
    "on",
    "with",
    "as",
    "he",
    "by",
    "at",
    "this",
    "from",
    "but",
    "not",
    "or",
    "they",
    "which",
    "be",
    "had",
    "are",
    "his",
    "her",
    "we",
    "an",
    "their",
    "there",
    "will",
    "would",
    "can",
    "all",
    "so",
    "if",
    "when",
)
