"""What Whisper writes where it hears no words it can read (pure).

Whisper learnt from subtitles, whose last line is often a video's sign-off, so over a
crowd's murmur, a far-off voice or a noise it often writes one: "Thank you.", "Thanks for
watching!", a subtitling credit, in whichever language it decodes. The phrases are the
ones users of Whisper servers report (openai/whisper discussion 679 and the issue
trackers of the projects built on it); ``core.quality`` drops such a text only when its
decode was unsure, so a "Thank you." somebody said stays.
"""

from __future__ import annotations

import re
import unicodedata

_STOCK_PHRASES = (
    # English ("you" alone is left to the no-speech rules: the letter U, said, reads so)
    "thank you",
    "thank you very much",
    "thank you so much",
    "thanks",
    "thanks for watching",
    "thank you for watching",
    "thank you so much for watching",
    "thanks for watching and see you next time",
    "see you next time",
    "see you in the next video",
    "please subscribe",
    "please like and subscribe",
    "subscribe to my channel",
    "bye",
    "bye bye",
    "subtitles by the amara.org community",
    # French, Spanish, Portuguese, Italian, German
    "merci",
    "merci d'avoir regardé",
    "sous-titres réalisés par la communauté d'amara.org",
    "gracias",
    "gracias por ver",
    "subtítulos realizados por la comunidad de amara.org",
    "obrigado",
    "obrigado por assistir",
    "grazie",
    "grazie per la visione",
    "sottotitoli creati dalla comunità amara.org",
    "danke",
    "vielen dank",
    "danke fürs zuschauen",
    "untertitel der amara.org-community",
    "untertitel im auftrag des zdf",
    # Russian, Japanese, Korean, Chinese
    "спасибо",
    "спасибо за просмотр",
    "продолжение следует",
    "субтитры сделал dimatorzok",
    "субтитры создавал dimatorzok",
    "ご視聴ありがとうございました",
    "시청해주셔서 감사합니다",
    "字幕由amara.org社区提供",
    "请不吝点赞 订阅 转发 打赏支持明镜与点点栏目",
    "mbc 뉴스 김지훈입니다",
)


def _letters(text: str) -> str:
    """``text`` lower-cased with its punctuation gone and its spaces single."""
    kept = "".join(
        " " if unicodedata.category(c).startswith(("P", "S")) else c for c in text.casefold()
    )
    return " ".join(kept.split())


STOCK_PHRASES = frozenset(_letters(p) for p in _STOCK_PHRASES)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])")


def is_stock_phrase(text: str) -> bool:
    """Whether every sentence of ``text`` is one of Whisper's stock phrases ("Thank you.
    Bye."), and it has at least one."""
    sentences = [_letters(s) for s in _SENTENCE_END.split(text)]
    sentences = [s for s in sentences if s]
    return bool(sentences) and all(s in STOCK_PHRASES for s in sentences)
